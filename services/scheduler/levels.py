"""Delay-level delivery: one FIFO per owned SCHEDULE_TOPIC_XXXX queue.

Owns the per-queue state machine (runs on the service thread only):
pull -> buffer (due = store_timestamp + the broker's delay for that level, what
the ConsumeQueue tagsCode holds) -> one timer for the head's due time ->
SCHEDULE_REPUT of the due head messages (batched within reput.py's limits;
`reput_window` requests under way per queue) -> commit the group's offset on
the broker. A crash between a re-put and its commit re-delivers that batch
only (at-least-once; same msgId).
One poisoned message never stops a queue: a message whose REAL_TOPIC / REAL_QID
is malformed is skipped before its re-put, and one the broker refuses
(MESSAGE_ILLEGAL, its index in `bad`) is dropped while the rest of its batch is
re-put; both are logged and counted (`poisoned_skipped` in STATUS counters).
`pull` is the pull cycle both level and timer queues run (the request and its
answer are quiver.client.queue_puller's; records stay raw record.Record).
Does not own allocation (allocation.py / membership.py), timers (timers.py)
nor the re-put's batch limits and wire shapes (reput.py).
"""

import collections
import logging
import time

from quiver.client import queue_puller
from quiver.wire import properties
from quiver.wire import record
from quiver.wire import requests as rq
from quiver.wire.codes import ResponseCode
from quiver.errors import QuiverError
from quiver.client.queue_puller import FOUND, OFFSET_ILLEGAL
from quiver.wire.properties import REAL_QID, REAL_TOPIC, UNIQ_KEY
from quiver.wire.ids import offset_msg_id
from quiver.wire.validation import SCHEDULE_TOPIC
from quiver.wire.property_string import get_property

from . import reput
from .cancels import topic_of

log = logging.getLogger(__name__)

LONG_POLL_MS = 15_000     # a pull that finds nothing is held this long by the broker
PULL_RETRY_S = 1.0        # after a failed or garbled pull


def wake_at(service, q, due_ms: int, deliver, arm) -> None:
    """Deliver now if the head of `q` is due, else set the queue's one timer for its due
    time (no polling); the timer re-arms through `arm`. Used by level and timer queues."""
    if q.timer is not None:
        service.cancel(q.timer)
        q.timer = None
    wait = due_ms - now_ms()
    if wait > 0:
        q.timer = service.call_later(wait / 1000, fired, q, arm)
    else:
        deliver(q)


def fired(q, arm) -> None:
    q.timer = None
    arm(q)


def now_ms() -> int:
    return int(time.time() * 1000)


def msg_id_of(rec) -> str:
    return get_property(rec.props, UNIQ_KEY) or offset_msg_id(rec.store_host, rec.phys_offset)


def poison_of(props: str) -> str | None:
    """Why a parked message cannot go back to its real queue (REAL_TOPIC / REAL_QID
    malformed), or None. The broker checks again, and also the real topic's queue count."""
    return properties.first_problem(props, (REAL_TOPIC, REAL_QID))


def skip_poisoned(app, unit, msg_id: str, remark: str) -> None:
    """One poisoned message left behind: counted in STATUS, logged, and the queue goes on."""
    app.service.counters["poisoned_skipped"] += 1
    log.warning("%s: message %a skipped, it cannot be delivered: %s", unit, msg_id, remark)


def pull(app, q, topic: str, max_msgs: int, then, again) -> None:
    """One long-polling pull of `q`'s queue (`q.unit`, `q.addr`) from `q.next_pull` as the
    scheduler group. On the service thread, unless `q` was stopped meanwhile: `then(q, pulled)`
    with the answer (queue_puller.Pulled), or, for a failed or garbled one (logged), `again(q)`
    a second later."""
    q.pulling = True
    req = queue_puller.request(topic, q.unit.queue_id, q.next_pull, group=app.config.group, max_msgs=max_msgs,
                               suspend_ms=LONG_POLL_MS)

    def answered(env) -> None:
        q.pulling = False
        if not q.active:
            return
        try:
            pulled = queue_puller.read(env)
        except QuiverError as exc:
            log.warning("pull %s failed: %s", q.unit, exc)
            app.service.call_later(PULL_RETRY_S, again, q)
            return
        then(q, pulled)
    app.request(q.addr, req, answered, timeout=LONG_POLL_MS / 1000 + queue_puller.REPLY_GRACE_S)


