"""Route data that is not well formed is skipped (logged once); socket errors reach callers as ClientError."""

import logging
import threading
import time

import pytest
import zmq

from quiver.wire import protocol
from quiver.wire import requests as rq
from quiver.client.base import ClientBase, MessageQueue, Route
from quiver.wire.names import is_valid_addr
from quiver.wire.codes import RequestCode
from quiver.errors import ClientError, QuiverError
from quiver.wire.transport import Transport

GOOD = "127.0.0.1:10911"


def _route_data(**over):
    data = {"topic": "T",
            "brokers": [{"cluster": "C", "broker_name": "a", "addrs": {"0": GOOD, "1": "127.0.0.1:10912"}},
                        {"cluster": "C", "broker_name": "ghost", "addrs": {"0": "not-an-address"}},
                        {"cluster": "C", "broker_name": "half", "addrs": {"0": "h:0", "x": "h:5", "1": "h:6"}},
                        "garbage", {"addrs": {"0": GOOD}}, {"broker_name": "b", "addrs": 5}],
            "queues": [{"broker_name": "a", "read": 2, "write": 2, "perm": 6},
                       {"broker_name": "ghost", "read": 4, "write": 4, "perm": 6},
                       {"broker_name": "half", "read": 1, "write": 1, "perm": 6},
                       {"broker_name": "b", "read": "4", "write": 4, "perm": 6}, 7, {"broker_name": "a"}],
            "filter_servers": {GOOD: ["127.0.0.1:10921", "nope"], "bad": ["127.0.0.1:1"]}}
    data.update(over)
    return data


def test_route_keeps_only_well_formed_entries():
    route = Route("T", _route_data())
    assert route.by_id == {"a": {0: GOOD, 1: "127.0.0.1:10912"}, "ghost": {}, "half": {1: "h:6"}}  # b: no cluster
    assert route.addrs == {"a": GOOD, "ghost": None, "half": "h:6"}
    assert route.write_queues == [MessageQueue("T", "a", 0), MessageQueue("T", "a", 1)]  # half has no master
    assert route.read_queues == [MessageQueue("T", "a", 0), MessageQueue("T", "a", 1), MessageQueue("T", "half", 0)]
    assert route.filter_servers == {GOOD: ["127.0.0.1:10921"]}
    text = "\n".join(route.skipped)
    for fragment in ("'not-an-address' (str): must be HOST:PORT", "'h:0'", "key 'x' (str): must be a broker id",
                     "'garbage' (str): must be an object BrokerData", "'addrs': 5", "'read': '4'",
                     "read must be an integer", "7 (int): must be an object QueueData", "'nope'",
                     "key 'bad' (str): must be HOST:PORT"):
        assert fragment in text, fragment
    assert len(route.skipped) == 11   # each left-out entry once


@pytest.mark.parametrize("data", [None, [], "x", {"brokers": 5, "queues": {"a": 1}, "filter_servers": []}])
def test_route_of_garbage_is_empty(data):
    route = Route("T", data)
    assert route.addrs == {} and route.write_queues == [] and route.read_queues == []


def test_a_field_of_the_wrong_shape_is_left_out_alone_and_described_once():
    route = Route("T", _route_data(filter_servers=[GOOD], cluster_filter_servers="x"))
    assert route.read_queues == Route("T", _route_data()).read_queues and route.filter_servers == {}
    assert route.cluster_filter_servers == []
    fields = [s for s in route.skipped if "field 'filter_servers'" in s or "field 'cluster_filter_servers'" in s]
    assert len(fields) == 2 and len(route.skipped) == 11 - 2 + 2   # the entries of filter_servers went with it


def test_addresses_the_route_accepts():
    assert is_valid_addr("h:1") and is_valid_addr("[::1]:9876") and is_valid_addr("a.b-c_d:65535")
    for bad in ("h", "h:0", "h:65536", ":1", "h:1;i:2", "h: 1", "h:١", None, 5, "tcp://h:1"):
        assert not is_valid_addr(bad), bad


class _Fake(ClientBase):
    """A client whose name server answers from a dict (no sockets)."""

    def __init__(self, answers):
        super().__init__("127.0.0.1:1")
        self.answers = answers

    def _call_namesrv(self, req, ext=None):
        assert isinstance(req, rq.Schema), req  # typed requests only (issue 13)
        return self.answers[req.CODE]


