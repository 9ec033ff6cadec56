"""Filter server pieces without processes: scanning, selector cache, broker picking, pull routing,
the broker's filter-server registry."""

import pytest

from quiver.wire import record
from quiver.wire import requests as rq
from quiver.client.base import MessageQueue, Route
from quiver.errors import SubscriptionParseError
from quiver.client.filter_route import FilterServers, NoFilterServerError, pull_address, should_fail_over
from quiver.client.message import MessageSelector
from quiver_broker.filter_servers import FilterServerRegistry
from quiver_filter.app import pick_broker
from quiver.wire.record import properties_at
from quiver.wire.property_string import format_properties
from quiver_filter.scanning import scan
from quiver_filter.selectors import SelectorCache
from quiver_filter.sql92 import compile as sql_compile


def _rec(i: int, props: dict, topic: str = "T", body: bytes = b"x") -> bytes:
    return record.encode(body, topic=topic.encode(), props=format_properties(props).encode(), queue_offset=i,
                         phys_offset=1000 + i, born_ts=1, store_ts=2)


def test_properties_at_reads_only_properties_long_topic_and_non_ascii():
    buf = _rec(0, {"a": "1", "région": "€u"}, topic="t" * 200, body=b"\x00" * 1000)
    total, props = properties_at(buf, 0)
    assert total == len(buf) and props == {"a": "1", "région": "€u"}
    assert properties_at(_rec(1, {}), 0)[1] == {}


def test_scan_keeps_matches_raw_and_stops_at_limits():
    recs = [_rec(i, {"a": str(i)}) for i in range(10)]
    buf = b"".join(recs[:5]) + record.blank(16) + b"".join(recs[5:])
    sel = sql_compile("a >= 3 AND a < 8")
    res, pos = scan(buf, sel.matches, 100, 1 << 20)
    assert pos == len(buf) and res.scanned == 10 and res.matched == 5
    assert res.chunks == recs[3:8] and res.last_offset == 9
    res, pos = scan(buf, sel.matches, 2, 1 << 20)          # reply full after two matches
    assert res.matched == 2 and res.last_offset == 4 and pos < len(buf)
    res, _ = scan(buf, sel.matches, 100, len(recs[3]) + 1)  # byte limit (first match always fits)
    assert res.matched == 1 and res.last_offset == 3


def test_scan_of_garbage_raises_bad_record():
    with pytest.raises(record.BadRecord):
        scan(b"\x00\x00\x00\x70" + b"\x11" * 108, lambda p: True, 10, 1000)


def test_selector_cache_per_group_topic_expression_and_bounded():
    cache = SelectorCache(size=2)
    a = cache.get("g", "T", "a > 1")
    assert cache.get("g", "T", "a > 1") is a and cache.hits == 1
    cache.get("g2", "T", "a > 1")
    cache.get("g3", "T", "a > 1")
    assert len(cache) == 2 and {s["group"] for s in cache.subscriptions()} == {"g2", "g3"}
    with pytest.raises(SubscriptionParseError):
        cache.get("g", "T", "a >")
    assert len(cache) == 2


def _cluster(live: dict) -> rq.ClusterData:
    return rq.ClusterData.decode({"live": {a: {"broker_name": "b", **info} for a, info in live.items()}})


def test_pick_broker_keeps_current_else_least_loaded_master():
    cluster = _cluster({"b1:1": {"broker_id": 0, "filter_servers": ["f1:1"]},
                        "b2:1": {"broker_id": 0, "filter_servers": []},
                        "b3:1": {"broker_id": 1, "filter_servers": []}})
    assert pick_broker(cluster, "me:1") == "b2:1"
    assert pick_broker(cluster, "me:1", current="b2:1") == "b2:1"
    assert pick_broker(cluster, "me:1", current="gone:1") == "b2:1"
    assert pick_broker(_cluster({}), "me:1") is None


