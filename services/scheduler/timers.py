"""Arbitrary delivery times: ingest a broker's timer topic into the TimerDB, deliver when due.

Owns, per owned timer queue (one per broker; service thread only):
- ingest: pull rmq_sys_wheel_timer queue 0 -> rows (body and properties
  included) upserted in the TimerDB with the ingested offset in the same
  transaction, by the writer thread (writer.py) -> once that is committed,
  the group's offset committed on the broker. After that the scheduler no
  longer needs the CommitLog copy, so retention cannot lose it. The next pull
  goes while the rows are written (at most `_WRITES_PER_QUEUE` ingests queued
  per queue). An ingest whose write failed restarts the queue from the
  index's progress (the index refuses later ingests: db.StaleIngest).
- memory: only timers due within `timer_window_ms` sit in a heap (due, id);
  `load_step` moves the window forward from the index.
- delivery: one timer for the heap head; due rows are fetched from the DB,
  re-put in batches (within reput.py's limits), up to `reput_window` batches
  under way per queue as level queues do (what does not fit goes back on the
  heap, due, and leaves with the next batch), marked DELIVERED once answered
  (by the writer, gathered for MARK_EVERY_S into one write: a write and a
  hand-back per re-put kept the writer busy and the service thread waiting for
  the GIL; until it is committed the ids stay in `sent`, so a cancel says too
  late and nothing pushes them again); then the delivered watermark W (every ingested timer due at or before W is
  delivered or cancelled, none under way) is stored on the broker as the
  offset of group `<group>_TIMER_WM` (once W >= 0).
- takeover / lost index (`plan_start`): if the local index is behind the
  broker's committed offset (file lost, or another instance owned the queue
  meanwhile), forget this broker's rows and re-read the timer topic from its
  min offset, keeping records below the committed offset only if due after W.
- roll forward (`roll_step`): a pending timer whose stored copy is older than
  `roll_after_ms` is re-appended to the timer topic (SCHEDULE_REPUT roll), so
  a rebuild from the topic finds it after the original segment expired
  (in as many batches as reput.py's limits need).
- poison: a timer whose TIMER_DELIVER_MS, REAL_TOPIC or REAL_QID is malformed
  is not ingested; one the broker refuses (MESSAGE_ILLEGAL, its index in `bad`)
  is cancelled in the index while the rest of its batch goes on; both are
  logged and counted (`poisoned_skipped`, levels.skip_poisoned).
"""

import heapq
import logging

from quiver.wire import properties
from quiver.wire import requests as rq
from quiver.wire.codes import ResponseCode
from quiver.errors import QueryNotFoundError
from quiver.wire.properties import REAL_QID, REAL_TOPIC, TIMER_DELIVER_MS
from quiver.client.queue_puller import FOUND, OFFSET_ILLEGAL
from quiver.wire.validation import TIMER_TOPIC

from . import reput
from .db import row_dict
from .levels import fired, msg_id_of, now_ms, pull, skip_poisoned, wake_at

log = logging.getLogger(__name__)

_CHECKED = (TIMER_DELIVER_MS, REAL_TOPIC, REAL_QID)  # a timer with one malformed is not ingested
_WRITES_PER_QUEUE = 2   # ingests of one queue waiting for the writer: pulls pause beyond
MARK_RETRY_S = 1.0
MARK_EVERY_S = 0.05     # delivered ids of a queue go to the writer in one write at most this often


def wm_group(group: str) -> str:
    return f"{group}_TIMER_WM"


def plan_start(client, db, group: str, unit, addr: str) -> dict:
    """Blocking (control thread): where to resume a timer queue, rebuilding the index if needed."""
    def offset_of(req):
        return rq.OffsetReply.decode(client.call_broker(addr, req).ext).offset

    def committed_of(g):
        try:
            return offset_of(rq.QueryConsumerOffset(group=g, topic=TIMER_TOPIC, queue_id=unit.queue_id))
        except QueryNotFoundError:
            return None
    committed, wm = committed_of(group), committed_of(wm_group(group))
    local = db.progress(unit.broker)
    if local is not None and (committed is None or local >= committed):
        dropped = db.drop_delivered_by_others(unit.broker, wm) if wm is not None else 0
        return {"start": local, "rebuild_until": 0, "wm": wm, "dropped": dropped, "mode": "resume"}
    min_off = offset_of(rq.GetMinOffset(topic=TIMER_TOPIC, queue_id=unit.queue_id))
    db.reset_broker(unit.broker)
    return {"start": min_off, "rebuild_until": committed or 0, "wm": wm if wm is not None else -1,
            "dropped": 0, "mode": "rebuild" if committed else "fresh"}


