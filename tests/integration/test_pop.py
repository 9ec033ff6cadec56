"""POP consumption with real processes: SimpleConsumer and PushConsumer(pop=True) against a broker."""

import threading
import time

import pytest

from quiver import (Admin, ConsumeResult, Message, Producer, PullConsumer, PushConsumer, ReceiptHandleExpiredError,
                    SimpleConsumer)
from quiver.client.message import SHARDING_KEY
from quiver.wire.codes import RequestCode, ResponseCode
from quiver.wire.transport import Transport
from support.waiting import wait_for


@pytest.fixture
def pop_cluster(make_cluster):
    c = make_cluster()
    admin = Admin(namesrv=c.namesrv)
    return c, admin


def _send(c, topic, bodies, **props):
    with Producer("pop-pg", namesrv=c.namesrv) as p:
        for b in bodies:
            p.send(Message(topic, b, properties=dict(props)))


def _consumer(c, group, topic, **kw):
    sc = SimpleConsumer(group, namesrv=c.namesrv, consume_from="first", await_duration_s=0.5, **kw)
    sc.start()
    sc.subscribe(topic)
    return sc


def test_five_consumers_share_two_queues_each_message_acked_once(pop_cluster):
    c, admin = pop_cluster
    admin.create_topic("PopShare", queues=2)
    bodies = [b"m-%d" % i for i in range(60)]
    _send(c, "PopShare", bodies)
    consumers = [_consumer(c, "share", "PopShare") for _ in range(5)]
    got, lock, per = [], threading.Lock(), [0] * 5

    def run(i, sc):
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with lock:
                if len(got) >= len(bodies):
                    return
            for m in sc.receive(4, invisible_duration_s=20, wait_s=0.3):
                sc.ack(m)
                with lock:
                    got.append(m.body)
                    per[i] += 1
    threads = [threading.Thread(target=run, args=(i, sc)) for i, sc in enumerate(consumers)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(40)
        assert sorted(got) == sorted(bodies)          # each exactly once, none lost
        assert sum(1 for n in per if n) >= 3          # more consumers than queues, several served
        assert all(not sc.receive(8, 5, wait_s=0.3) for sc in consumers[:2])
    finally:
        for sc in consumers:
            sc.shutdown()


def test_unacked_comes_back_with_reconsume_plus_one_and_stale_handle_is_refused(pop_cluster):
    c, admin = pop_cluster
    admin.create_topic("PopAgain", queues=1)
    _send(c, "PopAgain", [b"once"])
    with _consumer(c, "again", "PopAgain") as sc:
        first = wait_for(lambda: sc.receive(1, invisible_duration_s=1), 10, "the first delivery")[0]
        assert first.reconsume_times == 0 and first.receipt_handle
        assert not sc.receive(1, invisible_duration_s=1, wait_s=0.2)     # invisible meanwhile
        second = wait_for(lambda: sc.receive(1, invisible_duration_s=30, wait_s=1), 15, "the redelivery")[0]
        assert second.body == b"once" and second.reconsume_times == 1
        with pytest.raises(ReceiptHandleExpiredError):
            sc.ack(first)                                  # the old delivery's handle is stale
        sc.ack(second)
        with pytest.raises(ReceiptHandleExpiredError):
            sc.ack(second)
        assert not sc.receive(1, invisible_duration_s=1, wait_s=2.5)


def test_change_invisible_duration_extends_and_shortens(pop_cluster):
    c, admin = pop_cluster
    admin.create_topic("PopChange", queues=1)
    _send(c, "PopChange", [b"long", b"short"])
    with _consumer(c, "change", "PopChange") as sc:
        msgs = wait_for(lambda: sc.receive(2, invisible_duration_s=1.5), 10, "two messages")
        assert len(msgs) == 2
        by = {m.body: m for m in msgs}
        old = by[b"long"].receipt_handle
        new = sc.change_invisible_duration(by[b"long"], 60)      # extended past the 1.5 s
        assert new != old and by[b"long"].receipt_handle == new
        sc.change_invisible_duration(by[b"short"], 60)
        sc.change_invisible_duration(by[b"short"], 0.2)           # shortened: back soon
        back = wait_for(lambda: sc.receive(2, invisible_duration_s=60, wait_s=0.5), 10, "the shortened one")
        assert [m.body for m in back] == [b"short"] and back[0].reconsume_times == 1
        time.sleep(2)                                             # the 1.5 s of the first pop are long over
        assert not sc.receive(2, invisible_duration_s=60, wait_s=0.3)
        sc.ack(by[b"long"])
        sc.ack(back[0])


def test_forged_and_stale_handles_get_clear_codes_and_harm_nothing(pop_cluster):
    c, admin = pop_cluster
    admin.create_topic("PopForged", queues=1)
    broker = next(s for s in c.services if s.role == "broker").addr
    R, C = RequestCode, ResponseCode
    forged = ["", "garbage", "1 broker-a PopForged 0 x 1 1 0", "2 broker-a PopForged 0 0 1 1000 0",
              "1 broker-a PopForged 0 0 1 1000 0 extra", "1 ../.. PopForged 0 0 1 1000 0",
              "1 broker-a PopForged 99999 0 1 1000 0", "1 broker-a PopForged 0 0 1 99999999999 0", 7, None, ["x"]]
    t = Transport("pop-forger")
    try:
        for h in forged:
            got = t.call(broker, R.ACK_MESSAGE, {"g": "forger", "t": "PopForged", "h": [h]}, ok=tuple(C))
            assert got.code == C.INVALID_PARAMETER and "receipt handle" in got.remark, (h, got.code, got.remark)
        stale = "1 broker-a PopForged 0 5 1700000000000 1000 0"
        for code, ext in ((R.ACK_MESSAGE, {"h": [stale]}), (R.CHANGE_INVISIBLE_DURATION, {"h": stale, "it": 1000})):
            got = t.call(broker, code, {"g": "forger", "t": "PopForged", **ext}, ok=tuple(C))
            assert got.code == C.RECEIPT_HANDLE_EXPIRED and "not in flight" in got.remark, got.remark
        other = t.call(broker, R.ACK_MESSAGE, {"g": "forger", "t": "Elsewhere", "h": [stale]}, ok=tuple(C))
        assert other.code == C.INVALID_PARAMETER and "names topic" in other.remark
        assert t.call(broker, R.PING, {}).code == C.SUCCESS
    finally:
        t.close()


def test_max_retries_go_to_the_dlq(pop_cluster):
    c, admin = pop_cluster
    admin.create_topic("PopDoomed", queues=1)
    admin.set_group_config("doomed", retry_max_times=2)
    _send(c, "PopDoomed", [b"doomed"])
    seen = []
    with _consumer(c, "doomed", "PopDoomed") as sc:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(seen) < 3:
            seen.extend(m.reconsume_times for m in sc.receive(1, invisible_duration_s=0.5, wait_s=0.5))
        assert seen == [0, 1, 2]
        dlq = wait_for(lambda: admin.dlq_messages("doomed"), 60, "the DLQ copy")
        assert dlq[0].body == b"doomed" and dlq[0].properties.get("DLQ_ORIGIN_TOPIC") == "PopDoomed"
        assert not sc.receive(1, invisible_duration_s=1, wait_s=1)


def test_fifo_one_in_flight_per_message_group_in_order(pop_cluster):
    c, admin = pop_cluster
    admin.create_topic("PopFifo", queues=1, order=True)
    with Producer("pop-pg", namesrv=c.namesrv) as p:
        for i in range(4):
            for key in ("a", "b"):
                p.send(Message("PopFifo", f"{key}{i}".encode(), properties={SHARDING_KEY: key}))
    order = {"a": [], "b": []}
    with _consumer(c, "fifo", "PopFifo") as sc:
        first = sc.receive(10, invisible_duration_s=1)
        assert sorted(m.body for m in first) == [b"a0", b"b0"]      # one per message group
        assert not sc.receive(10, invisible_duration_s=1, wait_s=0.2)
        sc.ack(next(m for m in first if m.body == b"a0"))           # b0 is left to expire
        order["a"].append(b"a0")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (len(order["a"]) < 4 or len(order["b"]) < 4):
            for m in sc.receive(10, invisible_duration_s=1, wait_s=0.5):
                key = m.properties[SHARDING_KEY]
                if m.body == b"b0" and m.reconsume_times == 0:
                    continue
                order[key].append(m.body)
                sc.ack(m)
    assert order["a"] == [b"a0", b"a1", b"a2", b"a3"]
    assert order["b"] == [b"b0", b"b1", b"b2", b"b3"]


def test_pop_group_and_pull_group_each_get_everything(pop_cluster):
    c, admin = pop_cluster
    admin.create_topic("PopBoth", queues=2)
    bodies = sorted(b"both-%d" % i for i in range(20))
    _send(c, "PopBoth", bodies)
    popped = []
    with _consumer(c, "both-pop", "PopBoth") as sc:
        wait_for(lambda: popped.extend(m.body for m in sc.receive(8, 30) if sc.ack(m) is None) or
                 len(popped) >= 20, 20, "every message popped")
    pulled = []
    pc = PullConsumer("both-pull", namesrv=c.namesrv, consume_from="first")
    pc.subscribe("PopBoth")
    with pc.start():
        wait_for(lambda: pulled.extend(m.body for m in pc.poll(0.3)) or len(pulled) >= 20, 20, "every message pulled")
    assert sorted(popped) == bodies and sorted(pulled) == bodies


# consume_inline: the listener runs on the receive thread, with the same acks and retries
@pytest.mark.parametrize("inline", [False, True], ids=["pool", "inline"])
def test_push_consumer_pop_mode_acks_and_retries(pop_cluster, inline):
    c, admin = pop_cluster
    admin.create_topic("PopPush", queues=2)
    seen, lock, threads = [], threading.Lock(), set()

    def listener(msgs):
        m = msgs[0]
        with lock:
            seen.append((m.body, m.reconsume_times))
            threads.add(threading.current_thread().name)
        if m.body == b"flaky" and m.reconsume_times == 0:
            return ConsumeResult.later(seconds=0.5)
        return ConsumeResult.SUCCESS

    pc = PushConsumer("push-pop", namesrv=c.namesrv, consume_from="first", pop=True, pop_invisible_ms=20_000,
                      consume_inline=inline)
    pc.subscribe("PopPush")
    pc.register(listener)
    _send(c, "PopPush", [b"ok-1", b"ok-2", b"flaky"])
    with pc:
        wait_for(lambda: (b"flaky", 1) in seen and len(seen) >= 4, 20, "three messages and one retry")
        time.sleep(1)
    assert sorted(seen) == [(b"flaky", 0), (b"flaky", 1), (b"ok-1", 0), (b"ok-2", 0)]
    assert (threads == {"pop-push-pop"}) is inline


def test_async_simple_consumer_acks_each_message_and_an_unacked_one_comes_back(pop_cluster):
    import asyncio

    from quiver.aio import AsyncSimpleConsumer
    c, admin = pop_cluster
    admin.create_topic("PopAio", queues=2)
    _send(c, "PopAio", [b"a-%d" % i for i in range(10)])

    async def main():
        got, skipped = [], None
        async with AsyncSimpleConsumer("aio-pop", namesrv=c.namesrv, consume_from="first",
                                       await_duration_s=0.5) as sc:
            sc.subscribe("PopAio")
            async for msg in sc.messages(4, invisible_duration_s=1):
                if skipped is None:
                    skipped = msg.body              # not acked: back after its invisible second
                    continue
                await sc.ack(msg)
                got.append((msg.body, msg.reconsume_times))
                if len(got) == 10:
                    break
        return got, skipped
    got, skipped = asyncio.run(asyncio.wait_for(main(), 60))
    assert sorted(b for b, _ in got) == sorted(b"a-%d" % i for i in range(10))
    assert (skipped, 1) in got
