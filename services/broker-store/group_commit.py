"""SYNC flush's group commit: puts waiting for the flush that covers them, in offset order.

Owns the one waiting list of the broker. A put that must not be seen (and,
with WAIT, not answered) before it is on disk is added with `wait`; the flush
thread's progress comes back to the service thread as `on_flushed(offset)`,
which completes every entry ending at or before it at once (RocketMQ's
GroupCommitService); each `wait` first answers what a finished flush already
covers (`catch_up`: the report queues behind the socket's drain); `expire(now)` answers FLUSH_DISK_TIMEOUT past the
deadline (the data is stored, and the entry stays until its flush makes its
queue visible). A flushed reply of a SYNC_MASTER is handed to `slave_wait`
(ha_master.ReplicationMaster.wait_for_slave) instead of answered here.
With `defer` (the service's call_soon_threadsafe) the flush is asked once per
loop turn, after the socket's drain: the puts of one drain share one fdatasync
(the window grows with the load) instead of the first waking the flush thread
alone while the rest of the drain waits for the next pass.
Does not own the flush (store.py) nor the slave acks (ha_master.py).
"""

import collections
import time
from dataclasses import dataclass

from quiver.wire.codes import ResponseCode


@dataclass(slots=True)
class Waiter:
    end: int            # CommitLog offset the put ends at
    deadline: float     # time.monotonic()
    req: object         # quiver.runtime.service.Request, or None when answered already (or by a later entry)
    reply_ext: dict
    topic: str          # the queue whose pulls wake once flushed
    queue_id: int


class GroupCommit:
    def __init__(self, store, sync: bool, timeout_ms: int, notify, slave_wait=None, defer=None):
        self.store = store
        self.defer = defer              # defer(fn): run fn after this loop turn (None: ask at once)
        self._asked = False             # a deferred flush request is pending
        self.sync = sync
        self.timeout_ms = timeout_ms
        self.notify = notify            # notify(topic, queue_id): wake pulls held on a queue
        self.slave_wait = slave_wait    # SYNC_MASTER: slave_wait(end, req, reply_ext)
        self.waiting: collections.deque[Waiter] = collections.deque()

    def __len__(self) -> int:
        return len(self.waiting)

    def wait(self, req, reply_ext: dict, touched: list[tuple[str, int, int]]) -> None:
        """Answer `req` (None: nobody) once the last of `touched` — (topic, queue id, end
        offset) per put, in put order — is flushed; every touched queue wakes then."""
        deadline = time.monotonic() + self.timeout_ms / 1000
        last = len(touched) - 1
        for n, (topic, queue_id, end) in enumerate(touched):
            self.waiting.append(Waiter(end, deadline, req if n == last else None, reply_ext, topic, queue_id))
        if self.defer is None:
            self.store.request_flush(touched[-1][2])
        elif not self._asked:
            self._asked = True
            self.defer(self._ask_flush)
        self.catch_up()

    def _ask_flush(self) -> None:
        """The loop turn's puts are written: one flush for all of them."""
        self._asked = False
        if self.waiting:
            self.store.request_flush(self.waiting[-1].end)

    def catch_up(self) -> None:
        """Answer now what a flush the flush thread has finished already covers (service thread).

        Its own report (`on_flushed`) waits behind the poll loop's drain of the socket;
        `flushed_offset` moves only once an fdatasync returned, so reading it here is as
        safe as that report and saves the wait for it."""
        w = self.waiting
        if w and w[0].end <= self.store.flushed_offset:
            self.on_flushed(self.store.flushed_offset)

    def answer(self, req, reply_ext: dict, touched: list[tuple[str, int, int]]) -> None:
        """Answer once what was written is visible: after its group commit with SYNC flush, now with ASYNC."""
        if self.sync and touched:
            self.wait(req, reply_ext, touched)
            return
        req.reply(ResponseCode.SUCCESS, "", reply_ext)
        for topic, queue_id, _ in touched:
            self.notify(topic, queue_id)

    def on_flushed(self, offset: int) -> None:
        """The CommitLog is flushed up to `offset` (service thread).

        Capped at the store's flushed offset now: a put that failed after the flush
        thread synced part of it is cut back (and the offset with it) before this
        runs, and its bytes must not acknowledge the next put written there."""
        offset = min(offset, self.store.flushed_offset)
        touched = set()
        w = self.waiting
        while w and w[0].end <= offset:
            e = w.popleft()
            if e.req is not None and not e.req.answered:
                if self.slave_wait is not None:
                    self.slave_wait(e.end, e.req, e.reply_ext)
                else:
                    e.req.reply(ResponseCode.SUCCESS, "", e.reply_ext)
            touched.add((e.topic, e.queue_id))
        for topic, queue_id in touched:
            self.notify(topic, queue_id)

    def expire(self, now: float | None = None) -> None:
        """Answer FLUSH_DISK_TIMEOUT to what waited past its deadline (deadlines grow with offsets)."""
        now = time.monotonic() if now is None else now
        for e in self.waiting:
            if e.deadline > now:
                break
            if e.req is not None and not e.req.answered:
                e.req.reply(ResponseCode.FLUSH_DISK_TIMEOUT,
                            f"stored but not flushed within {self.timeout_ms} ms", e.reply_ext)
