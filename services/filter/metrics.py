"""The filter server's Prometheus metrics: messages scanned and matched by SQL92 selectors,
filtered pulls answered, selector cache hits.

All read at scrape time from counters the pull path keeps (filtered_pull.py
counts into the Service's counters) and the selector cache's two integers.
"""

from quiver.runtime.histogram import snapshot
from quiver.runtime.metrics import ServiceCollector, counter, gauge


class FilterMetrics(ServiceCollector):
    claimed_events = frozenset({"broker_pull_failed", "parse_failed"})   # named families below, not loops

    def __init__(self, service, selectors, attached):
        super().__init__(service)
        self.selectors = selectors   # selectors.SelectorCache
        self.attached = attached     # () -> whether registered with a broker

    def sections(self) -> list:
        return [self._filtering]

    def _filtering(self):
        c = snapshot(self.service.counters)
        for name, doc, key in (
                ("quiver_filter_scanned_messages_total", "messages read from brokers and evaluated", "scanned"),
                ("quiver_filter_matched_messages_total", "messages a selector matched", "matched"),
                ("quiver_filter_pulls_total", "filtered pulls received", "pulls"),
                ("quiver_filter_broker_pull_errors_total", "pulls from a broker that failed", "broker_pull_failed"),
                ("quiver_filter_parse_errors_total", "selectors that did not parse", "parse_failed")):
            yield counter(name, doc, rows=[((), c.get(key, 0))])
        yield counter("quiver_filter_replies_total", "filtered pulls answered, by whether anything matched",
                      ("found",), [(("true",), c.get("replies_found", 0)), (("false",), c.get("replies_not_found", 0))])
        sel = self.selectors
        yield counter("quiver_filter_selector_cache_hits_total", "compiled selectors reused", rows=[((), sel.hits)])
        yield counter("quiver_filter_selector_cache_misses_total", "selectors compiled", rows=[((), sel.misses)])
        yield gauge("quiver_filter_selectors", "compiled selectors cached", rows=[((), len(sel))])
        yield gauge("quiver_filter_registered", "1 when registered with a broker", rows=[((), int(self.attached()))])


def collector(app) -> FilterMetrics:
    """What `python -m quiver_filter --metrics-listen` serves."""
    return FilterMetrics(app.service, app.selectors, lambda: app.registered_at is not None)
