"""Periodic loops that no single bad item can stop.

`Loop(name, interval_s, step)` runs `step()` every interval on its own daemon
thread (SDK clients): `wake()` runs it early, `stop()` ends it, `run_once()`
is the step a test calls directly. Services run their loops on the service
thread with `Service.every(name, interval_s, step)` instead. Either way a
failing step is counted and logged, and the loop goes on.

Inside a step, `Failures.each(name, items, fn)` runs `fn` per item (a broker,
a group, a message), so one bad item is skipped, counted (`<name>_failed` in
STATUS) and logged once per distinct error, and the rest go on. Does not own
what a step does, nor APScheduler jobs (whose functions use `each` the same way).
"""

import collections
import logging
import threading

from quiver.errors import QuiverError

log = logging.getLogger(__name__)

_MAX_REMEMBERED = 1024


class Failures:
    """Counts failures per loop (into a STATUS counter map) and logs each distinct one once."""

    def __init__(self, counters: collections.Counter | None = None):
        self.counters = counters if counters is not None else collections.Counter()
        self._logged: set = set()
        self._lock = threading.Lock()

    def record(self, name: str, exc: BaseException, item=None) -> None:
        self.counters[f"{name}_failed"] += 1
        key = (name, type(exc).__name__, str(exc)[:200])
        with self._lock:
            first = key not in self._logged
            if first:
                if len(self._logged) >= _MAX_REMEMBERED:
                    self._logged.clear()
                self._logged.add(key)
        what = f"{name} ({item!r:.80})" if item is not None else name
        if first:
            # a QuiverError says what is wrong; anything else is a bug worth its traceback
            log.warning("%s failed: %s", what, exc, exc_info=not isinstance(exc, QuiverError))
        else:
            log.debug("%s failed again: %s", what, exc)

    def each(self, name: str, items, fn) -> int:
        """fn(item) for every item; a failing item is recorded and skipped. Returns how many succeeded."""
        ok = 0
        for item in items:
            try:
                fn(item)
                ok += 1
            except Exception as exc:
                self.record(name, exc, item)
        return ok

    def guard(self, name: str, fn, *args) -> bool:
        """fn(*args), recording a failure instead of raising. True if it succeeded."""
        try:
            fn(*args)
            return True
        except Exception as exc:
            self.record(name, exc)
            return False


class Loop:
    """`step()` every `interval_s` on a daemon thread, until `stop()`."""

    def __init__(self, name: str, interval_s: float, step, failures: Failures | None = None,
                 first_delay_s: float | None = None):
        self.name = name
        self.interval_s = interval_s
        self.step = step
        self.failures = failures if failures is not None else Failures()
        self.first_delay_s = interval_s if first_delay_s is None else first_delay_s
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "Loop":
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()
        return self

    def wake(self) -> None:
        """Run the step now instead of at the end of the interval."""
        self._wake.set()

    def stop(self, join_s: float | None = None) -> None:
        self._stop.set()
        self._wake.set()
        thread = self._thread
        if join_s and thread is not None and thread is not threading.current_thread():
            thread.join(join_s)

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def run_once(self) -> bool:
        return self.failures.guard(self.name, self.step)

    def _run(self) -> None:
        delay = self.first_delay_s
        while not self._stop.is_set():
            self._wake.wait(delay)
            self._wake.clear()
            if self._stop.is_set():
                return
            self.run_once()
            delay = self.interval_s
