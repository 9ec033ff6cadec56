"""POP durability and revive: the revive log, its replay on start, and the periodic revive step.

The revive log is the system topic `rmq_sys_REVIVE_LOG_<cluster>`, queue 0, in the
CommitLog (records: pop_state.py). It gets the CommitLog's CRC, recovery of a torn
tail after kill -9, flush policy and replication for free, and costs one small
record per pop or ack request, with no second store to keep consistent.

Replay start: the revive group's consumer offset of that topic (REVIVE_GROUP)
holds the oldest CK a restart still needs; each group's consumer offset of a
queue holds its `base`. `Revive.step` writes both in the metadata (bases first,
then the start, so a snapshot the offset thread catches in between is never
ahead of its bases) and the metadata's offset job persists them. After a kill -9
the state is rebuilt from the last persisted snapshot plus every record after
its start, i.e. exactly what was written before the kill.

`Revive.step` (every REVIVE_INTERVAL_S on the service thread) also:
  - moves a message whose invisible time passed at the group's max reconsume
    times to `%DLQ%<group>` (a copy, as retry.py does, then an ACK record);
  - wakes held pops of topics that have a message visible again;
  - answers held pops whose poll time is over.
Each queue's work is guarded: one bad item is counted (`pop_revive_errors`) and
logged, and the others go on.

Messages are redelivered from their own queue, by offset, rather than copied to
`%RETRY%<group>` through the scheduler as RocketMQ's POP does: no copy per retry,
no dependency on the scheduler service, FIFO redelivery stays in order in its
queue, and the receipt handle keeps naming the original message.
"""

import logging
import os
import time

from quiver.wire.ids import host_bytes
from quiver.wire.properties import DLQ_ORIGIN_MESSAGE_ID, DLQ_ORIGIN_TOPIC, RECONSUME_TIME, UNIQ_KEY
from quiver.wire import record
from quiver.wire.names import DLQ_PREFIX, RETRY_PREFIX
from quiver.wire.property_string import format_properties

from .pop import records_of
from .pop_state import REVIVE_GROUP, ack_record, decode, encode, revive_topic
from .status_codes import check_stored
from .store import GetStatus

log = logging.getLogger(__name__)

IN_MEMORY_RATIO = 0.4

REVIVE_INTERVAL_S = 0.2
REPLAY_BATCH = 256
_HOST = host_bytes("127.0.0.1", 0)


class ReviveLog:
    """Appends revive records (one put of all of a request's records) and reads them back."""

    def __init__(self, store, topics, cluster: str, note_put=None):
        self.store = store
        self.topics = topics
        self.topic = revive_topic(cluster)
        self.note_put = note_put

    def append(self, recs: list[dict]) -> int:
        """Store the records; the revive queue offset of the first. Raises the put's QuiverError."""
        self.topics.config(self.topic, create=True, system=True, queues=1)
        n = len(recs)
        res = self.store.put_batch(self.topic, 0, [encode(r) for r in recs], [""] * n, [0] * n, 0,
                                   int(time.time() * 1000), _HOST)
        check_stored(res, "POP state writes")
        if self.note_put is not None:
            self.note_put(res.end_offset)
        return res.first_queue_offset

    def max_offset(self) -> int:
        return self.store.max_offset(self.topic, 0)

    def replay(self, book, start: int, counters) -> int:
        """Apply every record from revive queue offset `start`; returns how many. A record that does
        not decode is counted (`pop_revive_bad_records`) and skipped."""
        n, off = 0, max(start, self.store.min_offset(self.topic, 0))
        while True:
            res = self.store.get_messages(self.topic, 0, off, REPLAY_BATCH, None, 16 << 20)
            if res.status not in (GetStatus.FOUND, GetStatus.NO_MATCHED_MESSAGE):
                return n
            for rec, _ in records_of(res.data):
                try:
                    book.apply(decode(rec.body), rec.queue_offset)
                    n += 1
                except (ValueError, KeyError, TypeError) as exc:
                    counters["pop_revive_bad_records"] += 1
                    log.error("revive record at %s offset %d skipped: %s", self.topic, rec.queue_offset, exc)
            if res.next_offset <= off:
                return n
            off = res.next_offset


