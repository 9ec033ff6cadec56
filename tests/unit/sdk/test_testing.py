"""quiver.testing itself: the fake network, transport and stub cluster (no processes, no sockets)."""

import os
import threading

import pytest

import quiver.client.base
from quiver import Message, Producer, PullConsumer
from quiver.wire import protocol
from quiver.wire import requests as rq
from quiver.wire.codes import RequestCode, ResponseCode
from quiver.errors import ClientError, RequestTimeoutError, SystemBusyError
from quiver.runtime.service import Service
from quiver.testing import FakeNetwork, FakeTransport, attach, stub_cluster, wait_until
from quiver.wire.transport import Transport

TOY = "192.0.2.9:1"


@pytest.fixture
def stub():
    with stub_cluster(brokers=2) as c:
        yield c


@pytest.fixture
def net():
    n = FakeNetwork()
    yield n
    n.close()


def _live(cluster) -> set:
    env = cluster.network.call(cluster.namesrv, rq.GetClusterInfo())
    return set(rq.ClusterReply.decode(env.ext).cluster.live)


def test_stub_cluster_registers_its_brokers_and_cleans_up():
    with stub_cluster(brokers=2) as c:
        assert _live(c) == set(c.broker_addrs.values())
        assert sorted(c.brokers) == ["broker-a", "broker-b"]
        data_dir = c.data_dir
        assert os.path.isdir(os.path.join(data_dir, "broker", "broker-a"))
    assert not os.path.exists(data_dir)
    assert quiver.client.base.Transport is Transport  # the seam is gone with the last network


def test_clients_built_by_the_cluster_use_the_fake_and_others_the_real_transport(stub):
    admin = stub.admin()
    assert isinstance(admin._transport, FakeTransport)
    admin.create_topic("Seam", queues=2)
    assert {q["broker_name"] for q in admin.topic_route("Seam")["queues"]} == {"broker-a", "broker-b"}
    plain = Producer("pg", namesrv=stub.namesrv).start()  # not attached: a real client
    try:
        assert isinstance(plain._transport, Transport)
    finally:
        plain.shutdown()
    p = stub.attach(Producer("pg", namesrv=stub.namesrv))
    with p:
        assert isinstance(p._transport, FakeTransport)
        assert p.send(Message("Seam", b"x")).msg_id
    admin.shutdown()


def test_attach_after_start_is_refused(stub):
    p = Producer("pg", namesrv=stub.namesrv).start()
    try:
        with pytest.raises(ClientError, match="before start"):
            attach(p, stub.network)
    finally:
        p.shutdown()


def test_a_served_service_answers_and_a_silent_one_times_out(net):
    never = []
    svc = Service(TOY, {RequestCode.GET_MAX_OFFSET: never.append}, "toy")  # holds the request, never answers
    net.serve(svc)
    assert net.call(TOY, rq.Ping()).ext == {"service": "toy"}
    t = net.transport("t")
    with pytest.raises(RequestTimeoutError):
        t.call(TOY, rq.GetMaxOffset(topic="T", queue_id=0), timeout=0.1)
    assert len(never) == 1


def test_disconnect_fails_waiting_and_new_requests_then_reconnect(net):
    held = []
    net.serve(Service(TOY, {RequestCode.GET_MAX_OFFSET: held.append}, "toy"))
    t = net.transport("t")
    fut = t.call_future(TOY, rq.GetMaxOffset(topic="T", queue_id=0), timeout=30)
    assert wait_until(lambda: held)
    net.disconnect(TOY)
    with pytest.raises(ClientError, match="lost before it replied"):
        fut.result(2)
    with pytest.raises(ClientError, match="not reachable"):
        t.call(TOY, rq.Ping(), timeout=5)
    held[0].reply(ResponseCode.SUCCESS)  # a late answer is lost, not delivered to anyone
    net.reconnect(TOY)
    assert t.call(TOY, rq.Ping()).remark == "pong"


def test_unknown_address_is_unreachable_at_once(net):
    with pytest.raises(ClientError, match="not reachable"):
        net.call("192.0.2.1:1", rq.Ping(), timeout=5)


