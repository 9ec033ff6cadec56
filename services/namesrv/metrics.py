"""The name server's Prometheus metrics: live brokers, topics and clusters it routes.

Read at scrape time (quiver.runtime.metrics) from the route table's sizes; the
table itself is only written on the service thread.
"""

import time

from quiver.runtime.metrics import ServiceCollector, counter, gauge


class NamesrvMetrics(ServiceCollector):
    def __init__(self, service, table, controller=None):
        super().__init__(service)
        self.table = table   # route_table.RouteTable
        self.controller = controller   # controller.Controller with --controller, else None

    def sections(self) -> list:
        return [self._routes] + ([self._controller] if self.controller is not None else [])

    def _controller(self):
        c = self.controller
        yield counter("quiver_controller_elections", "masters this controller elected as Raft leader "
                      "(sum over the controllers)", rows=[((), c.elections)])
        yield gauge("quiver_controller_leader", "1 if this controller is the Raft leader",
                    rows=[((), 1 if c.is_leader else 0)])
        yield gauge("quiver_controller_groups", "broker groups the controller keeps", rows=[((), len(c.state.data))])
        now, heard = time.monotonic(), list(c.heard.values())
        yield gauge("quiver_controller_members", "Raft members of the controller group (this one included)",
                    rows=[((), len(heard) + 1)])
        yield gauge("quiver_controller_members_reachable", "members heard within the leader fallback time, this "
                    "one included (a majority is needed to elect)",
                    rows=[((), 1 + sum(now - t <= c.fallback_s for t in heard))])

    def _routes(self):
        t = self.table
        yield gauge("quiver_namesrv_brokers", "live brokers registered here", rows=[((), len(t.live))])
        yield gauge("quiver_namesrv_topics", "topics in the route table", rows=[((), len(t.topics))])
        yield gauge("quiver_namesrv_clusters", "clusters with a registered broker", rows=[((), len(t.clusters))])


def collector(app) -> NamesrvMetrics:
    """What `python -m quiver_namesrv --metrics-listen` serves."""
    return NamesrvMetrics(app.service, app.table, app.controller)
