"""POP consumption requests: POP_MESSAGE, ACK_MESSAGE, CHANGE_INVISIBLE_DURATION.

Any number of consumers of a group share a topic's queues: a pop takes up to N
messages from the queues on this broker (round robin per group and topic), each
invisible to the group until acked or until its invisible time passes, and
answers with a receipt handle per message (quiver.wire.receipt_handle). A pop
that finds nothing is held up to its poll time and re-run when a put makes a
queue of its topic visible or a message of the topic becomes visible again
(`notify`, `wake`); `expire_held` answers the rest with no messages.

What may be popped from a queue (pop_state.QueueState):
  normal  messages whose invisible time passed (reconsume + 1; those at the
          group's max are left to the revive step, which moves them to the DLQ),
          then new ones from `next`;
  FIFO    (topic created with order=true, or the pop asks `order`) the queue is
          scanned from `base` in offset order; a message is taken only if no earlier
          message of its message group (property __SHARDINGKEY; none: the queue is
          its group) is unacked, so one per message group is in flight and an expired
          one is delivered again before its successors.

Every change is a revive-log record (a CK per popped queue, an ACK per acked
queue) written before the reply and applied to the state through the same
`PopBook.apply` that replays the log after a restart. Does not own the revive
loop, the replay nor the DLQ move (pop_revive.py).
"""

import itertools
import logging
import time
from dataclasses import dataclass

from quiver.wire import tags as tag_expr
from quiver.wire.properties import SHARDING_KEY, TAGS
from quiver.errors import InvalidParameterError, ReceiptHandleExpiredError, TopicNotExistError
from quiver.wire import record
from quiver.wire import requests as rq
from quiver.wire.codes import RequestCode, ResponseCode
from quiver.wire.receipt_handle import ReceiptHandle

from .pop_state import MAX_INFLIGHT_PER_QUEUE, ck_record, ack_record
from .store import GetStatus

log = logging.getLogger(__name__)

FIFO_SCAN = 256     # ConsumeQueue entries a FIFO pop looks at from a queue's base


@dataclass(slots=True)
class HeldPop:
    req: object
    deadline: float   # time.monotonic()


def now_ms() -> int:
    return int(time.time() * 1000)


def records_of(data) -> list[tuple[record.Record, bytes]]:
    """(record, its stored bytes) of each record in a read's concatenation."""
    out, pos, end = [], 0, len(data)
    while pos < end:
        total, blank = record.check_head(data, pos)
        if not blank:
            out.append((record.decode_at(data, pos), bytes(data[pos:pos + total])))
        pos += total
    return out


