"""Producer retry and auto-batching against real brokers on quiver.testing's fake network."""

import pytest

from quiver import Message, Producer, SendStatus
from quiver.wire.codes import RequestCode, ResponseCode
from quiver.errors import MessageIllegalError, SystemBusyError
from quiver.testing import stub_cluster, wait_until

SEND = RequestCode.SEND_MESSAGE
BATCH = RequestCode.SEND_BATCH_MESSAGE


@pytest.fixture
def two():
    with stub_cluster(brokers=2) as c:
        c.admin().create_topic("Orders", queues=2)
        yield c


@pytest.fixture
def one():
    with stub_cluster(brokers=1) as c:
        c.admin().create_topic("Q1", queues=1)
        yield c


def _broker_of(cluster, addr):
    return next(name for name, a in cluster.broker_addrs.items() if a == addr)


# ---- retry ------------------------------------------------------------------------------------


def test_send_retries_on_another_broker_after_a_retryable_error(two):
    fault = two.network.fail(SEND, ResponseCode.SYSTEM_BUSY)
    with two.client(Producer, "pg") as p:
        r = p.send(Message("Orders", b"x"))
    assert r.status is SendStatus.SEND_OK
    assert len(fault.hits) == 1 and r.broker != _broker_of(two, fault.hits[0])
    assert two.network.count(SEND) == 2


def test_send_avoids_a_broker_that_went_away(two):
    gone = two.broker_addrs["broker-a"]
    two.network.disconnect(gone)
    with two.client(Producer, "pg") as p:
        results = [p.send(Message("Orders", str(i).encode())) for i in range(20)]
    assert {r.broker for r in results} == {"broker-b"}
    assert two.network.count(SEND, gone) <= 1  # tried once at most, then avoided
    assert two.broker("broker-b").store.max_offset("Orders", 0) + \
        two.broker("broker-b").store.max_offset("Orders", 1) == 20


def test_send_gives_up_after_its_retries(two):
    two.network.fail(SEND, ResponseCode.SYSTEM_BUSY, times=None)
    with two.client(Producer, "pg", retries=2) as p:
        with pytest.raises(SystemBusyError):
            p.send(Message("Orders", b"x"))
    assert two.network.count(SEND) == 3


def test_a_non_retryable_error_is_raised_at_once(two):
    two.network.fail(SEND, ResponseCode.MESSAGE_ILLEGAL, "too big for us")
    with two.client(Producer, "pg") as p:
        with pytest.raises(MessageIllegalError, match="too big for us"):
            p.send(Message("Orders", b"x"))
    assert two.network.count(SEND) == 1


def test_send_async_retries_elsewhere(two):
    fault = two.network.fail(SEND, ResponseCode.SERVICE_NOT_AVAILABLE)
    with two.client(Producer, "pg") as p:
        r = p.send_async(Message("Orders", b"x")).result(5)
    assert r.status is SendStatus.SEND_OK and r.broker != _broker_of(two, fault.hits[0])


def test_send_batch_async_retries_elsewhere(two):
    fault = two.network.fail(BATCH, ResponseCode.SYSTEM_ERROR)
    with two.client(Producer, "pg") as p:
        rs = p.send_batch_async([Message("Orders", b"a"), Message("Orders", b"b")]).result(5)
    assert [r.queue_offset for r in rs] == [0, 1]
    assert {r.broker for r in rs} != {_broker_of(two, fault.hits[0])}


def test_send_orderly_does_not_move_to_another_queue(two):
    fault = two.network.fail(SEND, ResponseCode.SYSTEM_BUSY)
    with two.client(Producer, "pg") as p:
        with pytest.raises(SystemBusyError):
            p.send_orderly(Message("Orders", b"x"), sharding_key="o-1")
        r1 = p.send_orderly(Message("Orders", b"y"), sharding_key="o-1")
        r2 = p.send_orderly(Message("Orders", b"z"), sharding_key="o-1")
    assert len(fault.hits) == 1
    assert (r1.broker, r1.queue_id) == (r2.broker, r2.queue_id)
    assert r2.queue_offset == r1.queue_offset + 1


