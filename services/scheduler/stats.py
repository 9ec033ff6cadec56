"""Delivery counters and the due -> delivery lag distribution (no I/O)."""

import collections

from quiver.runtime.histogram import LATENESS_BOUNDS_S, Histogram


class DeliveryStats:
    # caps: ~3.6 MB of lag samples and ~9 MB of ids at most (a cancel older than the ids: "unknown")
    def __init__(self, keep: int = 100_000, remember_ids: int = 50_000):
        self.lags = collections.deque(maxlen=keep)
        self.count = 0
        self.early = 0
        self.cancelled_skipped = 0
        self.recent: collections.OrderedDict = collections.OrderedDict()   # delivered msg ids (cancel: too late)
        self.remember_ids = remember_ids
        self.lateness = Histogram(LATENESS_BOUNDS_S)   # seconds past due (early: 0): /metrics

    def delivered(self, store_ts: int, dues, ids) -> None:
        lags = self.lags
        for due in dues:
            lag = store_ts - due
            if lag < 0:
                self.early += 1
            lags.append(lag)
            self.lateness.observe(max(0, lag) / 1000)
        self.count += len(dues)
        recent = self.recent
        for mid in ids:
            recent[mid] = None
        while len(recent) > self.remember_ids:
            recent.popitem(last=False)

    def lag_summary(self) -> dict:
        data = sorted(self.lags)
        if not data:
            return {"n": 0}
        pick = lambda p: data[min(len(data) - 1, int(p * len(data)))]
        return {"n": len(data), "p50": pick(0.50), "p99": pick(0.99), "max": data[-1], "min": data[0]}
