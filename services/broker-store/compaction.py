"""Compaction of compacted topics: keep the latest record of every key, per queue.

Owns when a pass runs (a worker thread: periodic passes and `quiver topic compact`), the
range it covers, installing its result, and the hold it puts on CommitLog retention. Does
not own which records a pass keeps (compaction_pass.py), running one in a child process
(compaction_child.py), the file format (compacted_log.py) nor which topics are compacted
(the topic table's sysflag; `is_compacted` is given by the app).

A pass over one queue reads its compacted log (everything below the old watermark) and the
queue's ConsumeQueue entries from there up to the first entry in the active CommitLog
segment (never the active range, nor anything not yet visible to consumers or not flushed).
The worker runs it in a child process (it would share the GIL with the service thread);
`compact_queue` called directly runs it on the calling thread. The result, a new compacted
log (atomic replacement), is installed on the main thread.

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
from quiver.wire import names

from . import compacted_log, compaction_child, compaction_pass
from .compacted_log import CompactedLog
from .compaction_pass import PassFailed, Throttle   # noqa: F401 (the module's API: tests use them)

if TYPE_CHECKING:
    from .store import MessageStore

log = logging.getLogger(__name__)

BUSY_RATIO = 0.25     # a pass on a thread works at most this share of the time (Throttle)
INSTALL_WAIT_S = 60   # the worker waits this long for the service thread to install a pass


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
        self.in_child = True   # the worker's passes run in a child process (compaction_child)
        self._child = None     # the last one started (close stops it)
        self.child_nice = compaction_child.NICE
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
        child = self._child
        if child is not None and child.poll() is None:   # its pass is not installed now: the old log stays
            child.kill()
            child.wait()
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
                      install: Callable[[Callable[[], None]], None] | None = None,
                      child: bool = False) -> PassResult:
        """One pass over one queue; the new log is installed through `install(fn)` (default: now,
        on this thread; the worker hands it to the main thread). `step(point)` runs at each stage
        (on this thread only); `child`: the pass runs in a child process (compaction_child)."""
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
        hook = step or (lambda point: None)
        directory = compacted_log.log_dir(self.root, topic, queue_id)
        now_ms = self.clock() * 1000
        if child:
            spec, fds = compaction_child.spec_of(cl, cq, old, start, w_new, directory, now_ms,
                                                 self.delete_retention_ms, self.bytes_per_s, self.child_nice)
            res.read, res.kept, due = compaction_child.run(spec, fds, started=self._started)
            new = compacted_log.load(directory)
            if new is None or new.watermark != w_new:
                if new is not None:
                    new.close()
                raise PassFailed(f"{directory}: the compaction process left no log at watermark {w_new}")
        else:
            res.read, res.kept, due, new = compaction_pass.run(
                cl, cq, old, start, w_new, directory, now_ms, self.delete_retention_ms,
                Throttle(self.bytes_per_s, self.busy_ratio), hook)
        installed = threading.Event()

        def swap() -> None:
            prev = self.logs.get((topic, queue_id))
            self.logs[(topic, queue_id)] = new
            self._tombstones_due.pop((topic, queue_id), None)
            if due is not None:
                self._tombstones_due[(topic, queue_id)] = due
            if prev is not None:
                prev.close()
            installed.set()
            hook("installed")

        (install or (lambda fn: fn()))(swap)
        # the next pass of this queue reads the log installed now, not the one swap closes
        installed.wait(INSTALL_WAIT_S)
        self.passes += 1
        log.info("compacted %s/%d: %d records read, %d kept, watermark %d%s", topic, queue_id, res.read,
                 res.kept, w_new, " (in a child process)" if child else "")
        return res

    def _started(self, proc) -> None:
        self._child = proc

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
                    results.append(self.compact_queue(topic, qid, force=force, install=post, child=self.in_child))
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

