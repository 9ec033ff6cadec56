"""Client-side Prometheus metrics, opt-in: a Producer or PushConsumer given `metrics=ClientMetrics(...)`
records into the application's own prometheus_client registry; without it nothing is recorded
(one attribute test per call) and prometheus_client is not imported.

    from prometheus_client import CollectorRegistry, start_http_server
    from quiver import Producer
    from quiver.client.metrics import ClientMetrics

    registry = CollectorRegistry()
    metrics = ClientMetrics(registry)
    p = Producer("shop", namesrv="127.0.0.1:9876", metrics=metrics)
    start_http_server(8000, registry=registry)   # the application's own endpoint

Owns the families and what a send or a listener call adds to them; not when they are called
(producer.py, consume_service.py). Labels are topics and groups the application names, result
names and exception class names: never message ids or keys.
"""

import time
from concurrent.futures import Future
from typing import Any, Callable, TypeVar

T = TypeVar("T")

# seconds: a send's round trip (retries included) and a listener call
LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class ClientMetrics:
    """Families registered in `registry` (a prometheus_client CollectorRegistry; None: the
    default REGISTRY). One ClientMetrics serves any number of clients of one registry."""

    def __init__(self, registry: Any = None) -> None:
        from prometheus_client import REGISTRY, Counter, Histogram
        reg = REGISTRY if registry is None else registry
        self.registry = reg
        self.sends = Counter("quiver_client_send_messages", "messages sent, by topic and result (send_ok, "
                             "flush_disk_timeout, flush_slave_timeout, slave_not_available, or failed: raised)",
                             ("topic", "result"), registry=reg)
        self.send_errors = Counter("quiver_client_send_errors", "send calls that raised, by topic and error class",
                                   ("topic", "error"), registry=reg)
        self.send_latency = Histogram("quiver_client_send_latency_seconds", "a send call: request -> answer, "
                                      "retries included (async: until its future completes)", ("topic",),
                                      buckets=LATENCY_BUCKETS_S, registry=reg)
        self.consumed = Counter("quiver_client_consume_messages", "messages given to a listener, by group, topic "
                                "and result (consumed, or failed: raised or asked to reconsume later)",
                                ("consumer_group", "topic", "result"), registry=reg)
        self.consume_latency = Histogram("quiver_client_consume_latency_seconds", "one listener call",
                                         ("consumer_group",), buckets=LATENCY_BUCKETS_S, registry=reg)

    # ---- sends -----------------------------------------------------------------------------

    def timed_send(self, topic: str, count: int, fn: Callable[[], T]) -> T:
        """fn() (a send returning a SendResult or a list of them), recorded; its error re-raised."""
        t0 = time.monotonic()
        try:
            out = fn()
        except Exception as exc:
            self.send_failed(topic, count, t0, exc)
            raise
        self.send_done(topic, out, t0)
        return out

    def watch_send(self, topic: str, count: int, fut: Future) -> None:
        """Record an async send when `fut` completes (on the thread that completes it)."""
        t0 = time.monotonic()

        def done(f: Future) -> None:
            exc = f.exception()
            if exc is not None:
                self.send_failed(topic, count, t0, exc)
            else:
                self.send_done(topic, f.result(), t0)
        fut.add_done_callback(done)

    def send_done(self, topic: str, out: Any, t0: float) -> None:
        self.send_latency.labels(topic).observe(time.monotonic() - t0)
        for r in out if isinstance(out, list) else (out,):
            status = getattr(r, "status", None)
            self.sends.labels(topic, status.name.lower() if status is not None else "send_ok").inc()

    def send_failed(self, topic: str, count: int, t0: float, exc: BaseException) -> None:
        self.send_latency.labels(topic).observe(time.monotonic() - t0)
        self.sends.labels(topic, "failed").inc(count)
        self.send_errors.labels(topic, type(exc).__name__).inc()

    # ---- listener calls --------------------------------------------------------------------

    def listened(self, group: str, msgs: list, ok: bool, seconds: float) -> None:
        """A listener call over `msgs` took `seconds`; ok: consumed, else failed."""
        self.consume_latency.labels(group).observe(seconds)
        result = "consumed" if ok else "failed"
        topics: dict[str, int] = {}
        for m in msgs:
            topics[m.topic] = topics.get(m.topic, 0) + 1
        for topic, n in topics.items():
            self.consumed.labels(group, topic, result).inc(n)
