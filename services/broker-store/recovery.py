"""Restart repair: find where the CommitLog really ends and bring the queues in line.

Owns the recovery procedure only; the files belong to their modules and the
re-dispatch is queue_entries.dispatch, the same code the put path runs.

    1. start at the segment holding the checkpoint's dispatched offset (the whole
       log when there is no readable checkpoint);
    2. walk forward record by record, CRC-checking every one. A record that is
       not whole and intact (bad magic, size past the data, CRC or length
       mismatch, wrong PHYSICALOFFSET) is damage in the middle when an intact
       record follows it in its segment (found by its magic and its own
       PHYSICALOFFSET, `resync`): those bytes are skipped, logged and counted,
       the records after them kept — one flipped byte must not cut every acked
       message behind it. With no intact record after it in its segment, it is
       the torn tail of a crash (the end) only in the last segment: in a
       finished segment (a later one exists) nothing is ever written after its
       BLANK, so the damage runs to the segment's end and the walk goes on with
       the next segment (ha_master streams the same span to a slave);
    3. re-dispatch each intact record its ConsumeQueue or index lacks: a record
       goes to its queue only when its QUEUEOFFSET is that queue's next offset,
       and to the index only past the index's last offset, so repeating a
       recovery adds nothing. Queue offsets lost in damage whose header cannot
       be read are filled with entries pointing at that damage when the queue's
       next record arrives, by the slave's rule (queue_entries.entry_due), so
       the queue goes on past it at each record's own QUEUEOFFSET;
    4. cut the CommitLog at the end (later segments deleted), cut ConsumeQueue
       entries pointing past it, and let the index take new records again.

Unlike RocketMQ we CRC-check from the segment start on a clean restart too: it
costs one segment's scan. A record below the checkpoint's logics offset (its entries
were flushed before the checkpoint was written), within the index and below its
queue's next offset needs no dispatch, only its check: runs of those are passed over
by `record_checks.settled_run` (compiled: framing, the pull path's CRC check, the queue's
next offset), so only a record that needs more takes the record-by-record path
(1M records: 11 s -> about 1 s). RocketMQ cuts the log at the first bad record; we
cut only the tail of the last segment. A damaged record that keeps its ConsumeQueue
entry is skipped by the pull path's check (queue_reads) when served; one that
still needs its entry gets it from its salvaged header (record_checks.salvage_head) so
its queue stays continuous, and the pull path skips it the same way.
"""

from __future__ import annotations

import bisect
import logging
import os
from typing import TYPE_CHECKING

from quiver.wire import names, record, record_checks

from . import checkpoint
from .queue_entries import Gaps, cut_past, dispatch, entry_due, queue_damage, takes_queue_offset

if TYPE_CHECKING:
    from .store import MessageStore

log = logging.getLogger(__name__)

CHUNK = 4 << 20  # bytes read per pread while scanning
SALVAGE_BYTES = 8 << 20  # of a damaged span, read for its header (a longer record's header reads as
                         # unsalvageable: its queue gap is filled instead)


def recover(store: MessageStore, ckpt_path: str, abnormal: bool) -> None:
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

    gaps = Gaps()

    def on_record(rec: record.Record) -> None:
        to_cq = False
        if takes_queue_offset(rec.sys_flag):
            key = (rec.topic, rec.queue_id)
            cq = store.cqs.get(key)
            # A queue that is gone was deleted on purpose unless the record is newer
            # than the checkpoint (then the queue's creation may not have been synced).
            if cq is None and rec.phys_offset >= safe:
                if not names.is_valid_topic(rec.topic):
                    log.warning("record at %d has topic %r, not a valid name: not queued", rec.phys_offset,
                                names.shown(rec.topic))
                    return
                cq = store.queue(*key)
                cq.start_at(rec.queue_offset)
            if cq is not None:
                to_cq = entry_due(cq, rec.queue_offset, rec.phys_offset, gaps)
        to_index = rec.phys_offset > index_end
        if to_cq or to_index:
            dispatch(store, rec.topic, rec.queue_id, rec.sys_flag, rec.store_ts, [rec.phys_offset],
                     [rec.size], [rec.props], to_cq=to_cq, to_index=to_index)

    def on_damage(pos: int, end: int, head, framed: bool) -> None:
        store.count("recovery_damaged_records")
        queue_damage(store, head, pos, end - pos, framed, gaps)

    # the queues' next offsets, kept current as on_record fills them: what settled_run compares
    queue_next = {(t.encode(), q): cq.max_offset for (t, q), cq in store.cqs.items()}
    end = scan(cl, start, lambda rec: on_record(rec) or _note_next(store, queue_next, rec), on_damage,
               checked_only=(safe, index_end, queue_next))
    if end < cl.write_end:
        log.warning("CommitLog cut at %d (%d bytes after it dropped)", end, cl.write_end - end)
        cl.truncate(end)
    cl.flushed = end
    store.mark_dispatched(end)
    for cq in store.cqs.values():
        cut = cut_past(cq, end)
        if cut is not None:
            log.warning("%s/%d: entries from %d point past the log end; cut", cq.topic, cq.queue_id, cut)
        # Entries of deleted segments stay in the file until retention removes it.
        cq.min_offset = cq.first_offset_where(lambda e: e[0] >= store.reads.min_offset)
    store.index.clamp_end(end)


