"""Name server routing rules, without sockets."""

from quiver_namesrv.route_table import RouteTable


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def _reg(table, name, addr, topics, version=1, bid=0, filters=()):
    return table.register("C", name, addr, bid, {"counter": version}, topics, list(filters))


def test_route_lists_queue_data_and_brokers():
    table = RouteTable()
    _reg(table, "a", "h:1", {"T": {"read": 4, "write": 4, "perm": 6}}, filters=["h:9"])
    _reg(table, "b", "h:2", {"T": {"read": 2, "write": 2, "perm": 6}})
    route = table.route("T")
    assert [q["broker_name"] for q in route["queues"]] == ["a", "b"]
    assert [b["addrs"] for b in route["brokers"]] == [{"0": "h:1"}, {"0": "h:2"}]
    assert route["filter_servers"] == {"h:1": ["h:9"]}
    assert table.route("missing") is None


def test_queue_data_rewritten_only_on_new_data_version():
    table = RouteTable()
    _reg(table, "a", "h:1", {"T": {"read": 4, "write": 4}}, version=1)
    _reg(table, "a", "h:1", {"T": {"read": 8, "write": 8}}, version=1)
    assert table.route("T")["queues"][0]["read"] == 4
    _reg(table, "a", "h:1", {"T": {"read": 8, "write": 8}, "U": {}}, version=2)
    assert table.route("T")["queues"][0]["read"] == 8 and table.route("U")


def test_slave_does_not_write_queue_data_while_master_lives():
    table = RouteTable()
    _reg(table, "a", "h:1", {"T": {"read": 4, "write": 4}})
    out = _reg(table, "a", "h:3", {"T": {"read": 1, "write": 1}}, bid=1)
    assert out["master_addr"] == "h:1"
    assert table.route("T")["queues"][0]["read"] == 4
    assert table.route("T")["brokers"][0]["addrs"] == {"0": "h:1", "1": "h:3"}


def test_expiry_drops_broker_and_its_topics():
    clock = Clock()
    table = RouteTable(clock)
    _reg(table, "a", "h:1", {"T": {}})
    _reg(table, "b", "h:2", {"T": {}, "OnlyB": {}})
    clock.t = 100
    _reg(table, "a", "h:1", {"T": {}})
    assert table.expire(50) == ["h:2"]
    assert [q["broker_name"] for q in table.route("T")["queues"]] == ["a"]
    assert table.route("OnlyB") is None and "b" not in table.cluster_info()["brokers"]


def test_unregister_keeps_other_addresses_of_a_broker_name():
    table = RouteTable()
    _reg(table, "a", "h:1", {"T": {}})
    _reg(table, "a", "h:3", {"T": {}}, bid=1)
    table.unregister("C", "a", "h:3")
    assert table.route("T") and table.cluster_info()["brokers"]["a"]["addrs"] == {"0": "h:1"}
    table.unregister("C", "a", "h:1")
    assert table.route("T") is None and table.cluster_info()["clusters"] == {}
