"""The console's Prometheus metrics: pages served (by page and HTTP status, with their latency)
and the Admin calls the pages make (by call, and those that raised, by error class).

`ConsoleStats` is filled by waitress's HTTP worker threads (several, so one small lock; the
PING/STATUS loop never takes it) and read at scrape time from copies. `CountingAdmin` wraps
the console's one Admin so every page and action is counted in one place. Labels are Flask
endpoint names, status codes, Admin method names and exception class names: the console's
own vocabulary, never a path, topic, key or message id.
"""

import inspect
import threading

from quiver.runtime.histogram import Histogram, bump
from quiver.runtime.metrics import ServiceCollector, counter, histogram

NO_PAGE = "_none"   # a URL that matched no page (404, 405)


class ConsoleStats:
    def __init__(self):
        self._lock = threading.Lock()
        self._requests: dict[tuple[str, str], int] = {}
        self._latency: dict[str, Histogram] = {}
        self._calls: dict[str, int] = {}
        self._errors: dict[tuple[str, str], int] = {}

    def served(self, page: str | None, status: int, seconds: float) -> None:
        page = page or NO_PAGE
        with self._lock:
            bump(self._requests, (page, str(status)))
            h = self._latency.get(page)
            if h is None:
                h = self._latency[page] = Histogram()
            h.observe(seconds)

    def called(self, call: str, error: str | None = None) -> None:
        with self._lock:
            bump(self._calls, call)
            if error is not None:
                bump(self._errors, (call, error))

    def copy(self) -> dict:
        """requests, latency (copied histograms), calls, errors: a consistent view for one scrape."""
        with self._lock:
            latency = {}
            for page, h in self._latency.items():
                latency[page] = Histogram(h.bounds).merged(h)
            return {"requests": dict(self._requests), "latency": latency,
                    "calls": dict(self._calls), "errors": dict(self._errors)}


class CountingAdmin:
    """The console's Admin with each method call counted in `stats`; attributes pass through."""

    def __init__(self, admin, stats: ConsoleStats):
        self._admin, self._stats = admin, stats

    def __getattr__(self, name):
        attr = getattr(self._admin, name)
        if name.startswith("_") or not inspect.ismethod(attr):   # a class passes as it is
            return attr
        stats = self._stats

        def counted(*args, **kw):
            try:
                result = attr(*args, **kw)
            except Exception as exc:
                stats.called(name, type(exc).__name__)
                raise
            stats.called(name)
            return result
        return counted


class ConsoleMetrics(ServiceCollector):
    def __init__(self, service, stats: ConsoleStats):
        super().__init__(service)
        self.stats = stats

    def sections(self) -> list:
        return [self._pages]

    def _pages(self):
        got = self.stats.copy()
        yield counter("quiver_console_http_requests_total", "HTTP requests answered, by page (Flask endpoint) "
                      "and status", ("page", "status"), sorted(got["requests"].items()))
        yield histogram("quiver_console_http_latency_seconds", "request received -> response built, by page",
                        ("page",), sorted(got["latency"].items()))
        yield counter("quiver_console_admin_calls_total", "Admin calls the pages and actions made, by method",
                      ("call",), sorted(got["calls"].items()))
        yield counter("quiver_console_admin_errors_total", "Admin calls that raised, by method and error class",
                      ("call", "error"), sorted(got["errors"].items()))


def collector(app) -> ConsoleMetrics:
    """What `python -m quiver_console --metrics-listen` serves."""
    return ConsoleMetrics(app.service, app.stats)
