"""Fixed-bucket histograms and bounded counter maps, filled on a service's own thread.

Owns the counting only: what a metric is called and how it is served is
quiver.runtime.metrics. No locks: one thread writes, a scrape on another thread
reads copies (`snapshot`), so a scrape may see a count one event ahead of its
sum; Prometheus tolerates that, a lock on every put would not be free.
"""

import bisect

# seconds: request latency (a held pull counts its wait) and fsync time
LATENCY_BOUNDS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# seconds: how late a scheduled message was delivered after its due time
LATENESS_BOUNDS_S = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)

MAX_SERIES = 5000   # label sets per map: peers choose topic and group names
OTHER = "_other"    # where events past MAX_SERIES label sets are counted


class Histogram:
    """Counts per bucket upper bound (the last count: above every bound) and their sum."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds=LATENCY_BOUNDS_S):
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    def merged(self, other: "Histogram") -> "Histogram":
        """A new histogram holding both (same bounds)."""
        out = Histogram(self.bounds)
        out.counts = [a + b for a, b in zip(self.counts, other.counts)]
        out.sum = self.sum + other.sum
        return out

    def buckets(self) -> list[tuple[str, int]]:
        """Cumulative (upper bound, count) pairs ending with +Inf, as Prometheus wants them."""
        counts, out, total = list(self.counts), [], 0
        for bound, n in zip(self.bounds, counts):
            total += n
            out.append((repr(float(bound)), total))
        out.append(("+Inf", total + counts[-1]))
        return out


def bump(counts: dict, key, n: int = 1) -> None:
    """counts[key] += n, with at most MAX_SERIES keys (the rest under OTHER, or (OTHER, ...))."""
    if key not in counts and len(counts) >= MAX_SERIES:
        key = (OTHER,) * len(key) if isinstance(key, tuple) else OTHER
    counts[key] = counts.get(key, 0) + n


def snapshot(mapping: dict) -> dict:
    """A copy of a dict another thread may be resizing (a copy that raced a resize is retried)."""
    for _ in range(10):
        try:
            return dict(mapping)
        except RuntimeError:
            continue
    return {}


class RequestStats:
    """Per request code, reply latency; per response code, replies other than SUCCESS.
    Filled by quiver.runtime.service on every reply; keys are codes this server knows."""

    __slots__ = ("latency", "errors", "_known", "_clock")

    def __init__(self, known_codes, clock):
        self.latency: dict[int, Histogram] = {}
        self.errors: dict[int, int] = {}
        self._known = frozenset(int(c) for c in known_codes)  # a peer's unknown code is no new series
        self._clock = clock

    def replied(self, request_code: int, response_code: int, received: float) -> None:
        if request_code in self._known:
            h = self.latency.get(request_code)
            if h is None:
                h = self.latency[request_code] = Histogram()
            h.observe(self._clock() - received)
        if response_code:
            self.errors[response_code] = self.errors.get(response_code, 0) + 1
