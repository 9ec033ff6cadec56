"""Name server routing rules, without sockets (registrations decoded by their schema, as the door does)."""

from quiver.wire.requests import RegisterBroker, UnregisterBroker
from quiver_namesrv.route_table import RouteTable

Q = {"read": 4, "write": 4}  # a topic config: the queue counts are required


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def _reg(table, name, addr, topics, version=1, bid=0, filters=(), cluster="C"):
    return table.register(RegisterBroker.decode({
        "cluster": cluster, "broker_name": name, "broker_addr": addr, "broker_id": bid,
        "data_version": {"counter": version}, "topics": topics, "filter_servers": list(filters)}))


def _unreg(cluster, name, addr, broker_id=None):
    return UnregisterBroker.decode({"cluster": cluster, "broker_name": name, "broker_addr": addr,
                                    "broker_id": broker_id})


def test_route_lists_queue_data_and_brokers():
    table = RouteTable()
    _reg(table, "a", "h:1", {"T": {"read": 4, "write": 4, "perm": 6}}, filters=["h:9"])
    _reg(table, "b", "h:2", {"T": {"read": 2, "write": 2, "perm": 6}})
    route = table.route("T").ext()
    assert [q["broker_name"] for q in route["queues"]] == ["a", "b"]
    assert [b["addrs"] for b in route["brokers"]] == [{"0": "h:1"}, {"0": "h:2"}]
    assert route["filter_servers"] == {"h:1": ["h:9"]}
    assert table.route("missing") is None


def test_queue_data_rewritten_only_on_new_data_version():
    table = RouteTable()
    _reg(table, "a", "h:1", {"T": {"read": 4, "write": 4}}, version=1)
    _reg(table, "a", "h:1", {"T": {"read": 8, "write": 8}}, version=1)
    assert table.route("T").ext()["queues"][0]["read"] == 4
    _reg(table, "a", "h:1", {"T": {"read": 8, "write": 8}, "U": Q}, version=2)
    assert table.route("T").ext()["queues"][0]["read"] == 8 and table.route("U")


def test_slave_does_not_write_queue_data_while_master_lives():
    table = RouteTable()
    _reg(table, "a", "h:1", {"T": {"read": 4, "write": 4}})
    out = _reg(table, "a", "h:3", {"T": {"read": 1, "write": 1}}, bid=1)
    assert out.master_addr == "h:1"
    assert table.route("T").ext()["queues"][0]["read"] == 4
    assert table.route("T").ext()["brokers"][0]["addrs"] == {"0": "h:1", "1": "h:3"}


def test_expiry_drops_broker_and_its_topics():
    clock = Clock()
    table = RouteTable(clock)
    _reg(table, "a", "h:1", {"T": Q})
    _reg(table, "b", "h:2", {"T": Q, "OnlyB": Q})
    clock.t = 100
    _reg(table, "a", "h:1", {"T": Q})
    assert table.expire(50) == ["h:2"]
    assert [q["broker_name"] for q in table.route("T").ext()["queues"]] == ["a"]
    assert table.route("OnlyB") is None and "b" not in table.cluster_info().ext()["brokers"]


def test_unregister_keeps_other_addresses_of_a_broker_name():
    table = RouteTable()
    _reg(table, "a", "h:1", {"T": Q})
    _reg(table, "a", "h:3", {"T": Q}, bid=1)
    table.unregister(_unreg("C", "a", "h:3"))
    assert table.route("T") and table.cluster_info().ext()["brokers"]["a"]["addrs"] == {"0": "h:1"}
    table.unregister(_unreg("C", "a", "h:1"))
    assert table.route("T") is None and table.cluster_info().ext()["clusters"] == {}


def test_unregister_under_another_name_or_id_leaves_the_live_entry():
    table = RouteTable()
    _reg(table, "a", "h:1", {"T": Q})
    assert table.unregister(_unreg("C", "b", "h:1")) is False
    assert table.unregister(_unreg("C", "a", "h:1", broker_id=1)) is False
    assert "h:1" in table.live and table.route("T")
    assert table.unregister(_unreg("C", "a", "h:1", broker_id=0)) is True
    assert table.cluster_info().ext() == {"brokers": {}, "clusters": {}, "live": {}} and table.topic_list() == []


def test_address_reused_by_another_broker_name_leaves_no_ghost():
    clock = Clock()
    table = RouteTable(clock)
    _reg(table, "a", "h:1", {"T": Q})
    _reg(table, "b", "h:1", {"U": Q})
    info = table.cluster_info().ext()
    assert list(info["brokers"]) == ["b"] and info["clusters"] == {"C": ["b"]}
    assert table.route("T") is None and table.route("U")
    clock.t = 100
    assert table.expire(50) == ["h:1"]
    assert table.cluster_info().ext() == {"brokers": {}, "clusters": {}, "live": {}}


def test_broker_name_moving_cluster_is_listed_once():
    table = RouteTable()
    _reg(table, "a", "h:1", {"T": Q}, cluster="C1")
    _reg(table, "a", "h:1", {"T": Q}, cluster="C2")
    assert table.cluster_info().ext()["clusters"] == {"C2": ["a"]}
    table.unregister(_unreg("C2", "a", "h:1"))
    assert table.cluster_info().ext()["clusters"] == {}
