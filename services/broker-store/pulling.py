"""The pull path and long polling.

A pull that finds nothing new is held (up to its suspend time) per
(topic, queue) and re-run the moment a put for that queue becomes visible —
not on a timer tick. The reply body is the stored records, concatenated, in
one frame; the SDK decodes them with one struct format.

Memory: a held pull lives only in `held` until it is answered, woken or expired.
Expiry is one sweep timer armed for the earliest deadline held, not a timer per
pull: a timer per pull, cancelled when a put answers it early (the usual case
under load), kept the request and its frames in the service's timer heap for the
rest of its suspend time — at 2k msg/s some 10k dead requests and 20+ MB of
heap, and the peaks never went back to the OS.
"""

import itertools
import logging
import time
from dataclasses import dataclass

from quiver.wire import tags
from quiver.wire.codes import RequestCode, ResponseCode
from quiver.wire.replies import PullReply
from quiver.errors import InvalidParameterError, QuiverError, TopicNotExistError

from .status_codes import pull_code
from .tiered_reads import NeedsFetch, in_background
from .traffic import Traffic

log = logging.getLogger(__name__)


@dataclass(slots=True)
class HeldPull:
    req: object               # quiver.runtime.service.Request
    topic: str
    queue_id: int
    offset: int
    max_msgs: int
    hashes: object            # tag hashes of the subscription (None: every tag)
    max_bytes: int
    deadline: float = 0.0     # time.monotonic() when it is answered PULL_NOT_FOUND


