"""PullConsumer's queue positions and the buffer poll() drains.

Each assigned queue has a QueueState: the next offset to pull, the next one the
app has not polled, what is buffered of it and whether its one pull is under
way. Pulled messages wait in one buffer, in pull order. Every change happens
under one condition (`cond`, which poll() waits on); a queue's `gen` is bumped
by a seek, reset, drop or unsubscribe, so the answer of a pull started before
is dropped. A queue whose buffered messages reach `cached_max` pauses until
poll() has taken half of them. Owns no I/O: the consumer sends and holds the
pulls (queue_puller.py, direct_poll.py) and commits.
"""

import collections
import threading
from collections.abc import Callable

from quiver.client.base import MessageQueue
from quiver.client.message import MessageExt
from quiver.client.queue_puller import Readable

# a claimed pull: (queue, its gen, the offset to pull from, one record at a time)
Claim = tuple["QueueState", int, int, bool]


class QueueState:
    __slots__ = ("mq", "_addr", "next", "consumed", "committed", "in_flight", "buffered", "paused", "gen",
                 "narrow_until", "held_id")

    def __init__(self, mq: MessageQueue, addr: str, offset: int) -> None:
        self.mq, self._addr = mq, addr
        self.next = offset          # next offset to pull
        self.consumed = offset      # next offset the app has not polled yet
        self.committed: int | None = None
        self.in_flight = False
        self.buffered = 0
        self.paused = False
        self.gen = 0                # bumped by seek, reset and drop: replies of older pulls are dropped
        self.narrow_until = 0       # below this offset pull one record at a time (after an unwalkable answer)
        self.held_id: int | None = None   # direct_poll: the pull a poll() thread holds for it

    @property
    def addr(self) -> str:
        """The broker address reads and commits go to (the master, or a slave while it is down)."""
        return self._addr

    @addr.setter
    def addr(self, addr: str) -> None:
        if addr != self._addr:
            self._addr, self.committed = addr, None   # the new address has not stored our offset