def test_cluster_info_leaves_out_bad_addresses_and_logs_each_once(caplog):
    info = {"brokers": {"a": {"cluster": "C", "broker_name": "a", "addrs": {"0": GOOD}},
                        "ghost": {"cluster": "C", "broker_name": "ghost", "addrs": {"0": "ghost"}},
                        "s": {"cluster": "C", "broker_name": "s", "addrs": {"0": "x:y", "1": "127.0.0.1:2"}},
                        "junk": 5},
            "clusters": {"C": ["a", "ghost", "s", "junk"]},
            "live": {GOOD: {"broker_name": "a"}, "ghost": {"broker_name": "ghost"}}}
    client = _Fake({RequestCode.GET_BROKER_CLUSTER_INFO: {"cluster": info}})
    with caplog.at_level(logging.WARNING, logger="quiver.client.base"):
        assert client._all_broker_addrs() == {"a": GOOD, "s": "127.0.0.1:2"}
        assert client._broker_addr("s") == "127.0.0.1:2"
        assert list(client._cluster_info()["live"]) == [GOOD]
        assert client._slave_addrs(["s", "ghost"]) == ["127.0.0.1:2"]
        with pytest.raises(ClientError, match="not registered"):
            client._broker_addr("ghost")
    warnings = [r.getMessage() for r in caplog.records]
    assert sum("'ghost'" in w for w in warnings) == 1 and sum("'x:y'" in w for w in warnings) == 1
    assert sum("junk" in w for w in warnings) == 1


def test_route_without_a_map_is_a_client_error():
    client = _Fake({RequestCode.GET_ROUTEINFO_BY_TOPIC: {"route": ["x"]},
                    RequestCode.GET_BROKER_CLUSTER_INFO: {"cluster": "x"}})
    with pytest.raises(ClientError, match="not a map"):
        client._route("T")
    with pytest.raises(ClientError, match="not a map"):
        client._cluster_info()


@pytest.fixture
def transport():
    t = Transport("test")
    yield t
    t.close()


@pytest.mark.parametrize("addr", ["ghost", "h:notaport", "", "a b:1", None, ["h:1"]])
def test_calls_to_a_bad_address_raise_client_error_and_leave_no_socket(transport, addr):
    with pytest.raises(ClientError):
        transport.call(addr, RequestCode.PING, timeout=0.5)
    got = []
    try:
        transport.send(addr, RequestCode.PING, None, (), got.append, timeout=0.5)
    except ClientError:
        got.append("raised")
    deadline = time.monotonic() + 2
    while not got and time.monotonic() < deadline:
        time.sleep(0.01)
    assert got and (got[0] == "raised" or isinstance(got[0], ClientError)), got
    assert transport._thread.is_alive() and list(transport._peers) == []


def test_io_thread_survives_bad_frames_and_keeps_serving(transport):
    server = zmq.Context.instance().socket(zmq.ROUTER)
    port = server.bind_to_random_port("tcp://127.0.0.1")
    stop = threading.Event()
    codes = []

    def serve():  # the socket is used and closed on this thread only
        while not stop.is_set():
            if server.poll(50):
                ident, *frames = server.recv_multipart()
                env = protocol.decode(frames)
                codes.append(env.code)
                server.send_multipart([ident, *protocol.reply(0, env.id, "pong")])
        server.close(0)
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        transport.reply_to_push(f"127.0.0.1:{port}", [object()])   # not bytes: the send fails
        transport.reply_to_push("ghost", [b"x"])                   # not connectable
        futs = [transport.call_future(f"127.0.0.1:{port}", RequestCode.PING, timeout=3) for _ in range(3)]
        assert [f.result(5).remark for f in futs] == ["pong"] * 3
        assert transport.call(f"127.0.0.1:{port}", RequestCode.PING, timeout=3).remark == "pong"
        assert transport.call(f"127.0.0.1:{port}", rq.Ping(), timeout=3).remark == "pong"  # a schema object
        assert codes == [RequestCode.PING] * 5
        assert transport._thread.is_alive()
    finally:
        stop.set()
        thread.join(2)


def test_after_close_everything_is_a_client_error_and_nothing_raises_raw(transport):
    transport.close()
    for call in (lambda: transport.send(GOOD, RequestCode.PING, None, (), print),
                 lambda: transport.oneway(GOOD, RequestCode.PING),
                 lambda: transport.call(GOOD, RequestCode.PING)):
        with pytest.raises(ClientError):
            call()
    transport.reply_to_push(GOOD, [b"x"])  # a late answer to a pushed request is dropped quietly
    assert issubclass(ClientError, QuiverError)


def test_deeply_nested_route_entries_are_skipped():
    deep = []
    for _ in range(5000):
        deep = [deep]
    route = Route("T", {"brokers": [{"cluster": "C", "broker_name": "a", "addrs": {"0": deep}}, deep],
                        "queues": [deep, {"broker_name": "a", "read": deep, "write": 1, "perm": 6}],
                        "filter_servers": {GOOD: deep}})
    assert route.addrs == {"a": None} and route.read_queues == [] and len(route.skipped) == 5
    assert all(len(s) < 300 for s in route.skipped)
