"""One compaction pass over one queue, on whatever reads its files: the broker's compaction thread
(compaction.py) or a child process (compaction_child.py).

Owns which records a pass keeps and how it reads them: its inputs are the old compacted log's
records then the ConsumeQueue's [start, end); the key of a record is its KEYS property, per key
only the record with the highest queue offset is kept; a record with an empty body (or the Kafka
gateway's null value) is a tombstone, kept until its store time + delete_retention_ms, then
dropped with its key; a record without KEYS has nothing to be replaced by and is kept. Every
record read is checked like a served one (record_checks), and the result is written as a new
compacted log (compacted_log.write: temp file, fsync, rename). Does not own when a pass runs,
installing its result nor retention (compaction.py).

`cl` is anything with the CommitLog's `segment_for` and `read`, `cq` anything with the
ConsumeQueue's `read` (and `topic`, `queue_id` for messages).
"""

from __future__ import annotations

import os
import time
from typing import Callable

from quiver.wire import properties, record, record_checks
from quiver.wire.property_string import NAME_SEP, PROP_SEP

from . import compacted_log
from .compacted_log import CompactedLog
from .consume_queue import ENTRY

READ_ENTRIES = 4096   # ConsumeQueue entries read at once by a pass
BUSY_SLICE_S = 0.002  # a thread's pass works in slices of about this long (under the 5 ms GIL switch interval)
READ_GAP_BYTES = 16 << 10   # records closer than this are read with one pread
RUN_MAX_BYTES = 4 << 20     # and at most this much at once
_SEP_B = PROP_SEP.encode()
_SEP = _SEP_B[0]
_KEYS = (properties.KEYS + NAME_SEP).encode()
# the Kafka gateway's mark of a null value (a Kafka tombstone)
_NULL_NAME, _NULL_VALUE = ("kafka.value" + NAME_SEP).encode(), b"null"


class PassFailed(Exception):
    """A pass read a record that failed its check (or vanished): nothing was replaced."""


class Throttle:
    """Sleeps so that what `add` counts stays under `bytes_per_s` (0: no limit), and so that the
    pass works at most `busy_ratio` of the time: on a thread it shares the GIL with the service
    thread, whose puts would otherwise wait out a switch interval at every system call (a pass
    at full speed cut in-process puts to a sixth)."""

    def __init__(self, bytes_per_s: int, busy_ratio: float = 1.0, clock=time.monotonic, sleep=time.sleep):
        self.rate, self.busy, self.clock, self.sleep = bytes_per_s, busy_ratio, clock, sleep
        self.start = self.rested = clock()
        self.done = 0

    def add(self, n: int) -> None:
        self.done += n
        now = self.clock()
        if self.busy < 1.0 and now - self.rested >= BUSY_SLICE_S:
            self.sleep((now - self.rested) * (1 / self.busy - 1))
            self.rested = now = self.clock()
        if self.rate <= 0:
            return
        ahead = self.done / self.rate - (now - self.start)
        if ahead > 0:
            self.sleep(ahead)
            self.rested = self.clock()


def run(cl, cq, old: CompactedLog | None, start: int, end: int, directory: str, now_ms: float,
        delete_retention_ms: int, throttle: Throttle,
        step: Callable[[str], None]) -> tuple[int, int, float | None, CompactedLog]:
    """Compact [the old log's records, then the queue's [start, end)] into a new compacted log with
    watermark `end`: (records read, records kept, when the first kept tombstone goes (epoch ms) or
    None, the new log opened). `step(point)` runs at each stage (the crash-point test's hook)."""
    inputs = _inputs(old, cq, start, end)
    kept, due = _choose(cl, old, inputs, throttle, step, now_ms - delete_retention_ms, delete_retention_ms)
    step("chosen")

    def records():
        for item, view in _checked(cl, old, kept):
            throttle.add(item[3])
            yield view

    new = compacted_log.write(directory, end, [(q, p, s, c) for _, q, p, s, c in kept], records(), step)
    return len(inputs), len(kept), due, new