def test_pick_broker_spreads_a_crowd_one_at_a_time():
    live = {"b1:1": {"broker_id": 0, "filter_servers": ["f1:1", "f2:1"]},
            "b2:1": {"broker_id": 0, "filter_servers": []}}
    moves = [f for f in ("f1:1", "f2:1") if pick_broker(_cluster(live), f, current="b1:1") == "b2:1"]
    assert len(moves) == 1                      # exactly one of the two moves
    live["b1:1"]["filter_servers"] = ["f1:1"]
    live["b2:1"]["filter_servers"] = ["f2:1"]
    assert pick_broker(_cluster(live), "f1:1", current="b1:1") == "b1:1"
    assert pick_broker(_cluster(live), "f2:1", current="b2:1") == "b2:1"


def _route(filters: dict) -> Route:
    return Route("T", {"brokers": [{"broker_name": "a", "addrs": {"0": "ba:1"}}],
                       "queues": [{"broker_name": "a", "read": 4, "write": 4, "perm": 6}],
                       "filter_servers": filters})


def test_pull_address_tags_go_to_broker_sql_to_filter_servers_spread_and_failover():
    route = _route({"ba:1": ["f1:1", "f2:1"]})
    mqs = [MessageQueue("T", "a", i) for i in range(4)]
    assert {pull_address(route, mq, MessageSelector.tags("A")) for mq in mqs} == {"ba:1"}
    sql = MessageSelector.sql("a > 1")
    picks = {pull_address(route, mq, sql, client_id=f"c{i}") for i in range(8) for mq in mqs}
    assert picks == {"f1:1", "f2:1"}                       # spread over both
    assert all(pull_address(route, mq, sql, "c", avoid={"f1:1"}) == "f2:1" for mq in mqs)
    with pytest.raises(NoFilterServerError, match="failed recently"):
        pull_address(route, mqs[0], sql, "c", avoid={"f1:1", "f2:1"})
    with pytest.raises(NoFilterServerError, match="none is registered"):
        pull_address(_route({}), mqs[0], sql)


def test_filter_servers_avoid_for_a_while_then_retry():
    now = [0.0]
    fs = FilterServers("c", avoid_s=10, clock=lambda: now[0])
    route = _route({"ba:1": ["f1:1"]})
    mq = MessageQueue("T", "a", 0)
    sql = MessageSelector.sql("a > 1")
    fs.failed("f1:1")
    with pytest.raises(NoFilterServerError):
        fs.pull_address(route, mq, sql)
    now[0] = 11.0
    assert fs.pull_address(route, mq, sql) == "f1:1"


def test_should_fail_over():
    from quiver.errors import ClientError, RequestTimeoutError
    from quiver.wire.protocol import Envelope
    assert should_fail_over(ClientError("lost")) and should_fail_over(RequestTimeoutError("late"))
    assert should_fail_over(Envelope(14, 1, remark="not attached"))
    assert not should_fail_over(Envelope(23, 1, remark="bad expression"))
    assert not should_fail_over(Envelope(0, 1, remark=""))


class _FakeBroker:
    def __init__(self):
        self.registrations = 0

    def register_all(self):
        self.registrations += 1


def test_broker_registry_reregisters_on_change_and_expires():
    now = [0.0]
    app = _FakeBroker()
    reg = FilterServerRegistry(app.register_all, expiry_ms=30_000, clock=lambda: now[0])
    assert reg.register("f1:1") and reg.addrs() == ["f1:1"] and app.registrations == 1
    now[0] = 20
    assert not reg.register("f1:1") and app.registrations == 1   # a refresh changes nothing
    now[0] = 30
    assert reg.register("f2:1") and app.registrations == 2
    now[0] = 55
    assert reg.expire_step() == ["f1:1"]                         # silent 35 s
    assert reg.addrs() == ["f2:1"] and app.registrations == 3
    assert reg.expire_step() == [] and app.registrations == 3
    assert reg.unregister("f2:1") and reg.addrs() == [] and app.registrations == 4
