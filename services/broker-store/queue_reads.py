"""The pull path's reads: ConsumeQueue entries to checked CommitLog records.

Owns how one pull picks its records (tag filter, message and byte caps, the
RocketMQ-style scan limit of a filtered pull), how they are read (one pread
per run of nearby records in a segment) and that every served record is
checked first (quiver.wire.record_checks.check_run: size, magic, offset, body CRC,
lengths). A corrupt record is left out and counted
(`corrupt_records_skipped` in STATUS), logged once naming topic, queue and
offset; the pull's next offset still moves past it, so a bad record never
stops a queue. Does not own any file (commit_log, consume_queue) nor the
reply codes (status_codes).
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from quiver.wire import record_checks
from quiver.wire.speedups import fast

from .consume_queue import ENTRY, ENTRY_SIZE, ConsumeQueue

if TYPE_CHECKING:
    from .store import MessageStore

log = logging.getLogger(__name__)

FILTER_SCAN_ENTRIES = 800   # ConsumeQueue entries one filtered pull may skip (16 000 bytes)
READ_GAP_BYTES = 16 << 10   # records closer than this are fetched with one pread
BAD_LOGGED_MAX = 10_000    # corrupt records logged once each, up to this many


class GetStatus(enum.Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"


@dataclass(slots=True)
class GetResult:
    status: GetStatus
    next_offset: int
    min_offset: int
    max_offset: int
    data: bytes
    count: int


def get_messages(store: MessageStore, topic: str, queue_id: int, offset: int, max_msgs: int = 32,
                 tag_hashes: set[int] | None = None, max_bytes: int = 4 << 20) -> GetResult:
    """Up to `max_msgs` records (at least one, then at most `max_bytes`) of a queue from
    `offset`, only those whose tag hash is in `tag_hashes` when given; every one checked."""
    cq = store.cqs.get((topic, queue_id))
    hi = store.visible_max(cq) if cq else 0
    lo = min(cq.min_offset, hi) if cq else 0
    compacted = store.compaction.logs.get((topic, queue_id))
    if compacted is not None and cq is not None:
        lo = min(lo, compacted.low)
        if offset < compacted.watermark:   # below its first record: a gap, as after any compaction
            return _compacted(store, compacted, offset, max_msgs, tag_hashes, max_bytes, lo, hi)
    end = cq.max_offset if cq else 0   # past `hi`: stored, not confirmed yet (visibility.py)
    if end == 0:
        return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, lo, hi, b"", 0)
    if offset < lo:
        return GetResult(GetStatus.OFFSET_TOO_SMALL, lo, lo, hi, b"", 0)
    if hi <= offset <= end:
        # nothing new yet; a consumer between the two waits for them, it is not moved back
        return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, lo, hi, b"", 0)
    if offset > end:  # past what is stored (a log cut back): from the confirmed end on
        return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, hi, lo, hi, b"", 0)
    max_msgs = max(1, max_msgs)
    scan = max_msgs if tag_hashes is None else max(max_msgs, FILTER_SCAN_ENTRIES)
    left = min(scan, hi - offset)
    min_phys = store.reads.min_offset   # below the local CommitLog when it is tiered
    picked: list[tuple[int, int]] = []
    total = 0
    nxt = offset
    full = False
    while left > 0 and not full:
        raw = cq.read(nxt, left)  # one pread; a second only at a CQ file boundary
        if not raw:
            break
        left -= len(raw) // ENTRY_SIZE
        walked, total, full = pick_entries(raw, tag_hashes, min_phys, picked, total, max_msgs, max_bytes)
        nxt += walked
    store.count("get_calls")
    if not picked:
        return GetResult(GetStatus.NO_MATCHED_MESSAGE, nxt, lo, hi, b"", 0)
    data, bad = _read_records(store.reads, picked)
    count = len(picked)
    if bad:
        count -= len(bad)
        _skipped(store, cq, offset, bad)
        if not count:  # only bad ones: the consumer moves past them at once
            return GetResult(GetStatus.NO_MATCHED_MESSAGE, nxt, lo, hi, b"", 0)
    store.count("get_msgs", count)
    return GetResult(GetStatus.FOUND, nxt, lo, hi, data, count)


@fast
def pick_entries(raw: bytes, tag_hashes: set[int] | None, min_phys: int, picked: list[tuple[int, int]], total: int,
                 max_msgs: int, max_bytes: int) -> tuple[int, int, bool]:
    """Walk packed ConsumeQueue entries, adding to `picked` the (phys, size) of each one to serve
    (its tag hash in `tag_hashes` when given, a size, a record not below `min_phys`) until
    `picked` holds `max_msgs` or the next would take the bytes past `max_bytes` (the first is
    always taken): (entries walked, bytes picked in all, whether a cap was reached). Per
    entry of every pull (compiled twin: quiver.wire.speedups)."""
    walked = 0
    for phys, size, code in ENTRY.iter_unpack(raw):
        if (tag_hashes is not None and code not in tag_hashes) or size <= 0 or phys < min_phys:
            walked += 1
            continue
        if picked and total + size > max_bytes:
            return walked, total, True
        picked.append((phys, size))
        total += size
        walked += 1
        if len(picked) >= max_msgs:
            return walked, total, True
    return walked, total, False


def _compacted(store: MessageStore, compacted, offset: int, max_msgs: int, tag_hashes, max_bytes: int,
               lo: int, hi: int) -> GetResult:
    """A pull below a compacted queue's watermark: served from its compacted log (compacted_log.py)."""
    recs, nxt, bad = compacted.read(offset, max(1, max_msgs), tag_hashes, max_bytes)
    store.count("get_calls")
    if bad:
        store.count("corrupt_records_skipped", len(bad))
        for qoff, why in bad:
            log.error("corrupt compacted record skipped: %s queue offset %d: %s", compacted.path, qoff, why)
    if not recs:
        return GetResult(GetStatus.NO_MATCHED_MESSAGE, nxt, lo, hi, b"", 0)
    store.count("get_msgs", len(recs))
    return GetResult(GetStatus.FOUND, nxt, lo, hi, b"".join(recs), len(recs))


