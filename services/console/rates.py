"""Rates from successive samples of a growing count (messages stored, offsets consumed).

A page load samples the counts; the rate is the difference to the previous sample of the
same key divided by the time between them (monotonic clock). Nothing runs in the
background, so the first load of a page shows no rate, and a rate covers the time since
the last load. Owns the samples (bounded), not where the counts come from."""

import threading
import time

MIN_INTERVAL_S = 0.5     # closer samples say more about jitter than about a rate
MAX_KEYS = 10_000        # topics x groups the console remembers; the oldest go first


class Rates:
    def __init__(self, clock=time.monotonic):
        self._clock = clock
        self._last: dict = {}
        self._lock = threading.Lock()   # pages run on several HTTP threads

    def sample(self, key, value: int) -> float | None:
        """Per-second rate of `value` since the previous sample of `key` (None: no earlier sample,
        too recent, or the count went back, e.g. a reset offset)."""
        now = self._clock()
        with self._lock:
            prev = self._last.get(key)
            if prev is not None and now - prev[0] < MIN_INTERVAL_S:
                return None   # the older sample stays: the next load measures over a longer span
            self._last.pop(key, None)
            self._last[key] = (now, value)
            while len(self._last) > MAX_KEYS:
                self._last.pop(next(iter(self._last)))
        if prev is None or value < prev[1]:
            return None
        return (value - prev[1]) / (now - prev[0])