def test_hold_keeps_requests_until_release_in_order(net):
    seen = []

    def record(req):
        seen.append(req.args.queue_id)
        req.reply(ResponseCode.SUCCESS, "", rq.OffsetReply(offset=req.args.queue_id))
    net.serve(Service(TOY, {RequestCode.GET_MAX_OFFSET: record}, "toy"))
    t = net.transport("t")
    net.hold(TOY)
    futs = [t.call_future(TOY, rq.GetMaxOffset(topic="T", queue_id=i)) for i in range(5)]
    assert net.held(TOY) == 5 and not seen
    net.release(TOY)
    assert [f.result(2).ext["offset"] for f in futs] == [0, 1, 2, 3, 4]
    assert seen == [0, 1, 2, 3, 4]
    assert net.count(RequestCode.GET_MAX_OFFSET, TOY) == 5


def test_injected_faults_answer_for_the_service(net):
    svc = Service(TOY, {}, "toy")
    net.serve(svc)
    fault = net.fail(RequestCode.PING, ResponseCode.SYSTEM_BUSY, times=2)
    for _ in range(2):
        with pytest.raises(SystemBusyError, match="injected"):
            net.call(TOY, rq.Ping())
    assert net.call(TOY, rq.Ping()).remark == "pong"
    assert fault.hits == [TOY, TOY]
    assert svc.counters["requests"] == 1   # the faulted two never reached it
    forever = net.fail(RequestCode.PING, ResponseCode.SYSTEM_BUSY, addr=TOY, times=None)
    for _ in range(3):
        assert net.call(TOY, rq.Ping(), ok=(ResponseCode.SYSTEM_BUSY,)).code == ResponseCode.SYSTEM_BUSY
    net.heal(forever)
    assert net.call(TOY, rq.Ping()).remark == "pong"


def test_callbacks_run_on_the_transport_thread_and_may_call_again(net):
    net.serve(Service(TOY, {}, "toy"))
    t = net.transport("t")
    out, done = [], threading.Event()

    def first(env):
        out.append(threading.current_thread().name)
        out.append(t.call(TOY, rq.Ping()).remark)  # a blocking call from a callback does not deadlock
        done.set()
    t.send(TOY, rq.Ping(), None, (), first)
    assert done.wait(2)
    assert out == ["t-fake-io", "pong"]


def test_closed_transport_refuses(net):
    t = net.transport("t")
    t.close()
    with pytest.raises(ClientError, match="shut down"):
        t.send(TOY, rq.Ping(), None, (), print)


def test_exchange_sends_raw_frames(net):
    net.serve(Service(TOY, {}, "toy"))
    env = net.exchange(TOY, [protocol.VERSION, b'{"c": 9000, "id": 77}'])
    assert (env.code, env.id, env.remark) == (ResponseCode.SUCCESS, 77, "pong")


def test_brokers_push_to_clients_through_their_identity(stub):
    """NOTIFY_CONSUMER_IDS_CHANGED reaches the first consumer when a second joins: it gives up half."""
    stub.admin().create_topic("Push", queues=4)
    with stub.client(PullConsumer, "pushed", rebalance_interval_ms=60_000) as c1:
        c1.subscribe("Push")
        assert wait_until(lambda: len(c1.assignment()) == 8)
        with stub.client(PullConsumer, "pushed", rebalance_interval_ms=60_000) as c2:
            c2.subscribe("Push")
            assert wait_until(lambda: len(c1.assignment()) == 4 and len(c2.assignment()) == 4)
            assert set(c1.assignment()).isdisjoint(c2.assignment())


def test_store_is_reachable_for_assertions(stub):
    with stub.client(Producer, "pg") as p:
        r = p.send(Message("Direct", b"hello", keys=["k"]))
    store = stub.broker(r.broker).store
    assert store.max_offset("Direct", r.queue_id) == 1
    assert [x.body for x in store.query_by_key("Direct", "k")] == [b"hello"]

