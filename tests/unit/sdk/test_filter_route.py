"""Which filter server a SQL92 pull goes to (quiver.client.filter_route): the queue's broker's own,
else one of the topic's other brokers', else any live one of the cluster (issue 16), read from the
cached route only; failed ones avoided for a while."""

import logging
import time
import types

import pytest

from quiver.client.access import broker_access
from quiver.client import filter_route
from quiver.client.base import ClientBase, MessageQueue, Route
from quiver.client.filter_route import FilterServers, NoFilterServerError, candidates, pull_address
from quiver.client.message import MessageSelector
from quiver.client.options import ConsumerOptions
from quiver.client.queue_puller import QueuePuller
from quiver.errors import RequestTimeoutError, SubscriptionParseError
from quiver.wire import requests as rq
from quiver.wire.codes import ResponseCode
from quiver.wire.protocol import Envelope

BA, BB, BC = "10.0.0.1:10911", "10.0.0.2:10911", "10.0.0.3:10911"
FA1, FA2, FB, FX, FY = "10.0.0.1:10921", "10.0.0.1:10922", "10.0.0.2:10921", "10.0.0.9:10921", "10.0.0.8:10921"
SQL = MessageSelector.sql("a > 1")


def _route(brokers: dict, filters: dict, cluster=None, topic: str = "T") -> Route:
    data = {"topic": topic,
            "brokers": [{"cluster": "C", "broker_name": n, "addrs": {"0": a}} for n, a in brokers.items()],
            "queues": [{"broker_name": n, "read": 4, "write": 4, "perm": 6} for n in brokers],
            "filter_servers": filters}
    if cluster is not None:
        data["cluster_filter_servers"] = cluster
    return Route(topic, data)


def _mqs(broker: str, topic: str = "T") -> list[MessageQueue]:
    return [MessageQueue(topic, broker, i) for i in range(4)]


# ---- the route's cluster filter servers ------------------------------------------------------------


def test_route_reads_cluster_filter_servers_through_the_reply_schema():
    assert _route({"a": BA}, {}, [FX, FA1]).cluster_filter_servers == [FX, FA1]
    assert _route({"a": BA}, {}).cluster_filter_servers == []                 # an older name server
    partly = _route({"a": BA}, {}, [FX, "nope", 5])
    assert partly.cluster_filter_servers == [FX]
    assert any("'nope' (str): must be HOST:PORT" in s for s in partly.skipped)
    assert any("5 (int): must be HOST:PORT" in s for s in partly.skipped)
    garbage = _route({"a": BA}, {}, {"x": 1})
    assert garbage.cluster_filter_servers == [] and any("field 'cluster_filter_servers'" in s for s in garbage.skipped)
    assert garbage.read_queues == _mqs("a")                                    # the rest of the route stands
    # the reply schema decodes the same field for anyone reading RouteReply
    reply = rq.RouteReply.decode({"route": {"topic": "T", "cluster_filter_servers": [FX, "bad"]}})
    assert reply.route.cluster_filter_servers == [FX]


# ---- tiers -----------------------------------------------------------------------------------------


def test_candidates_nearest_first_without_repeats():
    route = _route({"a": BA, "b": BB}, {BA: [FA2, FA1]}, [FA1, FA2, FB, FX])
    assert candidates(route, BA) == [[FA1, FA2], [FB, FX]]   # its own, then the rest of the cluster
    assert candidates(route, BB) == [[FA1, FA2], [FB, FX]]   # b has none: the topic's (a's), then the cluster's
    own_b = _route({"a": BA, "b": BB}, {BA: [FA1], BB: [FB]}, [FA1, FB, FX])
    assert candidates(own_b, BB) == [[FB], [FA1], [FX]]
    assert candidates(_route({"b": BB}, {}, []), BB) == []


def test_a_broker_with_filter_servers_keeps_its_queues_on_them():
    route = _route({"a": BA}, {BA: [FA1, FA2]}, [FA1, FA2, FX, FY])
    picks = {pull_address(route, mq, SQL, client_id=f"c{i}") for i in range(8) for mq in _mqs("a")}
    assert picks == {FA1, FA2}


def test_a_topic_only_on_a_filterless_broker_uses_the_clusters_filter_servers_spread():
    route = _route({"b": BB}, {}, [FX, FY])
    picks = {pull_address(route, mq, SQL, client_id=f"c{i}") for i in range(8) for mq in _mqs("b")}
    assert picks == {FX, FY}
    assert {pull_address(route, mq, MessageSelector.tags("*")) for mq in _mqs("b")} == {BB}   # tags: the broker


