"""The name server's collector: route table sizes plus the service's shared metrics."""

from support.scrape import samples, value

from quiver.wire import protocol
from quiver.wire.codes import RequestCode
from quiver_namesrv.app import App
from quiver_namesrv.config import Config
from quiver_namesrv.metrics import collector


class Sink:
    def send_multipart(self, frames, flags=0, copy=True):
        pass


def test_namesrv_collector_reads_the_route_table():
    app = App(Config(listen="127.0.0.1:1"))
    app.service.use_socket(Sink())
    app.service.handle([b"peer", *protocol.request(RequestCode.GET_BROKER_CLUSTER_INFO, 1)])
    got = samples(collector(app))
    assert value(got, "quiver_namesrv_brokers") == 0 and value(got, "quiver_namesrv_topics") == 0
    assert value(got, "quiver_rpc_latency_seconds_count", request_code="GET_BROKER_CLUSTER_INFO") == 1
    app.table.live["127.0.0.1:2"] = object()   # what register() leaves behind, as far as counting goes
    assert value(samples(collector(app)), "quiver_namesrv_brokers") == 1


def test_a_controller_exports_its_elections_and_leadership():
    import types
    from quiver_namesrv.metrics import NamesrvMetrics
    app = App(Config(listen="127.0.0.1:1"))
    import time
    now = time.monotonic()
    ctl = types.SimpleNamespace(elections=3, is_leader=True, state=types.SimpleNamespace(data={"C/fo": {}}),
                                fallback_s=1.0, heard={"b:1": now, "c:1": now - 60})   # c silent for a minute
    got = samples(NamesrvMetrics(app.service, app.table, ctl))
    assert value(got, "quiver_controller_elections_total") == 3
    assert value(got, "quiver_controller_leader") == 1 and value(got, "quiver_controller_groups") == 1
    assert value(got, "quiver_controller_members") == 3
    assert value(got, "quiver_controller_members_reachable") == 2   # itself and b: a majority of 3
    assert value(samples(collector(app)), "quiver_controller_leader") is None   # a plain name server: none
