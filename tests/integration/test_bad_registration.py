"""A bad broker registration is refused whole: no ghost broker, and the scheduler still delivers."""

import time

import pytest
import zmq

from quiver.client.access import broker_access
from quiver import Admin, Message, Producer
from quiver.wire import protocol
from quiver.wire.codes import RequestCode, ResponseCode

from support.scheduler import LEVELS, UNITS, consumer, create_topic, drain, wait_owned


@pytest.fixture
def namesrv_socket(make_cluster):
    """A cluster with delay levels (level 1 = 100 ms) and a bare DEALER on its name server."""
    c = make_cluster(broker_args=("--delay-levels", LEVELS))
    ns = next(s for s in c.services if s.role == "namesrv")
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, 3000)
    sock.connect(f"tcp://{ns.addr}")
    yield c, sock
    sock.close()


def _ask(sock, code, ext, req_id=[100]):
    req_id[0] += 1
    sock.send_multipart(protocol.request(code, req_id[0], ext))
    env = protocol.decode(sock.recv_multipart())
    assert env.id == req_id[0]
    return env


def _cluster(sock) -> dict:
    info = _ask(sock, RequestCode.GET_BROKER_CLUSTER_INFO, None).ext["cluster"]
    for v in info["live"].values():
        v.pop("age_ms")
    return info


def _registration(**over) -> dict:
    ext = {"cluster": "GhostCluster", "broker_name": "ghost", "broker_addr": "127.0.0.1:1", "broker_id": 0,
           "data_version": {"state": 0, "ts": 1, "counter": 1}, "topics": {"GhostTopic": {"read": 4, "write": 4}},
           "filter_servers": []}
    ext.update(over)
    return ext


# (a word the remark must name, the registration); the remark's exact wording belongs to the schema
# (quiver.wire.requests.RegisterBroker), the name server's one check of a registration
BAD = [
    ("broker_addr", _registration(broker_addr="not-an-address")),      # made every scheduler's rebalance raise
    ("broker_addr", _registration(broker_addr="127.0.0.1:0")),
    ("filter_servers", _registration(filter_servers=5)),               # used to fail half-way: a ghost broker
    ("filter_servers", _registration(filter_servers=["127.0.0.1:2", "x"])),
    ("GhostTopic", _registration(topics={"GhostTopic": "not a map"})),
    ("topics", _registration(topics={"../../etc": {"read": 4, "write": 4}})),
    ("read", _registration(topics={"GhostTopic": {"read": 2 ** 40, "write": 4}})),
    ("write", _registration(topics={"GhostTopic": {"read": 4, "write": 0}})),
    ("write", _registration(topics={"GhostTopic": {"read": 4}})),
    ("sysflag", _registration(topics={"GhostTopic": {"read": 4, "write": 4, "sysflag": -1}})),
    ("broker_id", _registration(broker_id=-1)),
    ("data_version", _registration(data_version=[1])),
    ("state", _registration(data_version={"state": -1, "counter": 2})),
    ("cluster", _registration(cluster="../x")),
    ("broker_name", _registration(broker_name="")),
    ("ha_addr", _registration(ha_addr="nohost")),
]


def test_bad_registrations_are_refused_whole_and_leave_no_ghost(namesrv_socket):
    c, sock = namesrv_socket
    broker = next(s for s in c.services if s.role == "broker")
    before = _cluster(sock)
    assert list(before["live"]) == [broker.addr]
    for field, ext in BAD:
        env = _ask(sock, RequestCode.REGISTER_BROKER, ext)
        assert "REGISTER_BROKER" in env.remark, env.remark
        assert env.code == ResponseCode.INVALID_PARAMETER, (field, env.remark)
        assert field in env.remark and "expected" in env.remark and "got" in env.remark, env.remark
        # the broker's own name with a bad field must not touch its entry either
        env = _ask(sock, RequestCode.REGISTER_BROKER, {**ext, "broker_name": "broker-a", "cluster": "DefaultCluster"}
                   if field not in ("cluster", "broker_name") else ext)
        assert env.code != ResponseCode.SUCCESS
    for ext in ({"cluster": "C", "broker_name": "broker-a", "broker_addr": broker.addr.split(":")[0]},
                {"cluster": "C", "broker_name": "broker-a", "broker_addr": broker.addr, "broker_id": "0"}):
        env = _ask(sock, RequestCode.UNREGISTER_BROKER, ext)
        assert env.code == ResponseCode.INVALID_PARAMETER and "UNREGISTER_BROKER" in env.remark, env.remark
        assert ("broker_addr" in env.remark or "broker_id" in env.remark) and "expected" in env.remark, env.remark
    # a well-formed unregistration under another broker name leaves the real broker alone
    env = _ask(sock, RequestCode.UNREGISTER_BROKER, {"cluster": "C", "broker_name": "ghost", "broker_addr": broker.addr})
    assert env.code == ResponseCode.SUCCESS
    assert _cluster(sock) == before
    env = _ask(sock, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "GhostTopic"})
    assert env.code == ResponseCode.TOPIC_NOT_EXIST
    with Admin(namesrv=c.namesrv) as admin:
        assert broker_access(admin).all_broker_addrs() == {"broker-a": broker.addr}


def test_scheduler_started_after_poisoning_still_delivers_level_1(namesrv_socket):
    c, sock = namesrv_socket
    for _, ext in BAD:
        assert _ask(sock, RequestCode.REGISTER_BROKER, ext).code != ResponseCode.SUCCESS
    sched = c.add_service("scheduler", "quiver_scheduler")
    c.wait()
    admin = Admin(namesrv=c.namesrv)
    try:
        wait_owned(admin, [sched], UNITS)
        create_topic(admin, "AfterPoison", 1)
        with Producer("pg", namesrv=c.namesrv, auto_batch=False) as p, consumer(c.namesrv, "AfterPoison") as pc:
            t0 = time.monotonic()
            sent = p.send(Message("AfterPoison", b"late", delay_level=1))
            got = drain(pc, 1, 2.0)
            took = time.monotonic() - t0
        assert [m.msg_id for m in got] == [sent.msg_id] and took < 2.0, took
        assert got[0].store_timestamp - got[0].born_timestamp >= 100
    finally:
        admin.shutdown()