def in_memory_bytes() -> int:
    """How much of the CommitLog's tail counts as still in memory: RocketMQ's
    accessMessageInMemoryMaxRatio, 40 % of physical RAM."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * IN_MEMORY_RATIO)
    except (ValueError, OSError):
        return 1 << 30


def new_group_start(store, topic: str, queue_id: int, consume_from: str, memory_bytes: int) -> int:
    """Where a group with no offset on a queue starts, as RocketMQ's POP does (getInitOffset):
    "first", or any retry topic, at the queue's min offset; "last" at 0 while the queue still
    starts at 0 and that first message is in memory (initPopOffsetByCheckMsgInMem: its
    CommitLog position is within `memory_bytes` of the end), else at the last message (max - 1),
    so a group started just after a send still receives it."""
    lo = store.min_offset(topic, queue_id)
    if consume_from == "first" or topic.startswith(RETRY_PREFIX):
        return lo
    hi = store.max_offset(topic, queue_id)
    cq = store.cqs.get((topic, queue_id))
    first = cq.entry(0) if cq is not None and lo <= 0 < hi else None
    if first is not None and store.commit_log.write_end - first[0] <= memory_bytes:
        return 0
    return max(hi - 1, 0)


class Revive:
    """The revive step and the restart replay. `wake(topic)` re-runs held pops; `expire_held()`
    answers those past their poll time; `limit(group)` is the group's max reconsume times;
    `notify(topic, queue_id)` tells readers of a DLQ queue it grew; `writable()` is False on a slave."""

    def __init__(self, book, revive_log, store, topics, metadata, counters, limit, wake, expire_held,
                 notify=None, writable=lambda: True, clock_ms=lambda: int(time.time() * 1000), traffic=None):
        self.book = book
        self.log = revive_log
        self.store = store
        self.topics = topics
        self.metadata = metadata
        self.counters = counters
        self.limit = limit
        self.wake = wake
        self.expire_held = expire_held
        self.notify = notify
        self.writable = writable
        self.traffic = traffic   # traffic.Traffic: DLQ moves per group, for /metrics
        self.clock_ms = clock_ms
        self.in_memory_bytes = in_memory_bytes()

    def start_of(self, group: str, topic: str, queue_id: int, consume_from: str) -> int:
        """Where a queue of a group starts: its consumer offset, else `new_group_start`."""
        off = self.metadata.get_offset(group, topic, queue_id)
        if off is not None:
            return off
        return new_group_start(self.store, topic, queue_id, consume_from, self.in_memory_bytes)

    def replay(self) -> int:
        start = self.metadata.get_offset(REVIVE_GROUP, self.log.topic, 0) or 0
        n = self.log.replay(self.book, start, self.counters)
        inflight = sum(len(st.inflight) for st in self.book.queues.values())
        log.info("POP state replayed: %d revive records from offset %d, %d messages in flight", n, start, inflight)
        return n

    def step(self, now_ms: int | None = None) -> None:
        now = self.clock_ms() if now_ms is None else now_ms
        if self.writable():
            woken = set()
            for key, st in list(self.book.queues.items()):
                try:
                    if self._revive(key, st, now):
                        woken.add(key[1])
                except Exception:
                    self.counters["pop_revive_errors"] += 1
                    log.exception("reviving %s failed", key)
            for topic in woken:
                self.wake(topic)
            self.snapshot()
        self.expire_held()

    def _revive(self, key, st, now: int) -> bool:
        """DLQ what is due and at its max; True if something else became visible again."""
        group, topic, q = key
        limit = self.limit(group)
        visible = False
        for off in st.expired(now):
            e = st.inflight.get(off)
            if e is None:
                continue
            if e.reconsume < limit:
                visible = True
                continue
            self._to_dlq(group, topic, q, off, e.reconsume)
            rec = ack_record(group, topic, q, [(off, e.pop_ts)])
            self.book.apply(rec, self.log.append([rec]))
        return visible

    def _to_dlq(self, group: str, topic: str, q: int, off: int, reconsume: int) -> None:
        res = self.store.get_messages(topic, q, off, 1, None)
        recs = records_of(res.data) if res.status is GetStatus.FOUND else []
        if not recs or recs[0][0].queue_offset != off:
            log.warning("POP message %s/%d offset %d of group %s is gone (retention); not moved to the DLQ",
                        topic, q, off, group)
            return
        rec = recs[0][0]
        props = rec.properties()
        props[DLQ_ORIGIN_TOPIC] = topic
        props[DLQ_ORIGIN_MESSAGE_ID] = props.get(UNIQ_KEY, "")
        props[RECONSUME_TIME] = str(reconsume)
        dlq = DLQ_PREFIX + group
        self.topics.config(dlq, create=True, system=True, queues=1)
        put = self.store.put_batch(dlq, 0, [rec.body], [format_properties(props)], [rec.flag],
                                   rec.sys_flag & ~record.TX_MASK, rec.born_ts, rec.born_host, reconsume)
        check_stored(put, "DLQ move")   # raised: the message stays in flight and the next step retries
        self.counters["pop_dlq_messages"] += 1
        if self.traffic is not None:
            self.traffic.dead_lettered(group)
        log.info("POP message %s/%d offset %d of group %s -> %s after %d reconsumes", topic, q, off, group, dlq,
                 reconsume)
        if self.notify is not None:
            self.notify(dlq, 0)

    def snapshot(self) -> None:
        """Bases, then the replay start, into the metadata (persisted by its offset job)."""
        meta = self.metadata
        for (group, topic, q), st in list(self.book.queues.items()):
            if meta.get_offset(group, topic, q) != st.base:
                meta.set_offset(group, topic, q, st.base)
        start = self.book.replay_start(self.log.max_offset())
        if meta.get_offset(REVIVE_GROUP, self.log.topic, 0) != start:
            meta.set_offset(REVIVE_GROUP, self.log.topic, 0, start)