class PullBuffer:
    """The assigned queues (`queues`) and what is pulled of them; `cached_max`: buffered
    messages of one queue before its pulls pause."""

    def __init__(self, cached_max: int) -> None:
        self.cached_max = cached_max
        self.queues: dict[MessageQueue, QueueState] = {}
        # (queue, its pulled messages, the offset after them), in pull order
        self.items: collections.deque[tuple[QueueState, list[MessageExt], int]] = collections.deque()
        self.cond = threading.Condition()

    def _unbuffer(self, gone: Callable[[QueueState], bool]) -> None:   # caller holds cond
        self.items = collections.deque(m for m in self.items if not gone(m[0]))

    def forget(self, topic: str) -> None:
        """An unsubscribed topic: its buffer goes, its queues pause until released."""
        with self.cond:
            self._unbuffer(lambda st: st.mq.topic == topic)
            for st in self.queues.values():
                if st.mq.topic == topic:
                    st.gen += 1   # a pull under way is ignored
                    st.buffered, st.paused, st.in_flight = 0, True, False

    def remove(self, mq: MessageQueue) -> QueueState | None:
        """A released queue: no more pulls, its buffer goes."""
        with self.cond:
            st = self.queues.pop(mq, None)
            if st is not None:
                st.gen += 1  # replies of pulls under way are ignored
                st.paused = True
                self._unbuffer(lambda s: s is st)
            return st

    def restart(self, st: QueueState, offset: int) -> None:
        """Drop what is buffered of the queue and its pull under way; it pulls from `offset` next."""
        with self.cond:
            st.gen += 1
            self._unbuffer(lambda s: s is st)
            st.buffered = 0
            st.next = st.consumed = offset
            st.in_flight = st.paused = False
            st.narrow_until = 0

    def _claimable(self, st: QueueState) -> bool:   # caller holds cond
        if st.in_flight or st.paused:
            return False
        if st.buffered >= self.cached_max:
            st.paused = True
            return False
        st.in_flight = True
        return True

    def claim(self, st: QueueState) -> Claim | None:
        """The queue's one pull, if it may pull now (claiming it is atomic: two pulls at one
        offset would deliver its messages twice)."""
        with self.cond:
            if not self._claimable(st):
                return None
            return st, st.gen, st.next, st.next < st.narrow_until

    def claim_idle(self) -> list[Claim]:
        """Every queue no pull is under way for, claimed (caller holds cond)."""
        return [(st, st.gen, st.next, st.next < st.narrow_until) for st in self.queues.values()
                if self._claimable(st)]

    def held(self, st: QueueState, gen: int, req_id: int | None) -> bool:
        """A claimed pull held on a poll() thread's socket (`req_id`), or not sent (None: the
        claim is handed back). False when the queue restarted meanwhile."""
        with self.cond:
            if gen != st.gen:
                return False
            if req_id is None:
                st.in_flight = False
            else:
                st.held_id = req_id
            return True

    def take_back(self, st: QueueState, gen: int, req_id: int) -> bool:
        """A held pull its thread did not read in time: the claim ends (its answer, if read
        after all, is dropped). False if it was answered or the queue moved on."""
        with self.cond:
            if st.gen != gen or st.held_id != req_id or self.queues.get(st.mq) is not st:
                return False
            st.gen += 1
            st.in_flight, st.held_id = False, None
            return True

    def answered(self, st: QueueState, gen: int) -> bool:
        """The claimed pull is over (its answer applied); False if the queue restarted meanwhile."""
        with self.cond:
            if gen != st.gen:
                return False  # seek, reset or drop restarted the queue, in_flight included
            st.in_flight = False  # only now: st.next has moved, so the next pull starts past this batch
            st.held_id = None
            return True

    def found(self, st: QueueState, gen: int, got: Readable) -> bool | None:
        """A pull's decoded messages are buffered and the position moves: True when something
        was buffered, False when not, None when a seek, reset or drop superseded the pull."""
        nxt, msgs = got.next, got.msgs
        with self.cond:
            if gen != st.gen:
                return None
            st.next = nxt
            st.narrow_until = max(st.narrow_until, got.narrow_until)
            if msgs:
                self.items.append((st, msgs, nxt))
                st.buffered += len(msgs)
                self.cond.notify_all()
                return True
            if st.consumed < nxt and st.buffered == 0:
                st.consumed = nxt  # all filtered out (or undecodable): still consumed
            return False

    def moved(self, st: QueueState, gen: int, nxt: int, illegal: bool) -> bool:
        """Nothing to hand over, or (`illegal`) the offset moved: the position moves to `nxt`
        (an illegal offset drops what is buffered: it lies elsewhere). False if superseded."""
        with self.cond:
            if gen != st.gen:
                return False
            st.next = nxt
            if illegal:
                st.narrow_until = 0
                if st.buffered:   # the group's offset was reset meanwhile
                    self._unbuffer(lambda s: s is st)
                    st.buffered = 0
            if st.buffered == 0 and (illegal or st.consumed < nxt):
                st.consumed = nxt
            return True

    def drain(self, max_messages: int | None) -> tuple[list[MessageExt], list[QueueState]]:
        """What is buffered (up to `max_messages`), now polled, and the paused queues that may
        pull again (caller holds cond)."""
        out: list[MessageExt] = []
        resume: list[QueueState] = []
        items = self.items
        while items and (max_messages is None or len(out) < max_messages):
            st, msgs, nxt = items[0]
            room = len(msgs) if max_messages is None else max_messages - len(out)
            take = msgs[:room]
            out.extend(take)
            st.buffered -= len(take)
            if len(take) == len(msgs):
                items.popleft()
                st.consumed = nxt
            else:
                items[0] = (st, msgs[room:], nxt)
                st.consumed = take[-1].queue_offset + 1
            if st.paused and st.buffered < self.cached_max // 2:
                st.paused = False
                resume.append(st)
        return out, resume
