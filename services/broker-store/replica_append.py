"""A slave's append: its master's CommitLog bytes, verbatim, at the same offset, then dispatched.

Owns the rules for replicated bytes only; the CommitLog, queues and dispatch are
the store's (MessageStore._dispatch, the same code a put runs) and the chunk
checks are ha_stream's. Like a put, all or nothing: the disk guard is asked
first (DiskRefused, nothing written), and a write that fails (ENOSPC, EIO ...)
cuts back the chunk's CommitLog bytes and queue entries before DiskRefused is
raised, so the slave's log always ends on the last whole record it acked.

Damaged bytes from the master (ha_stream's docstring says which and why) are
written like the rest, so offsets stay the master's. A damaged record whose
header can be salvaged gets its queue entry, pointing at the damage (the pull
path then skips it by its check and counts it). One whose header cannot be
read leaves its queue one entry short, and so does a record swallowed by
the span of an earlier one whose size field broke; when that queue's next
record arrives with a queue offset past the queue's end, and such damage lies
between the queue's last record and it, the gap is filled with entries
pointing at that damage (at most one per MIN_RECORD bytes of it), so the
slave's queue offsets stay the master's and the queue goes on. A gap with no
damage to explain it is not filled (a corrupt QUEUEOFFSET field must not
skip a queue ahead): that record is not queued, as before.
"""

import collections
import logging

from quiver.wire import names, record

from . import ha_stream, visibility
from .consume_queue import ENTRY

log = logging.getLogger(__name__)

LOGGED_MAX = 10_000     # damaged spans logged once each, up to this many
UNATTRIBUTED_KEPT = 1024  # damaged spans without a readable header remembered for gap filling


class DiskRefused(ValueError):
    """The disk guard refused the chunk, or its write failed and was rolled back."""


class ReplicaState:
    """What a slave remembers across chunks: damage it could not attribute to a queue, and counts."""

    def __init__(self):
        self.unattributed: collections.deque = collections.deque(maxlen=UNATTRIBUTED_KEPT)  # (offset, size)
        self.logged: set[int] = set()
        self.corrupt_records = 0    # framing intact, a CRC wrong: copied
        self.damaged_spans = 0      # framing broken: copied up to the next intact record
        self.damaged_bytes = 0
        self.gap_entries = 0        # queue entries filled in for damage without a readable header

    def gap_fill(self, after_phys: int, before_phys: int, gap: int) -> list[tuple[int, int]] | None:
        """`gap` (offset, size) entries pointing at unattributed damage between two records of a
        queue, or None when no such damage explains a gap that large."""
        spans = [s for s in self.unattributed if after_phys < s[0] < before_phys]
        if not spans or gap > sum(size for _, size in spans) // record.MIN_RECORD:
            return None
        return [spans[min(i, len(spans) - 1)] for i in range(gap)]

    def stats(self) -> dict:
        return {"corrupt_records_copied": self.corrupt_records, "damaged_spans_copied": self.damaged_spans,
                "damaged_bytes_copied": self.damaged_bytes, "queue_gap_entries": self.gap_entries}


def append(store, offset: int, data, state: ReplicaState | None = None) -> tuple[int, set]:
    """A slave's append: its master's CommitLog bytes, verbatim, at the same offset.

    `data` is one master segment's bytes ending on a record boundary; each record
    is checked before anything is written (ha_stream.check_chunk). Dispatch is
    `_dispatch` with recovery's rule (a record enters its queue only at the queue's
    next offset), so a queue that starts mid-log (a new slave of a master whose
    oldest segments expired) begins at its first record's offset. Returns (new
    end, touched (topic, queue) pairs). Raises DiskRefused (nothing of the chunk
    kept) when the disk refused it, ValueError on bytes at the wrong offset."""
    state = state if state is not None else ReplicaState()
    cl = store.commit_log
    if offset != cl.write_end:
        if cl.segments or offset % store.segment_bytes:
            raise ValueError(f"replicated bytes start at {offset}; this log ends at {cl.write_end}")
        cl.truncate(offset)  # an empty log starts at the master's oldest segment
    items = ha_stream.check_chunk(data, offset, store.segment_bytes)
    why = store.disk.refusal(len(data))
    if why is not None:
        raise DiskRefused(f"replicated bytes at {offset} not stored: {why}")
    start = cl.write_end
    marks = {}  # (topic, queue) -> max offset before this chunk, for a rollback
    try:
        return _append(store, data, offset, items, marks, state)
    except OSError as exc:
        with store._flush_lock:
            for key, mark in marks.items():
                store.cqs[key].truncate_to(mark)
            cl.truncate(start)
            visibility.cut(store, start)
        store._counts["puts_rolled_back"] += 1
        log.error("replicated bytes at %d failed and were rolled back: %r", offset, exc)
        raise DiskRefused(f"replicated bytes at {offset} not stored: "
                          f"{store.disk.write_failed('a replicated append', exc)}") from None


def _append(store, data, offset: int, items: list, marks: dict, state: ReplicaState) -> tuple[int, set]:
    cl = store.commit_log
    if not cl.segments or cl.space_left() == 0:
        cl.roll()
    if len(data) > cl.space_left():
        raise ValueError(f"{len(data)} replicated bytes at {offset} overrun the segment")
    cl.append(data)
    touched = set()
    for group in ha_stream.groups(items):
        if isinstance(group, ha_stream.Damage):
            _damaged(store, group, marks, state)
        else:
            _run(store, group, marks, state, touched)
    store._dispatched = cl.write_end
    store._counts["replicated_bytes"] += len(data)
    return cl.write_end, touched


