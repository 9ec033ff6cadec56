"""Restart repair: find where the CommitLog really ends and bring the queues in line.

Owns the recovery procedure only; the files belong to their modules and the
re-dispatch is MessageStore._dispatch, the same code the put path runs.

    1. start at the segment holding the checkpoint's dispatched offset (the whole
       log when there is no readable checkpoint);
    2. walk forward record by record, CRC-checking every one; the first record
       that is not whole and intact (bad magic, size past the data, CRC or length
       mismatch, wrong PHYSICALOFFSET, BLANK not ending its segment) is the end;
    3. re-dispatch each intact record its ConsumeQueue or index lacks: a record
       goes to its queue only when its QUEUEOFFSET is that queue's next offset,
       and to the index only past the index's last offset, so repeating a
       recovery adds nothing;
    4. cut the CommitLog at the end (later segments deleted), cut ConsumeQueue
       entries pointing past it, and let the index take new records again.

Unlike RocketMQ we CRC-check from the segment start on a clean restart too: it
costs one segment's scan and means a record damaged while the broker was down
is never served.
"""

import bisect
import logging
import os

from quiver import names, record

from . import checkpoint

log = logging.getLogger(__name__)

CHUNK = 4 << 20  # bytes read per pread while scanning


def recover(store, ckpt_path: str, abnormal: bool) -> None:
    cl = store.commit_log
    if not cl.segments:
        if store.cqs:
            log.warning("no CommitLog: dropping %d ConsumeQueues", len(store.cqs))
        for cq in store.cqs.values():
            cq.destroy()
        store.cqs.clear()
        return
    cp = checkpoint.read(ckpt_path)
    safe = cp.logics_offset if cp else cl.min_offset
    safe = max(cl.min_offset, min(safe, cl.write_end))
    i = max(0, bisect.bisect_right([s.start for s in cl.segments], safe) - 1)
    start = cl.segments[i].start
    index_end = store.index.end_phy
    log.info("recovery (%s) from %d, checkpoint %s", "abnormal" if abnormal else "normal",
             start, cp)

    def on_record(rec: record.Record) -> None:
        tx = rec.sys_flag & record.TX_MASK
        to_cq = False
        if tx == record.TX_NOT or tx == record.TX_COMMIT:
            key = (rec.topic, rec.queue_id)
            cq = store.cqs.get(key)
            # A queue that is gone was deleted on purpose unless the record is newer
            # than the checkpoint (then the queue's creation may not have been synced).
            if cq is None and rec.phys_offset >= safe:
                if not names.is_valid_topic(rec.topic):
                    log.warning("record at %d has topic %r, not a valid name: not queued", rec.phys_offset,
                                names.shown(rec.topic))
                    return
                cq = store._cq(*key)
                cq.start_at(rec.queue_offset)
            if cq is not None:
                nxt = cq.max_offset
                to_cq = rec.queue_offset == nxt
                if rec.queue_offset > nxt:
                    log.warning("%s/%d: record at %d has queue offset %d past %d; not queued",
                                rec.topic, rec.queue_id, rec.phys_offset, rec.queue_offset, nxt)
        to_index = rec.phys_offset > index_end
        if to_cq or to_index:
            store._dispatch(rec.topic, rec.queue_id, tx, rec.store_ts, [rec.phys_offset],
                            [rec.size], [rec.props], to_cq=to_cq, to_index=to_index)

    end = scan(cl, start, on_record)
    if end < cl.write_end:
        log.warning("CommitLog cut at %d (%d bytes after it dropped)", end, cl.write_end - end)
        cl.truncate(end)
    cl.flushed = end
    store._dispatched = end
    for cq in store.cqs.values():
        last = cq.entry(cq.max_offset - 1) if cq.max_offset > 0 else None
        if last is not None and last[0] + last[1] > end:
            cut = cq.first_offset_where(lambda e: e[0] + e[1] > end)
            log.warning("%s/%d: entries from %d point past the log end; cut", cq.topic,
                        cq.queue_id, cut)
            cq.truncate_to(cut)
        # Entries of deleted segments stay in the file until retention removes it.
        cq.min_offset = cq.first_offset_where(lambda e: e[0] >= cl.min_offset)
    store.index.clamp_end(end)


def scan(cl, start: int, on_record) -> int:
    """Walk intact records from `start`, calling on_record; returns the valid end."""
    pos = start
    segs = cl.segments
    i = bisect.bisect_right([s.start for s in segs], pos) - 1
    for seg in segs[max(i, 0):]:
        if pos != seg.start and not seg.start < pos <= seg.end:
            break  # the previous segment did not end in a BLANK reaching this one
        pos = _scan_segment(cl, seg, pos, on_record)
        if pos != seg.end:
            break
    return pos


def _scan_segment(cl, seg, pos: int, on_record) -> int:
    win, win_at = b"", pos
    while pos < seg.end:
        rel = pos - win_at
        if rel + 8 > len(win):
            win, win_at, rel = os.pread(seg.fd, min(CHUNK, seg.end - pos), pos - seg.start), pos, 0
            if len(win) < 8:
                return pos
        try:
            size, blank = record.check_head(win, rel, seg.end - pos)
        except record.BadRecord:
            return pos
        if blank:
            # A filler always runs to the end of its segment; anything else is damage.
            return pos + size if pos + size == seg.end else pos
        if rel + size > len(win):
            win = os.pread(seg.fd, max(size, min(CHUNK, seg.end - pos)), pos - seg.start)
            win_at, rel = pos, 0
        try:
            rec = record.decode_at(win, rel, check_crc=True)
        except record.BadRecord as exc:
            log.warning("bad record at %d: %s", pos, exc)
            return pos
        if rec.phys_offset != pos or rec.size != size:
            log.warning("record at %d claims offset %d", pos, rec.phys_offset)
            return pos
        on_record(rec)
        pos += size
    return pos
