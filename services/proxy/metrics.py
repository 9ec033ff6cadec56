"""The proxy's Prometheus metrics: v2 RPCs by answer code, connected clients, forwarded checks,
PushConsumer deliveries being renewed.

Read at scrape time from the servicer's counter (one row per RPC and Status code) and the
Clients table; nothing is kept for metrics alone.
"""

from quiver.runtime.histogram import snapshot
from quiver.runtime.metrics import ServiceCollector, counter, gauge


class ProxyMetrics(ServiceCollector):
    def __init__(self, service, app):
        super().__init__(service)
        self.app = app

    def sections(self) -> list:
        return [self._rpcs]

    def _rpcs(self):
        rows = sorted(snapshot(self.app.servicer.counts).items())
        yield counter("quiver_proxy_rpcs_total", "v2 RPCs answered, by RPC and Status code", ("rpc", "code"), rows)
        now = self.app.clients.count()
        yield gauge("quiver_proxy_clients", "RocketMQ 5 clients known to the proxy", rows=[((), now["clients"])])
        yield gauge("quiver_proxy_telemetry_streams", "open telemetry streams", rows=[((), now["streams"])])
        yield counter("quiver_proxy_transaction_checks_forwarded_total", "txn-checker checks sent to a client",
                      rows=[((), self.app.checks_forwarded())])
        renewals = [b.receiving.renewals for b in self.app.backends.every()]
        yield gauge("quiver_proxy_renewing", "PushConsumer deliveries kept invisible until acked",
                    rows=[((), sum(len(r) for r in renewals))])
        yield counter("quiver_proxy_renewals_total", "invisible-time renewals made", rows=[((), sum(r.renewed
                                                                                               for r in renewals))])


def collector(app) -> ProxyMetrics:
    """What `python -m quiver_proxy --metrics-listen` serves."""
    return ProxyMetrics(app.service, app)