def scan(cl, start: int, on_record, on_damage=None, checked_only=(0, -1, {})) -> int:
    """Walk intact records from `start`, calling on_record (and on_damage(start, end, salvaged
    head or None, framed) for damage skipped); returns the valid end. Damage with nothing
    intact after it ends the walk in the last segment only (a torn tail); in a finished
    segment it runs to the segment's end and the walk goes on with the next one.
    `checked_only` = (end, last start, queue_next): intact records ending by `end`, starting
    at or before `last start` and below their queue's next offset in `queue_next` (see
    record_checks.settled_run) are checked but not passed to on_record: their entries exist."""
    pos = start
    segs = cl.segments
    i = max(bisect.bisect_right([s.start for s in segs], pos) - 1, 0)
    for k in range(i, len(segs)):
        seg = segs[k]
        if pos != seg.start and not seg.start < pos <= seg.end:
            break  # the previous segment's file stops short of this one: bytes are missing between them
        pos = _scan_segment(cl, seg, pos, on_record, on_damage or (lambda *a: None), k + 1 < len(segs),
                            checked_only)
        if pos != seg.end:
            break
    return pos


def _scan_segment(cl, seg, pos: int, on_record, on_damage, finished: bool, checked_only=(0, -1, {})) -> int:
    win, win_at = b"", pos
    checked_end, checked_last, queue_next = checked_only
    while pos < seg.end:
        rel = pos - win_at
        if rel + 8 > len(win):
            win, win_at, rel = os.pread(seg.fd, min(CHUNK, seg.end - pos), pos - seg.start), pos, 0
        if pos < checked_end and pos <= checked_last:
            run = record_checks.settled_run(win, rel, pos, min(checked_end, seg.end), checked_last, queue_next)
            if run:
                pos += run
                continue
        why = None
        try:
            size, blank = record.check_head(win, rel, seg.end - pos)
        except record.BadRecord as exc:
            size, blank, why = 0, False, str(exc)
        if blank:
            # A filler always runs to the end of its segment; anything else is damage.
            if pos + size == seg.end:
                return seg.end
            why = f"BLANK of {size} bytes does not end its segment"
        if why is None:
            if rel + size > len(win):
                win = os.pread(seg.fd, max(size, min(CHUNK, seg.end - pos)), pos - seg.start)
                win_at, rel = pos, 0
            try:
                rec = record.decode_at(win, rel, check_crc=True)
                if rec.phys_offset != pos or rec.size != size:
                    why = f"record claims offset {rec.phys_offset}"
            except record.BadRecord as exc:
                why = str(exc)
        if why is None:
            on_record(rec)
            pos += size
            continue
        nxt = resync(seg, pos)
        if nxt is not None:
            log.error("damaged CommitLog bytes [%d, %d) skipped, the records after them kept: %s", pos, nxt, why)
        elif finished:
            nxt = seg.end
            log.error("damaged CommitLog bytes [%d, %d) at the end of a finished segment skipped, the next "
                      "segment's records kept: %s", pos, nxt, why)
        else:
            log.warning("CommitLog ends at %d: %s, and no intact record after it (a torn tail)", pos, why)
            return pos
        raw = os.pread(seg.fd, min(nxt - pos, SALVAGE_BYTES), pos - seg.start)
        on_damage(pos, nxt, record_checks.salvage_head(raw, pos), _one_framed_record(raw, pos, nxt - pos))
        win, win_at, pos = b"", nxt, nxt
    return pos


def _note_next(store: MessageStore, queue_next: dict, rec: record.Record) -> None:
    cq = store.cqs.get((rec.topic, rec.queue_id))
    if cq is not None:
        queue_next[(rec.topic.encode(), rec.queue_id)] = cq.max_offset


def _one_framed_record(raw: bytes, pos: int, span: int) -> bool:
    """The damaged span is one record whose framing holds (a CRC is what failed)."""
    try:
        size, blank = record_checks.check_frame(raw, 0, pos)
    except (record.BadRecord, IndexError):
        return False
    return not blank and size == span == len(raw)


def resync(seg, pos: int) -> int | None:
    """The offset of the first intact record (or a BLANK ending the segment) after damage at
    `pos`, found by its magic, then its own PHYSICALOFFSET and CRC; None if there is none."""
    magics = (record.MAGIC_V1.to_bytes(4, "big"), record.MAGIC_V2.to_bytes(4, "big"),
              record.MAGIC_BLANK.to_bytes(4, "big"))
    at = pos + 1
    while at < seg.end:
        win = os.pread(seg.fd, min(CHUNK, seg.end - at) + 8, at - seg.start)
        hits = sorted(h for m in magics for h in _finds(win, m))
        for h in hits:
            cand = at + h - 4  # the magic sits 4 bytes into a record
            if cand <= pos:
                continue
            if _intact_at(seg, cand):
                return cand
        at += CHUNK
    return None


def _finds(buf: bytes, needle: bytes):
    i = buf.find(needle)
    while i >= 0:
        yield i
        i = buf.find(needle, i + 1)


def _intact_at(seg, pos: int) -> bool:
    head = os.pread(seg.fd, 8, pos - seg.start)
    try:
        size, blank = record.check_head(head, 0, seg.end - pos)
    except record.BadRecord:
        return False
    if blank:
        return pos + size == seg.end
    try:
        rec = record.decode_at(os.pread(seg.fd, size, pos - seg.start), 0, check_crc=True)
    except record.BadRecord:
        return False
    return rec.phys_offset == pos and rec.size == size
