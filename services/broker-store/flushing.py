"""The store's flush threads: CommitLog fsyncs on one, ConsumeQueue/index syncs and the checkpoint on another.

Owns when things are synced and the locks that make a sync safe; the files are
their modules'. The threads share only file descriptors with the main thread.
`store-flush` syncs the CommitLog (with SYNC flush when a put asks, and reports
the flushed offset, `on_flushed`); `store-logic-flush` syncs the ConsumeQueues,
the index and writes the checkpoint every logic_flush_interval_ms. Each holds its
own lock while it syncs, so a SYNC flush never waits behind a queue sync or the
checkpoint's rename and directory fsync; anything that closes a descriptor or
cuts a file (retention, delete_topic, a rollback, close) takes `lock`, which is
both (the CommitLog's first), and so waits for either sync in progress.
"""

import collections
import logging
import threading
import time
from typing import Callable

from quiver.runtime.histogram import Histogram

from .checkpoint import Checkpoint, CheckpointFile
from .commit_log import CommitLog
from .consume_queue import ConsumeQueue
from .disk_space import DiskSpace
from .index_file import IndexService

log = logging.getLogger(__name__)


class Both:
    """Two locks taken as one (`with both:`), the first first, released in reverse order."""

    __slots__ = ("first", "second")

    def __init__(self, first: threading.Lock, second: threading.Lock):
        self.first, self.second = first, second

    def __enter__(self) -> "Both":
        self.first.acquire()
        self.second.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.second.release()
        self.first.release()


class Flusher:
    def __init__(self, commit_log: CommitLog, index: IndexService, queues: Callable[[], list[ConsumeQueue]],
                 dispatched: Callable[[], int], disk: DiskSpace, counts: collections.Counter, *,
                 flush_sync: bool, interval_ms: int, logic_interval_ms: int,
                 on_flushed: Callable[[int], None] | None):
        """`queues`: the store's ConsumeQueues now; `dispatched`: the CommitLog end whose queue and
        index entries are written (what the checkpoint may call dispatched)."""
        self.commit_log = commit_log
        self.index = index
        self.queues = queues
        self.dispatched = dispatched
        self.disk = disk
        self.counts = counts
        self.flush_sync = flush_sync
        self.interval_s = interval_ms / 1000
        self.logic_interval_s = logic_interval_ms / 1000
        self.on_flushed = on_flushed
        self.log_lock = threading.Lock()     # held by a CommitLog sync
        self.logic_lock = threading.Lock()   # held by a ConsumeQueue/index/checkpoint pass
        self.lock = Both(self.log_lock, self.logic_lock)   # closing or cutting files: neither pass runs
        self.flush_seconds = Histogram()  # CommitLog fsync time, on the flush thread: /metrics
        self._cp_file: CheckpointFile | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._last_logic_flush = 0.0
        self._logic_error = ""  # the last ConsumeQueue/index/checkpoint sync error, "" once one succeeds

    @property
    def is_open(self) -> bool:
        return self._cp_file is not None

    def start(self, ckpt_path: str) -> None:
        """Open the checkpoint, write it after a forced pass, and start the threads."""
        self._cp_file = CheckpointFile(ckpt_path)
        self.step(force=True)
        self._stop.clear()
        self._threads = [threading.Thread(target=self._loop, name="store-flush", daemon=True),
                         threading.Thread(target=self._logic_loop, name="store-logic-flush", daemon=True)]
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        """End the threads (no pass after this returns); the checkpoint file stays open."""
        if self._threads:
            self._stop.set()
            self._wake.set()
            for t in self._threads:
                t.join()
            self._threads = []

    def close_checkpoint(self) -> None:
        """The caller holds `lock`."""
        self._cp_file.close()
        self._cp_file = None

    def request(self) -> None:
        if not self._wake.is_set():  # set() takes the Event's lock; once per flush pass is enough
            self._wake.set()

    def step(self, force: bool = False) -> int:
        """One flush pass: CommitLog always; ConsumeQueues, index and checkpoint every
        logic_flush_interval_ms (or when forced). Returns the flushed CommitLog offset.

        A CommitLog sync error is raised (the flush loop then refuses writes until a
        restart, CommitLog.flush says why); a ConsumeQueue/index/checkpoint error is
        logged and the old checkpoint kept — it is still true, only older — and tried
        next pass."""
        flushed = self._flush_commit_log()
        self._flush_logic_if_due(force)
        return flushed

    def _flush_commit_log(self) -> int:
        with self.log_lock:
            return self._sync_commit_log()

    def _sync_commit_log(self) -> int:
        """fdatasync the CommitLog (the caller holds `log_lock`); its flush latency observed."""
        before, began = self.commit_log.flushed, time.monotonic()
        flushed = self.commit_log.flush()
        if flushed > before:  # a pass with nothing new to sync is no flush latency
            self.flush_seconds.observe(time.monotonic() - began)
        return flushed

    def _flush_logic_if_due(self, force: bool) -> bool:
        """True if a pass ran (it may have failed: logged, and the old checkpoint kept)."""
        now = time.monotonic()
        if not (force or now - self._last_logic_flush >= self.logic_interval_s):
            return False
        with self.logic_lock:
            if self._cp_file is None:
                return False
            self._last_logic_flush = now
            # a cut (under both locks) cannot come between reading these and the checkpoint naming them
            self._flush_logic(self.commit_log.flushed, self.dispatched())
        return True

    def _flush_logic(self, flushed: int, dispatched: int) -> None:
        try:
            for cq in self.queues():
                cq.flush()
            self.index.flush()
            ts = int(time.time() * 1000)
            self._cp_file.write(Checkpoint(ts, ts, ts, flushed, min(dispatched, flushed)))
        except OSError as exc:
            self.counts["checkpoint_errors"] += 1
            if not self._logic_error:
                log.error("ConsumeQueue/index sync or checkpoint failed, old checkpoint kept: %s", exc)
            self._logic_error = str(exc)
            return
        if self._logic_error:
            log.warning("checkpoint written again (last error: %s)", self._logic_error)
            self._logic_error = ""

    def _loop(self) -> None:
        while not self._stop.is_set():
            if self.flush_sync:
                woke = self._wake.wait(self.interval_s)
                self._wake.clear()
            else:
                woke = False
                self._stop.wait(self.interval_s)
            if self._stop.is_set():
                break
            try:
                before = self.commit_log.flushed
                flushed = self._flush_commit_log()
                if self.on_flushed is not None and (woke or flushed > before):
                    self.on_flushed(flushed)
            except OSError as exc:  # nothing newer is acknowledged, nothing more is taken
                self.counts["flush_errors"] += 1
                self.disk.failed_for_good("a CommitLog fsync", exc)
            except Exception:  # the loop must outlive a bad pass; it is logged
                log.exception("flush pass failed")

    def _logic_loop(self) -> None:
        """ConsumeQueue/index syncs and the checkpoint every logic interval (`step` may run one
        meanwhile: the interval counts from the last)."""
        while not self._stop.wait(max(0.0, self._last_logic_flush + self.logic_interval_s - time.monotonic())):
            try:
                ran = self._flush_logic_if_due(False)
            except Exception:  # the loop must outlive a bad pass; it is logged
                log.exception("ConsumeQueue/index flush pass failed")
                ran = False
            if not ran:   # closed, or failed before it began: not again at once
                self._stop.wait(self.logic_interval_s)