# ---- auto-batching ------------------------------------------------------------------------------


def test_send_async_batches_what_waits_behind_the_request_in_flight(one):
    addr = one.broker_addrs["broker-a"]
    with one.client(Producer, "pg", batch_in_flight=1) as p:
        one.network.hold(addr)           # the first request stays in flight
        futs = [p.send_async(Message("Q1", f"m{i}".encode())) for i in range(50)]
        assert one.network.held(addr) == 1
        one.network.release(addr)
        results = [f.result(5) for f in futs]
    assert [r.queue_offset for r in results] == list(range(50))   # in send order
    assert one.network.count(SEND) == 1 and one.network.count(BATCH) == 1
    got = one.broker().store.get_messages("Q1", 0, 0, 100)
    assert got.count == 50


def test_send_async_keeps_batch_in_flight_requests_under_way_per_queue(one):
    addr = one.broker_addrs["broker-a"]
    with one.client(Producer, "pg") as p:   # the default: 2 per queue
        one.network.hold(addr)
        futs = [p.send_async(Message("Q1", f"m{i}".encode())) for i in range(50)]
        assert wait_until(lambda: one.network.held(addr) == 2)   # the first two left at once, the rest wait
        assert one.network.held(addr) == 2
        one.network.release(addr)
        results = [f.result(5) for f in futs]
    assert [r.queue_offset for r in results] == list(range(50))   # still in send order
    assert one.network.count(SEND) == 2 and one.network.count(BATCH) == 1
    with pytest.raises(ValueError, match="batch_in_flight"):
        Producer("pg", namesrv="127.0.0.1:1", batch_in_flight=0)


def test_auto_batches_are_bounded_by_count(one):
    addr = one.broker_addrs["broker-a"]
    with one.client(Producer, "pg", batch_max_messages=8, batch_in_flight=1) as p:
        one.network.hold(addr)
        futs = [p.send_async(Message("Q1", b"m")) for _ in range(33)]
        one.network.release(addr)
        assert [f.result(5).queue_offset for f in futs] == list(range(33))
    assert one.network.count(SEND) == 1 and one.network.count(BATCH) == 4


def test_auto_batches_are_bounded_by_bytes(one):
    addr = one.broker_addrs["broker-a"]
    with one.client(Producer, "pg", batch_max_bytes=1000, batch_in_flight=1) as p:
        one.network.hold(addr)
        futs = [p.send_async(Message("Q1", b"x" * 300)) for _ in range(10)]
        one.network.release(addr)
        [f.result(5) for f in futs]
    assert one.network.count(SEND) == 1 and one.network.count(BATCH) == 3  # 3 + 3 + 3 bodies of 300


def test_auto_batch_off_sends_one_request_per_message(one):
    with one.client(Producer, "pg", auto_batch=False) as p:
        futs = [p.send_async(Message("Q1", b"m")) for _ in range(20)]
        [f.result(5) for f in futs]
    assert one.network.count(SEND) == 20 and one.network.count(BATCH) == 0


def test_a_failed_batch_is_retried_message_by_message_elsewhere(two):
    fault = two.network.fail(BATCH, ResponseCode.SYSTEM_BUSY)
    addrs = list(two.broker_addrs.values())
    with two.client(Producer, "pg") as p:
        for a in addrs:
            two.network.hold(a)
        futs = [p.send_async(Message("Orders", f"m{i}".encode())) for i in range(40)]
        for a in addrs:
            two.network.release(a)
        results = [f.result(5) for f in futs]
    assert len(fault.hits) == 1
    assert all(r.status is SendStatus.SEND_OK for r in results)
    assert len({r.msg_id for r in results}) == 40
    stored = sum(app.store.max_offset("Orders", q) for app in two.brokers.values() for q in (0, 1))
    assert stored == 40   # nothing lost, nothing stored twice