class Puller:
    """PULL_MESSAGE; `notify` is what a put (or a replicated chunk) calls for its queue."""

    def __init__(self, store, topics, metadata, service, counters, max_suspend_ms: int, clock=time.monotonic,
                 traffic=None):
        self.store = store
        self.topics = topics
        self.metadata = metadata
        self.service = service            # call_later: the expiry sweep
        self.counters = counters
        self.max_suspend_ms = max_suspend_ms
        self.clock = clock
        self.traffic = traffic if traffic is not None else Traffic()  # messages and bytes out: /metrics
        self.held: dict[tuple[str, int], list[HeldPull]] = {}
        self._sweep_at: float | None = None   # deadline the live sweep timer is armed for
        self._sweep_ids = itertools.count()
        self._sweep_id = -1

    def handlers(self) -> dict:
        return {RequestCode.PULL_MESSAGE: self.handle}

    def handle(self, req) -> None:
        a = req.args
        topic, queue_id, offset = a.topic, a.queue_id, a.offset
        conf = self.topics.get(topic)
        if conf is None:
            raise TopicNotExistError(f"topic {topic!r} does not exist on this broker")
        if queue_id >= max(conf["read"], 1):
            raise InvalidParameterError(f"queue {queue_id} is not a read queue of {topic!r} (it has {conf['read']})")
        if a.expression_type not in ("TAG", None):
            raise InvalidParameterError("SQL92 subscriptions are pulled through a filter server, not the broker")
        if a.group and (moved := self.metadata.reset_target(a.group, topic, queue_id, offset)) is not None:
            # the group's offsets were reset and this consumer has not moved yet: its commit is stale
            lo, hi = self.store.min_offset(topic, queue_id), self.store.max_offset(topic, queue_id)
            req.reply(ResponseCode.PULL_OFFSET_MOVED, f"the group's offset was reset: pull from {moved}",
                      PullReply(next=moved, min=lo, max=hi))
            return
        if a.group and a.commit_offset is not None and a.commit_offset >= 0:
            # forward only: a pull sent before its queue moved may arrive after the final commit; never
            # past the queue's end (a consumer that read what a failover cut is moved back by this pull)
            commit = min(a.commit_offset, self.store.queue_end(topic, queue_id))
            self.metadata.commit_offset(a.group, topic, queue_id, commit, advance=True)
        suspend_ms = min(a.suspend_ms, self.max_suspend_ms)
        task = HeldPull(req, topic, queue_id, offset, min(a.max_msgs, 1024), tags.hashes(a.expression), a.max_bytes)
        if not self._try(task, final=suspend_ms <= 0):
            task.deadline = self.clock() + suspend_ms / 1000
            self.held.setdefault((topic, queue_id), []).append(task)
            self.counters["pulls_held"] += 1
            if self._sweep_at is None or task.deadline < self._sweep_at:
                self._arm(task.deadline)

    def _try(self, task: HeldPull, final: bool, background: bool = True) -> bool:
        """Run the pull; answer unless it found nothing new and may wait. True if answered.
        `background`: a read of the tiered store that misses its cache answers later, not now."""
        if task.deadline and (denied := task.req.denied_now()) is not None:
            # held since before the sender's user was deleted or lost SUB: nothing stored since
            self.counters["held_pulls_denied"] += 1
            task.req.reply(ResponseCode.NO_PERMISSION, denied)
            return True
        offset = task.offset
        try:
            with in_background(self.store, background):
                res = self.store.get_messages(task.topic, task.queue_id, offset, task.max_msgs, task.hashes,
                                              task.max_bytes)
        except NeedsFetch as miss:   # a chunk of the tiered store on its way: run again once it is here
            miss.future.add_done_callback(lambda _: self.service.call_soon_threadsafe(self._fetched, task))
            return True
        code, remark = pull_code(res.status, offset, res.min_offset, res.max_offset)
        if code == ResponseCode.PULL_NOT_FOUND and not final:
            return False  # nothing new yet (at the queue's end, an empty queue at 0, or not yet flushed)
        ext = PullReply.wire(res.next_offset, res.min_offset, res.max_offset)   # the hot path's form
        if code == ResponseCode.SUCCESS:
            self.counters["pulled_messages"] += res.count
            self.traffic.pulled(task.topic, task.req.args.group, res.count, len(res.data))
            task.req.reply(code, "", ext, (res.data,))
        else:
            task.req.reply(code, remark, ext)
        return True

    def _fetched(self, task: HeldPull) -> None:
        if task.req.answered:
            return
        try:   # waiting on the store this time if it needs more (a small cache may have evicted it)
            self._try(task, final=True, background=False)
        except QuiverError as exc:   # the remote chunk is damaged or the store unreachable (tiered_reads)
            task.req.reply(exc.code, exc.remark)

    def notify(self, topic: str, queue_id: int) -> None:
        key = (topic, queue_id)
        waiting = self.held.get(key)
        if not waiting:
            return
        keep = [task for task in waiting if not task.req.answered and not self._try(task, final=False)]
        if keep:
            self.held[key] = keep
        else:
            del self.held[key]

    # ---- expiry ----------------------------------------------------------------------

    def _arm(self, deadline: float) -> None:
        """One live sweep timer, at the earliest deadline (an earlier hold re-arms it; the
        superseded timer finds its id stale and does nothing)."""
        self._sweep_at = deadline
        self._sweep_id = sweep_id = next(self._sweep_ids)
        self.service.call_later(max(0.0, deadline - self.clock()), self._sweep, sweep_id)

    def _sweep(self, sweep_id: int) -> None:
        if sweep_id != self._sweep_id:
            return
        self._sweep_at = None
        nxt = self.expire_step()
        if nxt is not None:
            self._arm(nxt)

    def expire_step(self, now: float | None = None) -> float | None:
        """Answer every held pull past its deadline (PULL_NOT_FOUND, or what arrived meanwhile);
        returns the earliest deadline still held (None: nothing held)."""
        now = self.clock() if now is None else now
        earliest = None
        for key in list(self.held):
            keep = []
            for task in self.held[key]:
                if task.req.answered:
                    continue
                if task.deadline <= now:
                    try:
                        self._try(task, final=True)
                    except Exception:  # one failed read must not leave every other pull held forever
                        log.exception("expiring a held pull of %s/%d failed", task.topic, task.queue_id)
                        self.counters["pull_expiry_errors"] += 1
                    continue
                keep.append(task)
                if earliest is None or task.deadline < earliest:
                    earliest = task.deadline
            if keep:
                self.held[key] = keep
            else:
                del self.held[key]
        return earliest

    def held_count(self) -> int:
        return sum(len(v) for v in self.held.values())