class LevelQueue:
    __slots__ = ("unit", "addr", "delay_ms", "max_bytes", "next_pull", "delivered", "committed", "buffer",
                 "in_flight", "pulling", "timer", "active", "max_offset")

    def __init__(self, unit, addr: str, delay_ms: int, offset: int, max_bytes: int):
        self.unit, self.addr, self.delay_ms, self.max_bytes = unit, addr, delay_ms, max_bytes
        self.next_pull = self.delivered = offset
        self.committed = offset
        self.buffer = collections.deque()   # (due_ms, queue_offset, msg_id, record)
        self.in_flight = collections.deque()  # [batch, done, end offset] per SCHEDULE_REPUT under way, in order
        self.pulling = False
        self.timer = None
        self.active = True
        self.max_offset = offset

    @property
    def pending(self) -> int:
        return max(self.max_offset, self.next_pull) - self.delivered


class Levels:
    def __init__(self, app):
        self.app = app
        self.config = app.config
        self.queues: dict = {}              # unit -> LevelQueue
        self.buffered: dict[str, LevelQueue] = {}   # msg id -> queue (for cancel)
        self.in_flight_ids: set[str] = set()

    # ---- lifecycle ------------------------------------------------------------------

    def start(self, unit, addr: str, delay_ms: int, offset: int, max_bytes: int) -> None:
        """Deliver `unit` from `offset`; `max_bytes`: the body bytes one re-put to its broker may carry."""
        q = LevelQueue(unit, addr, delay_ms, offset, max_bytes)
        self.queues[unit] = q
        log.info("delivering %s from offset %d (delay %d ms)", unit, offset, delay_ms)
        self._pull(q)

    def stop(self, unit) -> None:
        q = self.queues.pop(unit, None)
        if q is None:
            return
        q.active = False
        if q.timer is not None:
            self.app.service.cancel(q.timer)
        for _, _, mid, _ in q.buffer:
            self.buffered.pop(mid, None)
        q.buffer.clear()
        if not q.in_flight:
            self._commit(q)
        log.info("released %s at offset %d", unit, q.delivered)

    def stop_all(self) -> None:
        for unit in list(self.queues):
            self.stop(unit)

    # ---- pulling ------------------------------------------------------------------------

    def _pull(self, q: LevelQueue) -> None:
        if not q.active or q.pulling or len(q.buffer) >= self.config.buffer_per_queue:
            return
        pull(self.app, q, SCHEDULE_TOPIC, self.config.pull_batch, self._pulled, self._pull)

    def _pulled(self, q: LevelQueue, pulled) -> None:
        q.max_offset, nxt = pulled.max, pulled.next
        if pulled.status is FOUND:
            delay = q.delay_ms
            buf, ids = q.buffer, self.buffered
            for rec in pulled.records():
                if rec.queue_offset < q.next_pull:
                    continue
                mid = msg_id_of(rec)
                buf.append((rec.store_ts + delay, rec.queue_offset, mid, rec))
                ids[mid] = q
            q.next_pull = nxt
            self._arm(q)
        elif pulled.status is OFFSET_ILLEGAL:
            log.warning("%s offset moved %d -> %d (messages expired before delivery)", q.unit, q.next_pull, nxt)
            q.next_pull = nxt
            if not q.buffer and not q.in_flight:
                q.delivered = nxt
                self._commit(q)
        else:
            q.next_pull = max(q.next_pull, nxt)
        self._pull(q)

    # ---- delivering ----------------------------------------------------------------------

    def _arm(self, q: LevelQueue) -> None:
        if not q.active or len(q.in_flight) >= self.config.reput_window or not q.buffer:
            return
        wake_at(self.app.service, q, q.buffer[0][0], self._deliver, self._arm)

    def _deliver(self, q: LevelQueue) -> None:
        now = now_ms()
        buf, cancelled = q.buffer, self.app.cancelled
        batch, skipped_to = [], None
        budget = reput.Budget(self.config.max_reput_batch, q.max_bytes)
        while buf and buf[0][0] <= now:
            item = buf[0]
            _, qoff, mid, rec = item
            if cancelled.hits(mid, rec.props):
                self.app.stats.cancelled_skipped += 1
                skipped_to = qoff + 1
            elif (problem := poison_of(rec.props)) is not None:
                skip_poisoned(self.app, q.unit, mid, problem)
                skipped_to = qoff + 1
            elif budget.take(rec.body, rec.props):
                batch.append(item)
            else:
                break  # full: the rest goes in the next re-put
            buf.popleft()
            self.buffered.pop(mid, None)
        if not batch:
            if skipped_to is not None and not q.in_flight:
                q.delivered = skipped_to
                self._commit(q)
            self._arm(q)
            self._pull(q)
            return
        # once done, progress covers the batch and any message skipped after it
        entry = [batch, False, max(batch[-1][1] + 1, skipped_to or 0)]
        q.in_flight.append(entry)
        self.in_flight_ids.update(i[2] for i in batch)
        self._send(q, entry)
        self._arm(q)  # several re-puts of one queue may be under way (reput_window)

    def _send(self, q: LevelQueue, entry) -> None:
        batch = entry[0]
        req, frames = reput.request([i[3] for i in batch], [i[0] for i in batch])
        self.app.request(q.addr, req, lambda env: self._reput_done(q, entry, env), frames, timeout=10.0)

    def _reput_done(self, q: LevelQueue, entry, env) -> None:
        batch = entry[0]
        bad = reput.refused(env, len(batch))
        if bad:  # drop what the broker refused, re-put the rest in the same place of the order
            for i in sorted(bad):
                skip_poisoned(self.app, q.unit, batch[i][2], env.remark)
                self.in_flight_ids.discard(batch[i][2])
            entry[0] = batch = [item for i, item in enumerate(batch) if i not in bad]
            if batch:
                self._send(q, entry)
                return
            env = None  # nothing left to deliver: the entry is done
        self.in_flight_ids.difference_update(i[2] for i in batch)
        if env is not None and (isinstance(env, Exception) or env.code != ResponseCode.SUCCESS):
            log.warning("re-put of %d from %s failed (%s); retrying", len(batch), q.unit,
                        env if isinstance(env, Exception) else env.remark)
            q.in_flight.remove(entry)
            if q.active:
                for item in reversed(batch):
                    q.buffer.appendleft(item)
                    self.buffered[item[2]] = q
                if q.timer is not None:
                    self.app.service.cancel(q.timer)
                q.timer = self.app.service.call_later(0.2, fired, q, self._arm)
            return
        entry[1] = True
        if batch:
            stored = reput.stored_ms(env)
            self.app.stats.delivered(stored, [i[0] for i in batch], [i[2] for i in batch])
            self.app.trace.delivered(stored, q.unit.broker, [(i[2], i[0], i[3].props) for i in batch])
        # progress moves only over the finished prefix: never past a re-put still under way
        while q.in_flight and q.in_flight[0][1]:
            q.delivered = q.in_flight.popleft()[2]
        self._commit(q)
        if q.active:
            self._arm(q)
            self._pull(q)

    def _commit(self, q: LevelQueue) -> None:
        if q.delivered == q.committed:
            return
        off = q.delivered
        req = rq.UpdateConsumerOffset(group=self.config.group, topic=SCHEDULE_TOPIC, queue_id=q.unit.queue_id,
                                      offset=off)

        def done(env):
            if isinstance(env, Exception) or env.code != ResponseCode.SUCCESS:
                log.warning("commit %s@%d failed: %s", q.unit, off, env if isinstance(env, Exception) else env.remark)
            elif off > q.committed:
                q.committed = off
        self.app.request(q.addr, req, done)

    # ---- cancel and status -----------------------------------------------------------------

    def cancel(self, msg_id: str, topic: str) -> str | None:
        """'delivered', 'cancelled' (buffered here: the next delivery skips it) or None (not here,
        or here for another topic)."""
        if msg_id in self.in_flight_ids:
            return "delivered"
        q = self.buffered.get(msg_id)
        if q is not None and any(item[2] == msg_id and topic_of(item[3].props) == topic for item in q.buffer):
            return "cancelled"
        return None

    def pending_by_level(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for unit, q in self.queues.items():
            key = str(unit.queue_id + 1)
            out[key] = out.get(key, 0) + q.pending
        return out