def test_a_failed_tier_hands_over_to_the_next_and_everything_failed_says_so():
    route = _route({"a": BA, "b": BB}, {BA: [FA1]}, [FA1, FX])
    mq = _mqs("b")[0]
    assert pull_address(route, mq, SQL, "c") == FA1                    # the topic's filter server first
    assert pull_address(route, mq, SQL, "c", avoid={FA1}) == FX        # then the cluster's
    with pytest.raises(NoFilterServerError, match="failed recently"):
        pull_address(route, mq, SQL, "c", avoid={FA1, FX})
    with pytest.raises(NoFilterServerError, match="none is registered in its cluster"):
        pull_address(_route({"b": BB}, {}, []), mq, SQL)


def test_an_avoided_filter_server_is_back_after_a_while_and_takes_its_queues_back():
    now = [0.0]
    servers = FilterServers("c", avoid_s=10, clock=lambda: now[0])
    route = _route({"b": BB}, {BB: [FB]}, [FB, FX])
    mq = _mqs("b")[0]
    servers.failed(FB)
    assert servers.pull_address(route, mq, SQL) == FX
    now[0] = 10.5
    assert servers.pull_address(route, mq, SQL) == FB


# ---- the consumer's pull, on the IO thread -----------------------------------------------------------


class _Transport:
    def __init__(self):
        self.sent, self.callbacks = [], []

    def send(self, addr, req, ext, bodies, callback, timeout=3.0):
        self.sent.append((addr, req))
        self.callbacks.append(callback)


class _Client(ClientBase):
    def __init__(self, route):
        super().__init__("127.0.0.1:1")
        self._transport = _Transport()
        self._routes[route.topic] = (time.monotonic(), route)
        self.asked = 0

    def _route(self, topic, refresh=False):   # a name-server call: must not happen on the pull path
        self.asked += 1
        return self._routes[topic][1]


def test_a_sql_pull_of_a_filterless_brokers_queue_goes_to_a_cluster_filter_server_naming_the_broker():
    client = _Client(_route({"b": BB}, {}, [FX]))
    later = []
    puller = QueuePuller(broker_access(client), "G", ConsumerOptions(), lambda d, fn, *a: later.append(fn))
    got = []
    q = types.SimpleNamespace(mq=_mqs("b")[1], addr=BB)
    puller.pull(q, 0, SQL, lambda pulled, retry_s: got.append(retry_s))
    (addr, req), = client._transport.sent
    assert addr == FX and req.broker_addr == BB and req.expression_type == "SQL92"
    assert client.asked == 0 and later == []              # the cached route only, nothing scheduled
    client._transport.callbacks[0](RequestTimeoutError("gone"))
    assert got == [0.0] and puller.filters.avoided() == {FX}
    puller.pull(q, 0, SQL, lambda pulled, retry_s: got.append(retry_s))
    assert got == [0.0, 1.0] and len(later) == 1          # none left: wait, a route refresh on the timer


# ---- subscription check ----------------------------------------------------------------------------------


class _CheckClient:
    def __init__(self, route, answers: dict):
        self._route, self.answers, self.tried = route, answers, []
        self.request_timeout = 1.0
        self.transport = self

    def route(self, topic, refresh=False):
        return self._route

    def call(self, addr, req, timeout=None, ok=()):
        self.tried.append(addr)
        answer = self.answers.get(addr)
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_check_subscription_tries_the_clusters_filter_servers_before_the_brokers(caplog):
    route = _route({"b": BB}, {}, [FX, FY])
    bad = Envelope(ResponseCode.SUBSCRIPTION_PARSE_FAILED, 1, {"position": 3}, [], "a >: expected a value")
    client = _CheckClient(route, {FY: RequestTimeoutError("down"), FX: bad})
    with pytest.raises(SubscriptionParseError) as info:
        filter_route.check_subscription(client, "T", MessageSelector.sql("a >"))
    assert info.value.position == 3 and client.tried == [FY, FX]          # sorted: FY < FX
    nobody = _CheckClient(route, {a: RequestTimeoutError("down") for a in (FX, FY, BB)})
    with caplog.at_level(logging.ERROR):
        assert filter_route.check_subscription(nobody, "T", SQL) is False
    assert nobody.tried == [FY, FX, BB] and "filter server of the topic's cluster" in caplog.text
