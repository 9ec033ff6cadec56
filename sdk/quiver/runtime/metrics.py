"""A service's Prometheus endpoint: `GET /metrics` on --metrics-listen, and the metrics every
service shares (requests, errors by response code, latency by request code, its counters).

Each service's metrics.py subclasses ServiceCollector with its own sections. A
scrape runs on the metrics server's one thread (metrics_http) and only reads what the service
thread already keeps (the Service's counters and RequestStats, the app's own
state), copying dicts first (quiver.runtime.histogram.snapshot): it never calls
into the service loop nor takes a lock that loop takes. A section that fails
is logged and left out of that scrape; the others are served.
"""

import logging
import time

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from quiver import __version__
from quiver.wire.codes import RequestCode, ResponseCode

from .histogram import snapshot
from .metrics_http import BoundedHttpServer

log = logging.getLogger(__name__)


def parse_listen(text: str) -> tuple[str, int]:
    """'HOST:PORT' (host may be '[::1]' or empty: every interface) -> (host, port); ValueError if not."""
    host, sep, port = str(text).strip().rpartition(":")
    if not sep or not (port.isascii() and port.isdigit()) or int(port) > 65535 or len(host) > 255:
        raise ValueError(f"metrics listen address {text!r} is not HOST:PORT")
    return host.strip("[]") or "0.0.0.0", int(port)


# ---- families from rows ------------------------------------------------------------------

def _labels(key) -> list[str]:
    return [str(k) for k in (key if isinstance(key, tuple) else (key,))]


def counter(name: str, doc: str, labels=(), rows=()) -> CounterMetricFamily:
    """`rows`: (label values, value) pairs; no labels: ((), value)."""
    fam = CounterMetricFamily(name, doc, labels=list(labels))
    for key, value in rows:
        fam.add_metric(_labels(key), value)
    return fam


def gauge(name: str, doc: str, labels=(), rows=()) -> GaugeMetricFamily:
    fam = GaugeMetricFamily(name, doc, labels=list(labels))
    for key, value in rows:
        fam.add_metric(_labels(key), value)
    return fam


def histogram(name: str, doc: str, labels=(), rows=()) -> HistogramMetricFamily:
    """`rows`: (label values, quiver.runtime.histogram.Histogram) pairs."""
    fam = HistogramMetricFamily(name, doc, labels=list(labels))
    for key, h in rows:
        buckets = h.buckets()
        fam.add_metric(_labels(key), buckets, h.sum)
    return fam


def code_name(enum, code: int) -> str:
    try:
        return enum(code).name
    except ValueError:
        return str(code)


# ---- the collector every service extends ---------------------------------------------------

# the Service loop's own STATUS counters: (family, help, counter key)
SERVICE_EVENTS = (
    ("quiver_frames_dropped_total", "frames too short to hold a request", "dropped_frames"),
    ("quiver_frames_malformed_total", "requests whose envelope did not decode (version, framing)", "malformed_frames"),
    ("quiver_requests_unsupported_total", "requests with a code this service does not serve", "unsupported"),
    ("quiver_requests_denied_total", "requests the ACL refused", "denied"),
    ("quiver_requests_invalid_total", "requests refused by their schema (a field missing, mistyped or out of "
     "range)", "bad_requests"),
    ("quiver_peer_replies_total", "replies received to requests this service sent", "replies_in"),
    ("quiver_reply_send_failures_total", "replies that could not be written to the socket", "send_failed"),
)


def named_counters(table, counts: dict):
    """One unlabelled counter per (name, help, key) row of `table`, valued counts[key]."""
    for name, doc, key in table:
        yield counter(name, doc, rows=[((), counts.get(key, 0))])


class ServiceCollector(Collector):
    """The families of quiver.runtime.service.Service, then `sections()` of the subclass.
    `claimed_events`: STATUS counter keys ending in _failed that the subclass exports by name
    (the rest are loop failures)."""

    claimed_events: frozenset = frozenset()

    def __init__(self, service):
        self.service = service
        self.failed_sections = 0

    def sections(self) -> list:
        """Callables yielding metric families (the service's own)."""
        return []

    def collect(self):
        for section in [self._service_section, *self.sections()]:
            try:
                families = list(section())
            except Exception:  # a scrape must not die on one part's state
                self.failed_sections += 1
                log.exception("metrics section %s failed", getattr(section, "__name__", section))
                continue
            yield from families

    def _service_section(self):
        svc = self.service
        stats = svc.request_stats
        yield gauge("quiver_service_info", "1, labelled with the service and its listen address",
                    ("service", "listen"), [((svc.name, svc.listen), 1)])
        yield gauge("quiver_build_info", "1, labelled with the release this service runs", ("version",),
                    [((__version__,), 1)])
        yield gauge("quiver_service_uptime_seconds", "seconds since the service started",
                    rows=[((), round(time.time() - svc.started_at, 3))])
        counts = snapshot(svc.counters)
        yield counter("quiver_requests_total", "requests handled (known request codes)",
                      rows=[((), counts.get("requests", 0))])
        yield from named_counters(SERVICE_EVENTS, counts)
        claimed = self.claimed_events | {key for _, _, key in SERVICE_EVENTS}
        yield counter("quiver_loop_failures_total", "failed steps of the service's periodic loops (and of "
                      "items inside one), by loop", ("loop",),
                      sorted((k[:-len("_failed")], n) for k, n in counts.items()
                             if k.endswith("_failed") and k not in claimed))
        yield counter("quiver_service_events_total", "deprecated, removed in the next release: the STATUS "
                      "counters by name (each now has a named family)", ("event",), sorted(counts.items()))
        yield counter("quiver_request_errors_total", "replies with a response code other than SUCCESS",
                      ("response_code",),
                      sorted((code_name(ResponseCode, c), n) for c, n in snapshot(stats.errors).items()))
        yield histogram("quiver_rpc_latency_seconds", "request received -> reply sent (a held pull counts "
                        "its wait)", ("request_code",),
                        sorted((code_name(RequestCode, c), h) for c, h in snapshot(stats.latency).items()))


# ---- the endpoint ---------------------------------------------------------------------------

class MetricsServer:
    """`collector` plus the process, platform and GC collectors, from a registry of its own (no
    global one), served by one bounded thread (metrics_http: connection cap, 5 s per connection)."""

    def __init__(self, listen: str, collector: Collector):
        self.host, self.port = parse_listen(listen)
        self.registry = CollectorRegistry()
        for extra in (ProcessCollector, PlatformCollector, GCCollector):
            extra(registry=self.registry)
        self.registry.register(collector)
        self._server = None

    def start(self) -> str:
        """Bind and serve; returns the bound HOST:PORT (port 0 picks a free one)."""
        self._server = BoundedHttpServer(self.host, self.port, self.registry)
        self._server.start()
        host, port = self._server.server_address[:2]
        return f"{host}:{port}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None
