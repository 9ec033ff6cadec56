"""Periodic loops that no single bad item can stop.

Services run their loops on the service thread with `Service.every(name,
interval_s, step)`: a failing step is counted and logged, and the loop goes on.

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

