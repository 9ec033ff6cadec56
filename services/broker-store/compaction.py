"""Compaction of compacted topics: keep the latest record of every key, per queue.

Owns which records a pass keeps, the pass itself (on a worker thread, its I/O
rate-limited), installing its result, and the hold it puts on CommitLog
retention. Does not own the file format (compacted_log.py) nor which topics are
compacted (the topic table's sysflag; `is_compacted` is given by the app).

A pass over one queue reads its compacted log (everything below the old
watermark) and the queue's ConsumeQueue entries from there up to the first
entry in the active CommitLog segment (never the active range, nor anything not
yet visible to consumers). The key of a record is its KEYS property; per key
only the record with the highest queue offset is kept. A record with an empty
body (or the Kafka gateway's null value) is a tombstone: kept until its store time + delete_retention_ms, then
dropped with its key. A record without KEYS has nothing to be replaced by and
is kept. The result is written as a new compacted log (atomic replacement) and
installed on the main thread.

Retention: the CommitLog may drop a segment only once every compacted queue's
compaction covers it (`retention_bound`): the compacted log is then the source
of that range, so the latest values survive the segments they were written to.
"""

from __future__ import annotations

import logging
import os
import queue
import shutil
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from quiver.errors import QuiverError
from quiver.wire import names, properties, record, record_checks
from quiver.wire.property_string import NAME_SEP, PROP_SEP

from . import compacted_log
from .compacted_log import CompactedLog
from .consume_queue import ENTRY

if TYPE_CHECKING:
    from .store import MessageStore

log = logging.getLogger(__name__)

