"""The Kafka gateway's Prometheus metrics: answers by API and Kafka error code, connections, groups.

Read at scrape time from the gateway's answer counts and the coordinator's groups; nothing is
kept for metrics alone.
"""

from quiver.runtime.metrics import ServiceCollector, counter, gauge


class KafkaMetrics(ServiceCollector):
    def __init__(self, service, app):
        super().__init__(service)
        self.app = app

    def sections(self) -> list:
        return [self._kafka]

    def _kafka(self):
        gw = self.app.gateway
        with gw._lock:
            rows = sorted(((api, str(err)), n) for (api, err), n in gw.counts.items())
        yield counter("quiver_kafka_answers_total", "Kafka API answers per partition (or group call), by API and "
                      "Kafka error code (0: none)", ("api", "error_code"), rows)
        yield counter("quiver_kafka_fetch_broker_total", "Fetch's work at the brokers: pull requests sent (pulls), "
                      "records they brought (pulled; more than answered: read twice or read ahead for nothing), "
                      "records answered", ("what",), sorted(((k,), n) for k, n in dict(gw.fetched).items()))
        yield gauge("quiver_kafka_connections", "open Kafka client connections", rows=[((), len(self.app._conns))])
        yield counter("quiver_kafka_connections_closed_total", "connections closed for a frame over "
                      "--max-request-bytes or a garbled header", ("reason",),
                      [(("oversize",), self.app.closed_oversize), (("garbled",), self.app.closed_bad)])
        groups = sorted((name, len(g.members)) for name, g in list(self.app.groups.groups.items()))
        yield gauge("quiver_kafka_group_members", "members of each Kafka group the gateway coordinates",
                    ("group",), [((name,), n) for name, n in groups])


def collector(app) -> KafkaMetrics:
    """What `python -m quiver_kafka --metrics-listen` serves."""
    return KafkaMetrics(app.service, app)