class TimerQueue:
    __slots__ = ("unit", "addr", "max_bytes", "next_pull", "stored", "writing", "rebuild_until", "wm", "heap",
                 "in_heap", "sent", "marking", "mark_timer", "loaded_until", "in_flight", "pulling", "timer", "active",
                 "rolled", "committed")

    def __init__(self, unit, addr, plan, max_bytes: int):
        self.unit, self.addr, self.max_bytes = unit, addr, max_bytes
        self.next_pull = self.stored = plan["start"]   # stored: ingested and committed in the index
        self.writing = 0                                  # ingests queued for the writer
        self.rebuild_until = plan["rebuild_until"]
        self.wm = plan["wm"]
        self.heap: list = []
        self.in_heap: set[str] = set()
        self.sent: set[str] = set()       # re-put under way, or answered and not yet marked delivered
        self.marking: list[str] = []      # answered, waiting for the next mark write
        self.mark_timer = None
        self.loaded_until = -1
        self.in_flight: list[list] = []   # the rows of each SCHEDULE_REPUT under way
        self.pulling = False
        self.timer = None
        self.active = True
        self.rolled: set[str] = set()
        self.committed = -1

    @property
    def rebuilding(self) -> bool:
        return self.stored < self.rebuild_until


class Timers:
    def __init__(self, app):
        self.app = app
        self.config = app.config
        self.db = app.db
        self.writer = app.writer
        self.queues: dict = {}   # unit -> TimerQueue

    # ---- lifecycle -----------------------------------------------------------------------

    def start(self, unit, addr: str, plan: dict, max_bytes: int) -> None:
        """Ingest and deliver `unit` as `plan_start` planned; `max_bytes`: body bytes per re-put to its broker."""
        q = TimerQueue(unit, addr, plan, max_bytes)
        self.queues[unit] = q
        log.info("timers of %s: %s from offset %d (rebuild below %d, watermark %s, %d delivered elsewhere)",
                 unit, plan["mode"], q.next_pull, q.rebuild_until, q.wm, plan["dropped"])
        self.load(q)
        self._pull(q)

    def stop(self, unit) -> None:
        q = self.queues.pop(unit, None)
        if q is not None:
            q.active = False
            if q.timer is not None:
                self.app.service.cancel(q.timer)
            self._write_marks(q)
            log.info("released %s", unit)

    def stop_all(self) -> None:
        for unit in list(self.queues):
            self.stop(unit)

    # ---- ingest --------------------------------------------------------------------------

    def _pull(self, q: TimerQueue) -> None:
        if q.active and not q.pulling and q.writing < _WRITES_PER_QUEUE:
            pull(self.app, q, TIMER_TOPIC, min(self.config.pull_batch, 512), self._pulled, self._pull)

    def _pulled(self, q: TimerQueue, pulled) -> None:
        nxt = pulled.next
        if pulled.status is FOUND:
            self.ingest(q, pulled.records(), nxt)
        elif pulled.status is OFFSET_ILLEGAL:
            log.warning("%s offset moved %d -> %d", q.unit, q.next_pull, nxt)
            self.ingest(q, [], nxt)
        elif nxt > q.next_pull:
            self.ingest(q, [], nxt)
        self._pull(q)

    def ingest(self, q: TimerQueue, recs, nxt: int) -> None:
        rows, cancelled, broker = [], self.app.cancelled, q.unit.broker
        for rec in recs:
            if rec.queue_offset < q.next_pull:
                continue
            mid = msg_id_of(rec)
            problem = properties.first_problem(rec.props, _CHECKED)
            if problem is not None:
                skip_poisoned(self.app, q.unit, mid, problem)
                continue
            due = properties.read_int(rec.props, TIMER_DELIVER_MS, 0)
            if rec.queue_offset < q.rebuild_until and due <= q.wm:
                continue  # delivered by the previous owner
            q.rolled.discard(mid)
            if cancelled.hits(mid, rec.props):
                continue
            rows.append(row_dict(broker, mid, due, rec))
        start, q.next_pull = q.next_pull, nxt
        q.writing += 1
        def write(conn):
            self.db.write_ingest(conn, broker, rows, start, nxt)
            return self.db.min_pending_in(conn, broker)
        self.writer.submit(write, lambda low: self._ingested(q, rows, nxt, low))

    def _ingested(self, q: TimerQueue, rows, nxt: int, low) -> None:
        """The writer committed (or failed) an ingest: only now may the broker hear of its offset.
        `low`: the index's earliest pending due time, read in that transaction."""
        q.writing -= 1
        if not q.active:
            return
        if isinstance(low, Exception):
            log.error("%s: ingest up to %d not stored (%s); the queue restarts from the index", q.unit, nxt, low)
            q.active = False
            self.app.restart_unit(q.unit)
            return
        q.stored = nxt
        for r in rows:
            if r["due_ms"] <= q.loaded_until:
                self._push(q, r["due_ms"], r["id"])
        self._arm(q)
        if not q.rebuilding:
            self._commit(q, low)
        self._pull(q)

    # ---- memory window ------------------------------------------------------------------

    def load(self, q: TimerQueue) -> None:
        until = now_ms() + self.config.timer_window_ms
        for due, mid, _ in self.db.due_between([q.unit.broker], q.loaded_until, until):
            self._push(q, due, mid)
        q.loaded_until = until
        self._arm(q)

    def load_step(self) -> None:
        for q in list(self.queues.values()):
            self.load(q)

    def _push(self, q: TimerQueue, due: int, mid: str) -> None:
        if mid not in q.in_heap and mid not in q.sent:
            q.in_heap.add(mid)
            heapq.heappush(q.heap, (due, mid))

    # ---- delivery -----------------------------------------------------------------------

    def _arm(self, q: TimerQueue) -> None:
        if not q.active or len(q.in_flight) >= self.config.reput_window or not q.heap:
            return
        wake_at(self.app.service, q, q.heap[0][0], self._deliver, self._arm)

    def _deliver(self, q: TimerQueue) -> None:
        now, heap, limit = now_ms(), q.heap, self.config.max_reput_batch
        ids = []
        while heap and heap[0][0] <= now and len(ids) < limit:
            _, mid = heapq.heappop(heap)
            q.in_heap.discard(mid)
            ids.append(mid)
        hits = self.app.cancelled.hits
        rows = [r for r in self.db.fetch_pending(ids) if not hits(r.id, r.props)] if ids else []
        if not rows:
            self._arm(q)
            return
        rows.sort(key=lambda r: r.due_ms)
        rows, *later = reput.split(rows, limit, q.max_bytes)
        for batch in later:
            for r in batch:
                self._push(q, r.due_ms, r.id)   # due: leaves with the next batch
        q.in_flight.append(rows)
        q.sent.update(r.id for r in rows)
        req, frames = reput.request(rows, [r.due_ms for r in rows])
        self.app.request(q.addr, req, lambda env: self._reput_done(q, rows, env), frames, timeout=10.0)
        self._arm(q)   # more due: the next batch goes now, within the window

    def _reput_done(self, q: TimerQueue, rows, env) -> None:
        q.in_flight = [b for b in q.in_flight if b is not rows]
        bad = reput.refused(env, len(rows))
        if bad or isinstance(env, Exception) or env.code != ResponseCode.SUCCESS:
            q.sent.difference_update(r.id for r in rows)
        if bad:  # cancel what the broker refused; the rest is due: delivered at once
            self._drop(q, [rows[i] for i in sorted(bad)], env.remark)
            for i, r in enumerate(rows):
                if i not in bad:
                    self._push(q, r.due_ms, r.id)
            self._arm(q)
            return
        if isinstance(env, Exception) or env.code != ResponseCode.SUCCESS:
            log.warning("timer re-put of %d failed (%s); retrying", len(rows),
                        env if isinstance(env, Exception) else env.remark)
            for r in rows:
                self._push(q, r.due_ms, r.id)
            if q.active:   # the head's timer, if set, is replaced: everything waits for the retry
                if q.timer is not None:
                    self.app.service.cancel(q.timer)
                q.timer = self.app.service.call_later(0.2, fired, q, self._arm)
            return
        ids = [r.id for r in rows]
        stored = reput.stored_ms(env)
        self.app.stats.delivered(stored, [r.due_ms for r in rows], ids)
        self.app.trace.delivered(stored, q.unit.broker, [(r.id, r.due_ms, r.props) for r in rows])
        self._mark(q, ids)
        self._arm(q)

    def _mark(self, q: TimerQueue, ids: list[str]) -> None:
        q.marking.extend(ids)
        if q.mark_timer is None:
            q.mark_timer = self.app.service.call_later(MARK_EVERY_S, self._write_marks, q)

    def flush_marks(self) -> None:
        """Every queue's gathered marks to the writer now (shutting down)."""
        for q in self.queues.values():
            self._write_marks(q)

    def _write_marks(self, q: TimerQueue) -> None:
        if q.mark_timer is not None:
            self.app.service.cancel(q.mark_timer)
            q.mark_timer = None
        ids, q.marking = q.marking, []
        if not ids:
            return

        def write(conn):
            self.db.write_delivered(conn, ids)
            return self.db.min_pending_in(conn, q.unit.broker)
        self.writer.submit(write, lambda low: self._marked(q, ids, low))

    def _marked(self, q: TimerQueue, ids: list[str], low) -> None:
        """Delivered rows are durable as such: the watermark may pass them (tried again on failure)."""
        if isinstance(low, Exception):
            self.app.service.call_later(MARK_RETRY_S, self._mark, q, ids)
            return
        q.sent.difference_update(ids)
        if q.active and not q.rebuilding:
            self._commit(q, low)

    def _drop(self, q: TimerQueue, rows, remark: str) -> None:
        for r in rows:
            skip_poisoned(self.app, q.unit, r.id, remark)
            self.writer.submit(lambda conn, mid=r.id: self.db.write_cancel(conn, mid))

    def in_flight_ids(self) -> set[str]:
        """Re-put under way or delivered and not yet marked so: a cancel is too late."""
        return set().union(*(q.sent for q in self.queues.values()))

    # ---- progress ------------------------------------------------------------------------

    def _commit(self, q: TimerQueue, low: int | None) -> None:
        """Ingested offset and delivered watermark to the broker (fire and forget). Both only count
        what the index holds committed: `stored`, and `low`, its earliest pending due time as the
        writer read it after the last write handed over (delivered rows not yet marked still
        count as pending, rows of a later ingest are above `stored`)."""
        wm = (low - 1) if low is not None else now_ms()
        if q.in_flight:
            wm = min(wm, min(rows[0].due_ms for rows in q.in_flight) - 1)
        # not max(q.wm, wm): a timer ingested later may be due before the last watermark (sent out
        # of due order), and a watermark above a pending row would drop it on the next start
        q.wm = wm
        if q.wm >= 0:   # -1: nothing delivered yet (an offset cannot be negative)
            # before the offset, on the same connection: cut off between the two, the broker holds
            # a lower watermark with the old offset (delivered twice), never the reverse (lost)
            self.app.request(q.addr, rq.UpdateConsumerOffset(group=wm_group(self.config.group), topic=TIMER_TOPIC,
                                                             queue_id=q.unit.queue_id, offset=q.wm),
                             _log_failure)
        if q.stored != q.committed:
            q.committed = q.stored
            self.app.request(q.addr, rq.UpdateConsumerOffset(group=self.config.group, topic=TIMER_TOPIC,
                                                             queue_id=q.unit.queue_id, offset=q.stored),
                             _log_failure)

    # ---- roll forward ---------------------------------------------------------------------

    def roll_step(self) -> int:
        """Re-append old pending timers to their broker's timer topic; returns how many."""
        now, n = now_ms(), 0
        for q in list(self.queues.values()):
            if q.rebuilding:
                continue
            rows = [r for r in self.db.to_roll([q.unit.broker], now - self.config.roll_after_ms,
                                               now + self.config.timer_window_ms) if r.id not in q.rolled]
            if not rows:
                continue
            q.rolled.update(r.id for r in rows)
            for batch in reput.split(rows, self.config.max_reput_batch, q.max_bytes):
                req, frames = reput.request(batch, [r.due_ms for r in batch], roll=True)
                self.app.request(q.addr, req, lambda env, q=q, rows=batch: self._rolled(q, rows, env), frames,
                                 timeout=10.0)
            n += len(rows)
        return n

    def _rolled(self, q: TimerQueue, rows, env) -> None:
        """A failed roll is tried again at the next step; what the broker refused is cancelled."""
        if isinstance(env, Exception) or env.code != ResponseCode.SUCCESS:
            _log_failure(env)
            bad = reput.refused(env, len(rows))
            self._drop(q, [rows[i] for i in sorted(bad)], env.remark if bad else "")
            q.rolled.difference_update(r.id for i, r in enumerate(rows) if i not in bad)

    def in_memory(self) -> int:
        return sum(len(q.heap) for q in self.queues.values())


def _log_failure(env) -> None:
    if isinstance(env, Exception) or env.code != ResponseCode.SUCCESS:
        log.warning("broker request failed: %s", env if isinstance(env, Exception) else env.remark)