READ_ENTRIES = 4096   # ConsumeQueue entries read at once by a pass
BUSY_RATIO = 0.25     # a pass works at most this share of the time (Throttle)
BUSY_SLICE_S = 0.002  # in slices of about this long (under the 5 ms GIL switch interval)
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
    pass works at most `busy_ratio` of the time: it shares the GIL with the service thread, whose
    puts would otherwise wait out a switch interval at every system call (a pass at full speed
    cut in-process puts to a sixth)."""

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


@dataclass(slots=True)
class PassResult:
    topic: str
    queue_id: int
    read: int = 0          # records read
    kept: int = 0          # records in the new compacted log
    watermark: int = 0
    skipped: bool = False  # nothing new to compact


class Compactor:
    def __init__(self, store: MessageStore, root: str, delete_retention_ms: int = 86_400_000,
                 bytes_per_s: int = 0, clock: Callable[[], float] = time.time):
        self.store = store
        self.root = root
        self.delete_retention_ms = delete_retention_ms
        self.bytes_per_s = bytes_per_s
        self.busy_ratio = BUSY_RATIO
        self.clock = clock
        self.logs: dict[tuple[str, int], CompactedLog] = {}
        self.is_compacted: Callable[[str], bool] = lambda topic: False
        self.passes = 0
        self.failed = 0
        self._jobs: queue.Queue = queue.Queue()
        self._worker: threading.Thread | None = None
        self._periodic = False   # a periodic pass is queued or running
        self._tombstones_due: dict[tuple[str, int], float] = {}   # queue -> when its oldest kept tombstone goes (ms)

    # ---- lifecycle (main thread) -----------------------------------------------------------

    def load(self) -> None:
        """Open every queue's compacted log; one that fails its checks is set aside, not served."""
        if not os.path.isdir(self.root):
            return
        for topic in os.listdir(self.root):
            for qid in os.listdir(os.path.join(self.root, topic)):
                if not (qid.isdigit() and qid == str(int(qid))):
                    continue
                try:
                    d = compacted_log.log_dir(self.root, topic, int(qid))
                    found = compacted_log.load(d)
                except Exception as exc:  # a bad name, a CorruptLog, an OSError: never stops a start
                    log.error("compacted log of %s/%s not loaded: %s", ascii(topic), qid, exc)
                    continue
                if found is not None:
                    self.logs[(topic, int(qid))] = found

    def close(self) -> None:
        self._jobs.put(None)
        for cl in self.logs.values():
            cl.close()
        self.logs.clear()

    def drop_topic(self, topic: str) -> None:
        for key in [k for k in self.logs if k[0] == topic]:
            self.logs.pop(key).close()
        try:
            names.check_topic(topic)
            shutil.rmtree(names.confine(self.root, topic), ignore_errors=True)
        except QuiverError as exc:   # not a valid name (or a path out of the root): nothing of it was written
            log.warning("compacted logs of %s not deleted: %s", ascii(topic), exc)

    # ---- what the read path and retention ask ------------------------------------------------

    def low(self, topic: str, queue_id: int, lo: int) -> int:
        """The queue's min offset `lo` lowered to what its compacted log still holds."""
        cl = self.logs.get((topic, queue_id))
        return lo if cl is None else min(lo, cl.low)

    def watermark(self, topic: str, queue_id: int, default: int) -> int:
        """The first queue offset its compacted log does not cover (`default` without one)."""
        cl = self.logs.get((topic, queue_id))
        return default if cl is None else max(cl.watermark, default)

    def retention_bound(self) -> int | None:
        """The lowest CommitLog offset some compacted queue still needs (None: no hold)."""
        bound = None
        for (topic, qid), cq in list(self.store.cqs.items()):
            if not self.is_compacted(topic):
                continue
            cl = self.logs.get((topic, qid))
            start = max(cl.watermark if cl else 0, cq.min_offset)
            e = cq.entry(start) if start < cq.max_offset else None
            if e is not None and (bound is None or e[0] < bound):
                bound = e[0]
        return bound

    # ---- a pass ---------------------------------------------------------------------------------

    def compact_queue(self, topic: str, queue_id: int, force: bool = True,
                      step: Callable[[str], None] | None = None,
                      install: Callable[[Callable[[], None]], None] | None = None) -> PassResult:
        """One pass over one queue; the new log is installed through `install(fn)` (default: now,
        on this thread; the worker hands it to the main thread). `step(point)` runs at each stage."""
        res = PassResult(topic, queue_id)
        cq = self.store.cqs.get((topic, queue_id))
        old = self.logs.get((topic, queue_id))
        w_old = old.watermark if old else 0
        if cq is None:
            res.skipped = True
            return res
        cl = self.store.commit_log
        segs = cl.segments
        limit = segs[-1].start if segs else 0   # the active segment is never compacted
        # nor what consumers cannot see yet, nor what is not on disk: a crash would cut it from the
        # CommitLog and its queue offsets would be written again (read-only here: any thread)
        confirm = min(self.store.confirm_offset, self.store.flushed_offset)
        start = max(w_old, cq.min_offset)
        w_new = max(start, cq.first_offset_where(lambda e: e[0] >= limit or e[0] + e[1] > confirm, lo=start))
        res.watermark = w_new
        due = self._tombstones_due.get((topic, queue_id))
        if w_new <= w_old and not force and (due is None or due > self.clock() * 1000):
            res.skipped = True
            return res
        throttle = Throttle(self.bytes_per_s, self.busy_ratio)
        hook = step or (lambda point: None)

        def stepped(point: str) -> None:
            hook(point)

        inputs = self._inputs(old, cq, start, w_new)
        kept, due = self._choose(old, inputs, throttle, stepped)
        res.read, res.kept = len(inputs), len(kept)
        stepped("chosen")
        directory = compacted_log.log_dir(self.root, topic, queue_id)

        def records():
            for item, view in self._checked(old, kept):
                throttle.add(item[3])
                yield view

        new = compacted_log.write(directory, w_new, [(q, p, s, c) for _, q, p, s, c in kept], records(), stepped)

        def swap() -> None:
            prev = self.logs.get((topic, queue_id))
            self.logs[(topic, queue_id)] = new
            self._tombstones_due.pop((topic, queue_id), None)
            if due is not None:
                self._tombstones_due[(topic, queue_id)] = due
            if prev is not None:
                prev.close()
            stepped("installed")

        (install or (lambda fn: fn()))(swap)
        self.passes += 1
        log.info("compacted %s/%d: %d records read, %d kept, watermark %d", topic, queue_id, res.read,
                 res.kept, w_new)
        return res

    def _inputs(self, old: CompactedLog | None, cq, start: int, end: int) -> list[tuple]:
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

    def _checked(self, old: CompactedLog | None, items: list[tuple]):
        """(item, its record) for each input item in order, read with one pread per run of nearby
        records (in the old compacted log, or in one CommitLog segment), each record checked
        like a served one: PassFailed for one that is not whole and intact (nothing is replaced)."""
        cl = self.store.commit_log
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
            run = items[i:j]
            if len(buf) != end - start:
                raise PassFailed(f"queue offset {run[0][1]}: short read")
            if not from_old:   # CommitLog records: one check of the whole run
                bad = record_checks.check_run(buf, [(it[2], it[3]) for it in run], start)
                if bad:
                    raise PassFailed(f"queue offset {run[bad[0][0]][1]}: {bad[0][1]}")
            for it in run:
                rec = view[at(it) - start:at(it) - start + it[3]]
                if from_old and (bad := record_checks.check_run(rec, [(it[2], it[3])], it[2])):
                    raise PassFailed(f"queue offset {it[1]} (CommitLog {it[2]}): {bad[0][1]}")
                yield it, rec
            i = j

    def _choose(self, old: CompactedLog | None, inputs: list[tuple], throttle: Throttle,
                step) -> tuple[list[tuple], float | None]:
        """(the inputs a new log keeps: the last of each key, tombstones until their retention ends,
        records without a key; when the first tombstone kept is due to go, epoch ms or None)."""
        latest: dict[bytes, int] = {}
        dead: set[int] = set()     # tombstones past their retention
        tomb_ts: dict[int, int] = {}   # tombstones within it: their store time
        keyless: list[int] = []
        expire_before = self.clock() * 1000 - self.delete_retention_ms
        for i, (item, rec) in enumerate(self._checked(old, inputs)):
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
        return [inputs[i] for i in keep], (min(live) + self.delete_retention_ms if live else None)


    # ---- the worker thread --------------------------------------------------------------------

    def submit(self, topics: list[str] | None, post: Callable, done: Callable | None = None,
               force: bool = False) -> None:
        """Queue a pass over `topics` (None: every compacted topic) on the worker thread; results
        are installed through `post(fn)` (the main thread's call_soon_threadsafe), and
        `done(results, error)` is posted after."""
        if topics is None and self._periodic:
            return   # the last periodic pass is still queued or running
        self._periodic |= topics is None
        if self._worker is None:
            self._worker = threading.Thread(target=self._work, name="compaction", daemon=True)
            self._worker.start()
        self._jobs.put((topics, post, done, force))

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            topics, post, done, force = job
            periodic = topics is None
            results, error = [], None
            keys = sorted(k for k in list(self.store.cqs)
                          if (k[0] in topics if topics is not None else self.is_compacted(k[0])))
            if force:
                try:
                    self._flush_first()
                except OSError as exc:   # a CommitLog sync error is sticky: the pass covers what was flushed
                    log.error("compaction: flush before an asked-for pass failed: %s", exc)
            for topic, qid in keys:
                try:
                    results.append(self.compact_queue(topic, qid, force=force, install=post))
                except Exception as exc:   # the old log stays; the next pass tries again
                    self.failed += 1
                    error = f"{topic}/{qid}: {exc}"
                    log.error("compaction of %s/%d failed (nothing replaced): %s", topic, qid, exc)
            if periodic:
                self._periodic = False
            if done is not None:
                post(done, results, error)

    def _flush_first(self) -> None:
        """An asked-for pass (`quiver topic compact`) covers every segment sealed when it was asked:
        a pass covers flushed records only, and under load the flush thread lags by seconds (a pass
        then covered a prefix of the queue: tombstoned keys stayed readable, older values stayed
        below the watermark). So the CommitLog is synced here first, on this thread."""
        store = self.store
        before = store.flushed_offset
        flushed = store.flush_step()
        on_flushed = store.flusher.on_flushed   # what the flush thread tells (thread-safe)
        if on_flushed is not None and flushed > before:
            on_flushed(flushed)

    def stats(self) -> dict:
        return {"compacted_queues": len(self.logs), "compaction_passes": self.passes,
                "compaction_failures": self.failed,
                "compacted_bytes": sum(cl.data_bytes for cl in list(self.logs.values()))}


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
