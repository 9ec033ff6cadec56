"""A slave's append: its master's CommitLog bytes, verbatim, at the same offset, then dispatched.

Owns the rules for replicated bytes only; the CommitLog, queues and dispatch are
the store's (MessageStore._dispatch, the same code a put runs) and the chunk
checks are ha_stream's. Like a put, all or nothing: a write that fails cuts back
the chunk's CommitLog bytes and queue entries, and the disk guard is asked first.
"""

import logging

from quiver.wire import names, record

from . import ha_stream

log = logging.getLogger(__name__)


def append(store, offset: int, data) -> tuple[int, set]:
    """A slave's append: its master's CommitLog bytes, verbatim, at the same offset.

    `data` is whole records of one master segment; each is CRC-checked
    before anything is written. Dispatch is `_dispatch` with recovery's rule
    (a record enters its queue only at the queue's next offset), so a queue
    that starts mid-log (a new slave of a master whose oldest segments
    expired) begins at its first record's offset. Returns (new end,
    touched (topic, queue) pairs). Raises ValueError on bad bytes."""
    cl = store.commit_log
    if offset != cl.write_end:
        if cl.segments or offset % store.segment_bytes:
            raise ValueError(f"replicated bytes start at {offset}; this log ends at {cl.write_end}")
        cl.truncate(offset)  # an empty log starts at the master's oldest segment
    recs = ha_stream.check_chunk(data, offset, store.segment_bytes)
    why = store.disk.refusal(len(data))
    if why is not None:
        raise ValueError(f"replicated bytes at {offset} not stored: {why}")
    start = cl.write_end
    marks = {}  # (topic, queue) -> max offset before this chunk, for a rollback
    try:
        return _append(store, data, offset, recs, marks)
    except OSError as exc:
        with store._flush_lock:
            for key, mark in marks.items():
                store.cqs[key].truncate_to(mark)
            cl.truncate(start)
        store._counts["puts_rolled_back"] += 1
        log.error("replicated bytes at %d failed and were rolled back: %r", offset, exc)
        raise ValueError(f"replicated bytes at {offset} not stored: "
                         f"{store.disk.write_failed('a replicated append', exc)}") from None


def _append(store, data, offset: int, recs: list, marks: dict) -> tuple[int, set]:
    cl = store.commit_log
    if not cl.segments or cl.space_left() == 0:
        cl.roll()
    if len(data) > cl.space_left():
        raise ValueError(f"{len(data)} replicated bytes at {offset} overrun the segment")
    cl.append(data)
    touched = set()
    for run in ha_stream.runs(recs):
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
            if queued and queued[0].queue_offset != nxt:
                log.warning("%s/%d: replicated queue offset %d, expected %d; not queued", key[0], key[1],
                            queued[0].queue_offset, nxt)
                queued = []
            if queued:
                touched.add(key)
        args = (first.topic, first.queue_id, tx, first.store_ts)
        if len(queued) == len(run):
            store._dispatch(*args, [r.phys_offset for r in run], [r.size for r in run],
                           [r.props for r in run])
        else:
            store._dispatch(*args, [r.phys_offset for r in run], [r.size for r in run],
                           [r.props for r in run], to_cq=False)
            if queued:
                store._dispatch(*args, [r.phys_offset for r in queued], [r.size for r in queued],
                               [r.props for r in queued], to_index=False)
    store._dispatched = cl.write_end
    store._counts["replicated_bytes"] += len(data)
    return cl.write_end, touched
