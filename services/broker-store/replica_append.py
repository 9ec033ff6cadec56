"""A slave's append: its master's CommitLog bytes, verbatim, at the same offset, then dispatched.

Owns the rules for replicated bytes only; the CommitLog and queues are the
store's, dispatch and the queue-entry rule queue_entries' (the same code a put
and recovery run) and the chunk checks are ha_stream's. Like a put, all or nothing: the disk guard is asked
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

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from quiver.wire import names

from . import ha_stream, visibility
from .queue_entries import Gaps, cut_past, dispatch, entry_due, queue_damage, takes_queue_offset

if TYPE_CHECKING:
    from .store import MessageStore

log = logging.getLogger(__name__)

LOGGED_MAX = 10_000     # damaged spans logged once each, up to this many


class DiskRefused(ValueError):
    """The disk guard refused the chunk, or its write failed and was rolled back."""


class ReplicaState(Gaps):
    """What a slave remembers across chunks: damage it could not attribute to a queue, and counts."""

    def __init__(self):
        super().__init__()
        self.logged: set[int] = set()
        self.corrupt_records = 0    # framing intact, a CRC wrong: copied
        self.damaged_spans = 0      # framing broken: copied up to the next intact record
        self.damaged_bytes = 0

    def stats(self) -> dict:
        return {"corrupt_records_copied": self.corrupt_records, "damaged_spans_copied": self.damaged_spans,
                "damaged_bytes_copied": self.damaged_bytes, "queue_gap_entries": self.gap_entries}


def append(store: MessageStore, offset: int, data, state: ReplicaState | None = None) -> tuple[int, set]:
    """A slave's append: its master's CommitLog bytes, verbatim, at the same offset.

    `data` is one master segment's bytes ending on a record boundary; each record
    is checked before anything is written (ha_stream.check_chunk). Dispatch is
    recovery's (queue_entries: a record enters its queue only at the queue's next
    offset), so a queue that starts mid-log (a new slave of a master whose
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
        store.roll_back(start, marks, exc, f"append of replicated bytes at {offset}")
        raise DiskRefused(f"replicated bytes at {offset} not stored: "
                          f"{store.disk.write_failed('a replicated append', exc)}") from None


def _append(store: MessageStore, data, offset: int, items: list, marks: dict,
            state: ReplicaState) -> tuple[int, set]:
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
    store.mark_dispatched(cl.write_end)
    store.count("replicated_bytes", len(data))
    return cl.write_end, touched


def _run(store: MessageStore, run: list, marks: dict, state: ReplicaState, touched: set) -> None:
    """The queue and index entries of one put's records."""
    first = run[0]
    key = (first.topic, first.queue_id)
    queued = run if takes_queue_offset(first.sys_flag) else []
    if queued and (not names.is_valid_topic(first.topic) or first.queue_id < 0):
        log.warning("replicated records of %s/%d: not a valid topic or queue; not queued",
                    ascii(first.topic), first.queue_id)
        queued = []
    if queued:
        cq = store.queue(*key)
        marks.setdefault(key, cq.max_offset)
        if cq.max_offset == 0 and not cq.files:
            cq.start_at(first.queue_offset)
        nxt = cq.max_offset
        queued = [r for r in run if r.queue_offset >= nxt]  # those below it are there already
        if queued and not entry_due(cq, queued[0].queue_offset, queued[0].phys_offset, state):
            queued = []
        if queued:
            touched.add(key)
    args = (store, first.topic, first.queue_id, first.sys_flag, first.store_ts)
    if len(queued) == len(run):
        dispatch(*args, [r.phys_offset for r in run], [r.size for r in run], [r.props for r in run])
    else:
        dispatch(*args, [r.phys_offset for r in run], [r.size for r in run], [r.props for r in run], to_cq=False)
        if queued:
            dispatch(*args, [r.phys_offset for r in queued], [r.size for r in queued],
                     [r.props for r in queued], to_index=False)
    if queued and store.replica_confirm is not None:  # each served once the master's confirm offset covers it
        r0 = queued[0]
        visibility.note(store, store.cqs[key], r0.phys_offset + r0.size, r0.queue_offset,
                        [(r.phys_offset + r.size, r.queue_offset) for r in queued[1:]])


def _damaged(store: MessageStore, d: ha_stream.Damage, marks: dict, state: ReplicaState) -> None:
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
    queue_damage(store, d.head, d.offset, d.size, d.framed, state, d.store_ts, d.props, before=marks.setdefault)


def truncate(store: MessageStore, end: int) -> int:
    """Cut a slave's log back to `end` (a record boundary its master shares) before it replicates:
    the CommitLog, every queue entry pointing at or past it, the index's view. Returns the bytes cut.
    recovery.py cuts the queues alike after a crash (queue_entries.cut_past)."""
    cl = store.commit_log
    cut = cl.write_end - end
    if cut <= 0:
        return 0
    with store.exclusive():
        for cq in store.cqs.values():
            cut_past(cq, end)
        cl.truncate(end)
        cl.flushed = min(cl.flushed, end)
        store.mark_dispatched(end)
        store.index.clamp_end(end)
        visibility.cut(store, end)
    log.warning("CommitLog cut from %d back to %d (%d bytes its new master does not have)", end + cut, end, cut)
    return cut