def _run(store, run: list, marks: dict, state: ReplicaState, touched: set) -> None:
    """The queue and index entries of one put's records."""
    first = run[0]
    key = (first.topic, first.queue_id)
    tx = first.sys_flag & record.TX_MASK
    queued = run if tx == record.TX_NOT or tx == record.TX_COMMIT else []
    if queued and (not names.is_valid_topic(first.topic) or first.queue_id < 0):
        log.warning("replicated records of %s/%d: not a valid topic or queue; not queued",
                    ascii(first.topic), first.queue_id)
        queued = []
    if queued:
        cq = store._cq(*key)
        marks.setdefault(key, cq.max_offset)
        if cq.max_offset == 0 and not cq.files:
            cq.start_at(first.queue_offset)
        nxt = cq.max_offset
        queued = [r for r in run if r.queue_offset >= nxt]
        if queued and queued[0].queue_offset > nxt:
            _fill_gap(cq, nxt, queued[0], state)
        if queued and queued[0].queue_offset != cq.max_offset:
            log.warning("%s/%d: replicated queue offset %d, expected %d; not queued", key[0], key[1],
                        queued[0].queue_offset, cq.max_offset)
            queued = []
        if queued:
            touched.add(key)
    args = (first.topic, first.queue_id, tx, first.store_ts)
    if len(queued) == len(run):
        store._dispatch(*args, [r.phys_offset for r in run], [r.size for r in run], [r.props for r in run])
    else:
        store._dispatch(*args, [r.phys_offset for r in run], [r.size for r in run],
                        [r.props for r in run], to_cq=False)
        if queued:
            store._dispatch(*args, [r.phys_offset for r in queued], [r.size for r in queued],
                            [r.props for r in queued], to_index=False)
    if queued and store.replica_confirm is not None:  # each served once the master's confirm offset covers it
        r0 = queued[0]
        visibility.note(store, store.cqs[key], r0.phys_offset + r0.size, r0.queue_offset,
                        [(r.phys_offset + r.size, r.queue_offset) for r in queued[1:]])


def _fill_gap(cq, nxt: int, rec, state: ReplicaState) -> None:
    """Queue offsets [nxt, rec.queue_offset) lost with damage whose header could not be read."""
    last = cq.entry(nxt - 1) if nxt > 0 else None
    spans = state.gap_fill(last[0] if last else -1, rec.phys_offset, rec.queue_offset - nxt)
    if spans is None:
        return
    cq.append(b"".join(ENTRY.pack(off, size, 0) for off, size in spans))
    state.gap_entries += len(spans)
    log.error("%s/%d: queue offsets [%d, %d) were in damaged bytes of the master's CommitLog: their entries "
              "point at the damage (never served), the queue goes on at %d", cq.topic, cq.queue_id, nxt,
              rec.queue_offset, rec.queue_offset)


def _damaged(store, d: ha_stream.Damage, marks: dict, state: ReplicaState) -> None:
    """Copied damage: counted, logged once, and queued where its header says (never served)."""
    if d.framed:
        state.corrupt_records += 1
    else:
        state.damaged_spans += 1
        state.damaged_bytes += d.size
    if d.offset not in state.logged and len(state.logged) < LOGGED_MAX:
        state.logged.add(d.offset)
        where = f"{d.head[0]}/{d.head[1]} queue offset {d.head[2]}" if d.head else "unknown queue"
        log.error("replicated a %s from the master as it is (%s, CommitLog [%d, %d), %s): never served here "
                  "either; the records after it are replicated intact",
                  "corrupt record" if d.framed else "damaged span", where, d.offset, d.offset + d.size, d.why)
    head = d.head
    queued = False
    if head is not None:
        topic, queue_id, queue_offset, sys_flag = head
        tx = sys_flag & record.TX_MASK
        cq = store.cqs.get((topic, queue_id)) if names.is_valid_topic(topic) and queue_id >= 0 else None
        if cq is not None and (tx == record.TX_NOT or tx == record.TX_COMMIT) and queue_offset == cq.max_offset:
            marks.setdefault((topic, queue_id), cq.max_offset)
            store._dispatch(topic, queue_id, tx, d.store_ts, [d.offset], [d.size], [d.props], to_index=False)
            queued = True
    if not (queued and d.framed):
        # a span of broken framing may hold more records than the one whose header was read
        state.unattributed.append((d.offset, d.size))


def truncate(store, end: int) -> int:
    """Cut a slave's log back to `end` (a record boundary its master shares) before it replicates:
    the CommitLog, every queue entry pointing at or past it, the index's view. Returns the bytes cut.
    recovery.py applies the same queue rule after a crash."""
    cl = store.commit_log
    cut = cl.write_end - end
    if cut <= 0:
        return 0
    with store._flush_lock:
        for cq in store.cqs.values():
            last = cq.entry(cq.max_offset - 1) if cq.max_offset > 0 else None
            if last is not None and last[0] + last[1] > end:
                cq.truncate_to(cq.first_offset_where(lambda e: e[0] + e[1] > end))
        cl.truncate(end)
        cl.flushed = min(cl.flushed, end)
        store._dispatched = end
        store.index.clamp_end(end)
        visibility.cut(store, end)
    log.warning("CommitLog cut from %d back to %d (%d bytes its new master does not have)", end + cut, end, cut)
    return cut