def _inputs(old: CompactedLog | None, cq, start: int, end: int) -> list[tuple]:
    """(source, queue offset, CommitLog offset, size, tags code) of every record a pass reads,
    ascending: the old compacted log's, then the ConsumeQueue's [start, end)."""
    out: list[tuple] = []
    if old is not None:
        out.extend((i, e[0], e[1], e[3], e[4]) for i, e in enumerate(old.entries))
    at = start
    while at < end:
        raw = cq.read(at, min(READ_ENTRIES, end - at))
        if not raw:
            raise PassFailed(f"{cq.topic}/{cq.queue_id}: ConsumeQueue entry {at} is not there")
        for phys, size, code in ENTRY.iter_unpack(raw):
            if size > 0:
                out.append((None, at, phys, size, code))
            at += 1
    return out


def _checked(cl, old: CompactedLog | None, items: list[tuple]):
    """(item, its record) for each input item in order, read with one pread per run of nearby
    records (in the old compacted log, or in one CommitLog segment), each record checked
    like a served one: PassFailed for one that is not whole and intact (nothing is replaced)."""
    i, n = 0, len(items)
    while i < n:
        src, _, phys, size, _ = items[i]
        from_old = src is not None and old is not None   # an old compacted log's entry: pos in its data
        if from_old:
            at = lambda it: old.entries[it[0]][2]   # noqa: E731
            fits = lambda it: it[0] is not None     # noqa: E731
        else:
            seg = cl.segment_for(phys)
            if seg is None:
                raise PassFailed(f"queue offset {items[i][1]} (CommitLog {phys}) is not in the CommitLog")
            at = lambda it: it[2]   # noqa: E731
            fits = lambda it: it[0] is None and it[2] + it[3] <= seg.end   # noqa: E731
        start = at(items[i])
        end = start + size
        j = i + 1
        while j < n and fits(items[j]) and 0 <= at(items[j]) - end <= READ_GAP_BYTES \
                and end - start < RUN_MAX_BYTES:
            end = at(items[j]) + items[j][3]
            j += 1
        if from_old:
            buf = os.pread(old.fd, end - start, old.data_start + start)
        else:
            buf = cl.read(start, end - start)
        view = memoryview(buf)
        run_ = items[i:j]
        if len(buf) != end - start:
            raise PassFailed(f"queue offset {run_[0][1]}: short read")
        if not from_old:   # CommitLog records: one check of the whole run
            bad = record_checks.check_run(buf, [(it[2], it[3]) for it in run_], start)
            if bad:
                raise PassFailed(f"queue offset {run_[bad[0][0]][1]}: {bad[0][1]}")
        for it in run_:
            rec = view[at(it) - start:at(it) - start + it[3]]
            if from_old and (bad := record_checks.check_run(rec, [(it[2], it[3])], it[2])):
                raise PassFailed(f"queue offset {it[1]} (CommitLog {it[2]}): {bad[0][1]}")
            yield it, rec
        i = j


def _choose(cl, old: CompactedLog | None, inputs: list[tuple], throttle: Throttle, step, expire_before: float,
            delete_retention_ms: int) -> tuple[list[tuple], float | None]:
    """(the inputs a new log keeps: the last of each key, tombstones stored after `expire_before`
    (epoch ms), records without a key; when the first tombstone kept is due to go, or None)."""
    latest: dict[bytes, int] = {}
    dead: set[int] = set()     # tombstones past their retention
    tomb_ts: dict[int, int] = {}   # tombstones within it: their store time
    keyless: list[int] = []
    for i, (item, rec) in enumerate(_checked(cl, old, inputs)):
        throttle.add(item[3])
        blen, raw = record.raw_properties_at(rec, 0, len(rec))
        key = _value(raw, _KEYS)
        if not key:
            keyless.append(i)
            continue
        latest[key] = i
        if blen == 0 or _value(raw, _NULL_NAME) == _NULL_VALUE:
            ts = record.store_ts_of(rec)
            if ts <= expire_before:
                dead.add(i)
            else:
                tomb_ts[i] = ts
        if i % 256 == 0:
            step("scan")
    keep = sorted({*latest.values(), *keyless} - dead)
    live = [tomb_ts[i] for i in latest.values() if i in tomb_ts]
    return [inputs[i] for i in keep], (min(live) + delete_retention_ms if live else None)


def _value(props: bytes, name: bytes) -> bytes | None:
    """The value of property `name` (NAME_SEP included) in a stored properties string, unparsed."""
    i = props.find(name)
    while i > 0 and props[i - 1] != _SEP:
        i = props.find(name, i + 1)
    if i < 0:
        return None
    i += len(name)
    j = props.find(_SEP_B, i)
    return props[i:] if j < 0 else props[i:j]