def _skipped(store: MessageStore, cq: ConsumeQueue, offset: int, bad: list[tuple[int, int, str]]) -> None:
    """Count corrupt records left out of a pull; log each once, naming topic, queue and offset."""
    store.count("corrupt_records_skipped", len(bad))
    for phys, size, why in bad:
        if phys in store.bad_logged or len(store.bad_logged) >= BAD_LOGGED_MAX:
            continue
        store.bad_logged.add(phys)
        qoff = cq.first_offset_where(lambda e: e[0] >= phys, lo=offset)
        log.error("corrupt record skipped: %s/%d queue offset %d (CommitLog %d, %d bytes): %s",
                  cq.topic, cq.queue_id, qoff, phys, size, why)


@fast
def run_end(picked: list[tuple[int, int]], i: int, seg_end: int, gap_bytes: int) -> tuple[int, int, bool]:
    """The run of records read with one pread from `picked[i]`: each next one starts at most
    `gap_bytes` past the one before and ends by `seg_end`. (index past the run, CommitLog
    offset its last record ends at, whether any gap lies between them) (compiled twin:
    quiver.wire.speedups)."""
    start, size = picked[i]
    end = start + size
    j, n = i + 1, len(picked)
    gaps = False
    while j < n:
        p, s = picked[j]
        if not (0 <= p - end <= gap_bytes and p + s <= seg_end):
            break
        gaps |= p != end
        end = p + s
        j += 1
    return j, end, gaps


def _read_records(cl, picked: list[tuple[int, int]]) -> tuple[bytes, list[tuple[int, int, str]]]:
    """(the records, [(CommitLog offset, size, why) of those that failed their check]),
    with one pread and one record_checks.check_run per run of nearby records in one segment."""
    out: list[bytes] = []
    bad_all: list[tuple[int, int, str]] = []
    i, n = 0, len(picked)
    while i < n:
        start, size = picked[i]
        seg = cl.segment_for(start)
        if seg is None:
            bad_all.append((start, size, "not in the CommitLog"))
            i += 1
            continue
        j, end, gaps = run_end(picked, i, seg.end, READ_GAP_BYTES)
        buf = cl.read(start, end - start)
        run = picked[i:j]
        bad = record_checks.check_run(buf, run, start)
        if bad:
            skip = {k for k, _ in bad}
            bad_all.extend((*run[k], why) for k, why in bad)
            run = [span for k, span in enumerate(run) if k not in skip]
            gaps = True
        if not gaps:
            out.append(buf)
        else:
            view = memoryview(buf)
            out.extend(view[p - start:p - start + s] for p, s in run)
        i = j
    return b"".join(out), bad_all
