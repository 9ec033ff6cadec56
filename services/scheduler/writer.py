"""The timer index's writer thread: writes leave the service thread and commit in groups.

The service thread only queues a write: `submit(work, then)`, where `work(conn)`
runs on this thread inside a transaction and `then(result)` is handed back to
the service thread (through `deliver`, Service.call_soon_threadsafe). The thread
takes everything queued (up to `max_batch` items), runs it as one transaction
and commits; only then does it hand over the `then`s of that batch, in the
order they were queued. So whatever a write promises, and is triggered by its
`then` (the ingested offset committed on the broker, a cancel answered
"cancelled", the delivered watermark), never goes out before the write is
durable: with SQLite in WAL mode a committed transaction survives kill -9 of
the process.

A batch whose transaction fails is run again item by item, each in a
transaction of its own: a bad item fails alone, its `then` gets the exception
(logged here too), and the loop goes on with the next items.

`sync()` blocks a thread other than the service thread until what was queued
before it is committed (the control thread, before it reads a broker's progress).
"""

import logging
import queue
import threading

log = logging.getLogger(__name__)

_STOP = object()


class Writer:
    def __init__(self, engine, deliver, max_batch: int = 256):
        self.engine = engine
        self.deliver = deliver
        self.max_batch = max_batch
        self.batches = 0   # transactions committed (group commits)
        self.failed = 0    # items whose write failed
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name="scheduler-writer", daemon=True)
        self._thread.start()

    def submit(self, work, then=None) -> None:
        """Queue `work(conn)`; `then(result or exception)` runs through `deliver` once it is committed."""
        self._q.put((work, then))

    def sync(self, timeout: float = 30.0) -> bool:
        """Wait (off the service thread) until the writes queued so far are committed."""
        done = threading.Event()
        self._q.put((None, done.set))
        return done.wait(timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Commit what is queued, then stop the thread."""
        self._q.put(_STOP)
        self._thread.join(timeout)

    # ---- the writer thread ------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            batch, stop = [self._q.get()], False
            while len(batch) < self.max_batch:
                try:
                    batch.append(self._q.get_nowait())
                except queue.Empty:
                    break
            if _STOP in batch:
                stop = True
                batch = [i for i in batch if i is not _STOP]
            try:
                self._write(batch)
            except Exception:   # never ends the loop (each item's failure is handled in _write)
                log.exception("timer index writer")
            if stop:
                return

    def _write(self, batch: list) -> None:
        works = [(w, t) for w, t in batch if w is not None]
        results = []
        if works:
            try:
                with self.engine.begin() as conn:
                    results = [w(conn) for w, _ in works]
                self.batches += 1
            except Exception:
                results = [self._alone(w) for w, _ in works]
        out = iter(results)
        for w, then in batch:
            result = next(out) if w is not None else None
            if then is None:
                continue
            try:
                if w is None:
                    then()   # a sync marker: set from here, its waiter is not the service thread
                else:
                    self.deliver(then, result)
            except Exception:   # one hand-back lost, not the rest of the batch's
                log.exception("timer index writer: handing back a result")

    def _alone(self, work):
        try:
            with self.engine.begin() as conn:
                result = work(conn)
            self.batches += 1
            return result
        except Exception as exc:
            self.failed += 1
            log.error("timer index write failed: %s: %s", type(exc).__name__, exc)
            return exc
