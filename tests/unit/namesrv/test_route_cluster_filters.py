"""A route carries every live filter server of its brokers' clusters (issue 16), so a topic whose
brokers have none of their own is still readable with SQL92."""

from quiver.wire import requests as rq
from quiver.wire.requests import RegisterBroker
from quiver_namesrv.route_table import RouteTable

Q = {"read": 4, "write": 4, "perm": 6}


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def _reg(table, name, addr, topics, filters=(), cluster="C", bid=0):
    table.register(RegisterBroker.decode({
        "cluster": cluster, "broker_name": name, "broker_addr": addr, "broker_id": bid,
        "data_version": {"counter": 1}, "topics": topics, "filter_servers": list(filters)}))


def test_route_of_a_filterless_broker_offers_the_clusters_filter_servers_only():
    table = RouteTable()
    _reg(table, "a", "h:1", {"Other": Q}, filters=["f:2", "f:1"])
    _reg(table, "b", "h:2", {"T": Q})
    _reg(table, "b", "h:3", {"T": Q}, filters=["f:3"], bid=1)        # a slave's filter server counts too
    _reg(table, "z", "h:9", {"T": Q}, filters=["f:9"], cluster="Z")  # another cluster, its own topic broker
    _reg(table, "y", "h:8", {}, filters=["f:8"], cluster="Y")        # a cluster the topic is not on
    route = table.route("T").ext()
    assert route["filter_servers"] == {"h:3": ["f:3"], "h:9": ["f:9"]}
    assert route["cluster_filter_servers"] == ["f:1", "f:2", "f:3", "f:9"]
    # it decodes through the reply schema (what a client trusts)
    assert rq.RouteReply.decode({"route": route}).route.cluster_filter_servers == ["f:1", "f:2", "f:3", "f:9"]


def test_expired_brokers_take_their_filter_servers_out_of_every_route():
    clock = Clock()
    table = RouteTable(clock)
    _reg(table, "a", "h:1", {}, filters=["f:1"])
    _reg(table, "b", "h:2", {"T": Q})
    assert table.route("T").ext()["cluster_filter_servers"] == ["f:1"]
    clock.t = 100.0
    _reg(table, "b", "h:2", {"T": Q})
    table.expire(60.0)
    assert table.route("T").ext()["cluster_filter_servers"] == []
