"""The name server's Prometheus metrics: live brokers, topics and clusters it routes.

Read at scrape time (quiver.runtime.metrics) from the route table's sizes; the
table itself is only written on the service thread.
"""

from quiver.runtime.metrics import ServiceCollector, gauge


class NamesrvMetrics(ServiceCollector):
    def __init__(self, service, table):
        super().__init__(service)
        self.table = table   # route_table.RouteTable

    def sections(self) -> list:
        return [self._routes]

    def _routes(self):
        t = self.table
        yield gauge("quiver_namesrv_brokers", "live brokers registered here", rows=[((), len(t.live))])
        yield gauge("quiver_namesrv_topics", "topics in the route table", rows=[((), len(t.topics))])
        yield gauge("quiver_namesrv_clusters", "clusters with a registered broker", rows=[((), len(t.clusters))])


def collector(app) -> NamesrvMetrics:
    """What `python -m quiver_namesrv --metrics-listen` serves."""
    return NamesrvMetrics(app.service, app.table)