class PopRequests:
    """The three POP codes. `revive_log.append(records) -> first queue offset` stores records;
    `limit(group) -> int` is the group's max reconsume times."""

    def __init__(self, broker_name: str, store, topics, book, revive_log, limit, counters, max_suspend_ms: int,
                 clock_ms=now_ms, clock=time.monotonic):
        self.broker_name = broker_name
        self.store = store
        self.topics = topics
        self.book = book
        self.revive_log = revive_log
        self.limit = limit
        self.counters = counters
        self.max_suspend_ms = max_suspend_ms
        self.clock_ms = clock_ms
        self.clock = clock
        self.held: dict[str, list[HeldPop]] = {}
        self._turn: dict[tuple[str, str], itertools.count] = {}

    def handlers(self) -> dict:
        return {RequestCode.POP_MESSAGE: self.pop, RequestCode.ACK_MESSAGE: self.ack,
                RequestCode.CHANGE_INVISIBLE_DURATION: self.change_invisible}

    # ---- pop -------------------------------------------------------------------------------

    def pop(self, req) -> None:
        a = req.args
        if self.topics.get(a.topic) is None:
            raise TopicNotExistError(f"topic {a.topic!r} does not exist on this broker")
        if a.max_reconsume is not None:
            self.book.asked_max[a.group] = a.max_reconsume
        poll_ms = min(a.poll_ms, self.max_suspend_ms)
        if not self._serve(req, final=poll_ms <= 0):
            self.held.setdefault(a.topic, []).append(HeldPop(req, self.clock() + poll_ms / 1000))
            self.counters["pops_held"] += 1

    def _serve(self, req, final: bool, held: bool = False) -> bool:
        a = req.args
        if held and (denied := req.denied_now()) is not None:
            # held since before its user was deleted or lost SUB: nothing stored since
            self.counters["held_pops_denied"] += 1
            req.reply(ResponseCode.NO_PERMISSION, denied)
            return True
        conf = self.topics.get(a.topic)
        if conf is None:
            req.reply(ResponseCode.TOPIC_NOT_EXIST, f"topic {a.topic!r} was deleted")
            return True
        queues = max(conf["read"], 1)
        turn = next(self._turn.setdefault((a.group, a.topic), itertools.count()))
        fifo = a.order or bool(conf.get("order"))
        pt = self.clock_ms()   # one pop time for the whole pop: every handle and CK of it
        picked, cks = [], []
        for i in range(queues):
            left = a.max_msgs - len(picked)
            if left <= 0:
                break
            q = (turn + i) % queues
            take = self._fifo(a, q, left, pt) if fifo else self._normal(a, q, left, pt)
            if take is not None:
                rec, got = take
                cks.append((q, rec))
                picked.extend((q, off, rc, raw) for off, rc, raw in got)
        if cks:
            first = self.revive_log.append([rec for _, rec in cks])   # before the reply: durable first
            for i, (_, rec) in enumerate(cks):
                self.book.apply(rec, first + i)
        if not picked and not final:
            return False
        handles = [ReceiptHandle(self.broker_name, a.topic, q, off, pt, a.invisible_ms, rc) for q, off, rc, _ in picked]
        self.counters["popped_messages"] += len(picked)
        req.reply(ResponseCode.SUCCESS, "", rq.PopReply(handles=handles), (b"".join(p[3] for p in picked),))
        return True

    def _normal(self, a, q: int, left: int, now: int):
        """Expired messages first, then new ones from `next`: (CK record, [(offset, reconsume, bytes)])."""
        st = self.book.get(a.group, a.topic, q, a.consume_from)
        limit = self.limit(a.group)
        got = []
        for off in st.expired(now):
            if len(got) >= left:
                break
            e = st.inflight[off]
            if e.reconsume >= limit:
                continue   # the revive step moves it to the DLQ
            found = self._read(a.topic, q, off)
            if found is not None:
                got.append((off, e.reconsume + 1, found[1]))
        filtered = []
        if len(got) < left and len(st.inflight) < MAX_INFLIGHT_PER_QUEUE:
            self._skip_deleted(a.topic, q, st)
            want = tag_expr.parse(a.expression)
            res = self.store.get_messages(a.topic, q, st.next, left - len(got), tag_expr.hashes(a.expression),
                                          a.max_bytes)
            if res.status in (GetStatus.FOUND, GetStatus.NO_MATCHED_MESSAGE):
                seen = set()
                for rec, raw in records_of(res.data):
                    seen.add(rec.queue_offset)
                    if want is None or rec.properties().get(TAGS) in want:
                        got.append((rec.queue_offset, 0, raw))
                    else:
                        filtered.append(rec.queue_offset)
                filtered.extend(o for o in range(st.next, res.next_offset) if o not in seen)
        if not got and not filtered:
            return None
        return self._ck(a, q, now, got, filtered), got

    def _fifo(self, a, q: int, left: int, now: int):
        """A scan from `base`: the first unacked message of each message group, if not in flight."""
        st = self.book.get(a.group, a.topic, q, a.consume_from)
        self._skip_deleted(a.topic, q, st)
        limit = self.limit(a.group)
        want = tag_expr.parse(a.expression)
        res = self.store.get_messages(a.topic, q, st.base, FIFO_SCAN, None, a.max_bytes)
        if res.status is not GetStatus.FOUND:
            return None
        got, filtered, blocked, seen = [], [], set(), set()
        for rec, raw in records_of(res.data):
            off = rec.queue_offset
            seen.add(off)
            if off in st.done or len(got) >= left:
                continue
            props = rec.properties()
            e = st.inflight.get(off)
            if e is None and want is not None and props.get(TAGS) not in want:
                filtered.append(off)
                continue
            key = props.get(SHARDING_KEY) or ""
            if key in blocked:
                continue
            blocked.add(key)   # its successors wait for this one, whatever happens to it now
            if e is None:
                if len(st.inflight) < MAX_INFLIGHT_PER_QUEUE:
                    got.append((off, 0, raw))
            elif e.deadline <= now and e.reconsume < limit:
                got.append((off, e.reconsume + 1, raw))
        filtered.extend(o for o in range(st.base, res.next_offset)
                        if o not in seen and o not in st.inflight and o not in st.done)
        if not got and not filtered:
            return None
        return self._ck(a, q, now, got, filtered), got

    def _ck(self, a, q: int, pt: int, got: list, filtered: list) -> dict:
        return ck_record(a.group, a.topic, q, pt, a.invisible_ms, a.max_reconsume,
                         [(off, rc) for off, rc, _ in got], filtered)

    def _skip_deleted(self, topic: str, q: int, st) -> None:
        """Retention deleted what the group had not consumed: carry on from the queue's min (and
        from its max when the queue is shorter than the group's position: deleted and made anew)."""
        # past what is stored (confirmed or not): the queue was made anew or its log cut; on from what
        # consumers may see (a position merely past the confirmed end waits for it)
        if st.next > self.store.queue_end(topic, q) and not st.inflight:
            st.done.clear()
            st.base = st.next = self.store.max_offset(topic, q)
        lo = self.store.min_offset(topic, q)
        if st.base < lo:
            for off in [o for o in st.inflight if o < lo]:
                del st.inflight[off]
            for off in [o for o in st.done if o < lo]:
                del st.done[off]
            st.base, st.next = lo, max(st.next, lo)

    def _read(self, topic: str, q: int, off: int):
        res = self.store.get_messages(topic, q, off, 1, None)
        recs = records_of(res.data) if res.status is GetStatus.FOUND else []
        return recs[0] if recs and recs[0][0].queue_offset == off else None

    # ---- held pops -------------------------------------------------------------------------

    def notify(self, topic: str, queue_id: int = 0) -> None:
        """A put made messages of `topic` visible, or some became visible again: re-run its held pops."""
        waiting = self.held.get(topic)
        if not waiting:
            return
        keep = []
        for task in waiting:
            if task.req.answered:
                continue
            try:
                if not self._serve(task.req, final=False, held=True):
                    keep.append(task)
            except Exception as exc:   # one pop's failure is its own: answer it, keep the others
                log.exception("held pop of %s failed", topic)
                task.req.reply(getattr(exc, "code", ResponseCode.SYSTEM_ERROR), str(exc)[:500])
        if keep:
            self.held[topic] = keep
        else:
            self.held.pop(topic, None)

    wake = notify

    def expire_held(self, now: float | None = None) -> None:
        now = self.clock() if now is None else now
        for topic in list(self.held):
            keep = []
            for task in self.held[topic]:
                if task.req.answered:
                    continue
                if task.deadline > now:
                    keep.append(task)
                    continue
                try:
                    self._serve(task.req, final=True, held=True)
                except Exception as exc:
                    log.exception("expiring a held pop of %s failed", topic)
                    task.req.reply(getattr(exc, "code", ResponseCode.SYSTEM_ERROR), str(exc)[:500])
            if keep:
                self.held[topic] = keep
            else:
                del self.held[topic]

    def held_count(self) -> int:
        return sum(len(v) for v in self.held.values())

    # ---- ack and change invisible duration --------------------------------------------------

    def _in_flight(self, group: str, topic: str, h: ReceiptHandle):
        """The queue state and entry `h` owns, or the QuiverError saying why not."""
        if h.topic != topic:
            return InvalidParameterError(f"the receipt handle names topic {h.topic!r}, the request {topic!r}")
        if h.broker != self.broker_name:
            return InvalidParameterError(f"the receipt handle is from broker {h.broker!r}, this is "
                                         f"{self.broker_name!r}: send it there")
        conf = self.topics.get(topic)
        if conf is None:
            return TopicNotExistError(f"topic {topic!r} does not exist on this broker")
        if h.queue_id >= max(conf["read"], 1):
            return InvalidParameterError(f"the receipt handle names queue {h.queue_id}; {topic!r} has {conf['read']}")
        st = self.book.queues.get((group, topic, h.queue_id))
        e = st.inflight.get(h.offset) if st is not None else None
        if e is None or e.pop_ts != h.pop_ts:
            return ReceiptHandleExpiredError(
                f"{topic}/{h.queue_id} offset {h.offset}: the delivery popped at {h.pop_ts} is not in flight for "
                f"group {group!r} (acked already, delivered again after its invisible time, or replaced by a "
                f"change of invisible duration: use the newest handle)")
        return st, e

    def ack(self, req) -> None:
        a = req.args
        per_queue: dict[int, list] = {}
        failed, seen = [], set()
        for i, h in enumerate(a.handles):
            found = self._in_flight(a.group, a.topic, h)
            if not isinstance(found, tuple) or (h.queue_id, h.offset) in seen:
                exc = found if not isinstance(found, tuple) else ReceiptHandleExpiredError(
                    f"{a.topic}/{h.queue_id} offset {h.offset}: acked twice in one request")
                failed.append((i, int(exc.code), exc.remark))
                continue
            seen.add((h.queue_id, h.offset))
            per_queue.setdefault(h.queue_id, []).append((h.offset, h.pop_ts))
        recs = [ack_record(a.group, a.topic, q, acked) for q, acked in per_queue.items()]
        if recs:
            first = self.revive_log.append(recs)
            for i, rec in enumerate(recs):
                self.book.apply(rec, first + i)
        acked = len(a.handles) - len(failed)
        self.counters["acked_messages"] += acked
        if not failed:
            req.reply(ResponseCode.SUCCESS, "", rq.AckReply.wire(acked))
        else:
            ext = rq.AckReply(acked=acked, failed=failed)
            i, code, remark = failed[0]
            more = f" (and {len(failed) - 1} more handle(s) not acked)" if len(failed) > 1 else ""
            req.reply(code, f"handle {i}: {remark}{more}; {acked} acked", ext)

    def change_invisible(self, req) -> None:
        a = req.args
        h = a.handle
        found = self._in_flight(a.group, a.topic, h)
        if not isinstance(found, tuple):
            raise found
        _, e = found
        pt = max(self.clock_ms(), e.pop_ts + 1)   # a new delivery: the old handle goes stale
        rec = ck_record(a.group, a.topic, h.queue_id, pt, a.invisible_ms, None, [(h.offset, e.reconsume)], [])
        self.book.apply(rec, self.revive_log.append([rec]))
        new = ReceiptHandle(self.broker_name, a.topic, h.queue_id, h.offset, pt, a.invisible_ms, e.reconsume)
        req.reply(ResponseCode.SUCCESS, "", rq.ChangeInvisibleReply(handle=new))
