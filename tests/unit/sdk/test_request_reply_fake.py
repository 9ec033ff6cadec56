"""Request-reply against real brokers on quiver.testing's fake network: correlation, the
properties of a request and its reply, timeouts, late and unknown replies, the broker's checks."""

import asyncio
import threading
import time

import pytest

from quiver import ConsumeResult, Message, Producer, PushConsumer
from quiver.aio import AsyncProducer
from quiver.client.message import MessageExt
from quiver.errors import ClientError, MessageIllegalError, QuiverError, RequestTimeoutError
from quiver.testing import stub_cluster, wait_until
from quiver.wire import protocol
from quiver.wire import requests as rq
from quiver.wire.codes import RequestCode, ResponseCode
from quiver.wire.properties import CLUSTER, CORRELATION_ID, MSG_TYPE, REPLY_TO_CLIENT, TTL


@pytest.fixture
def cluster():
    with stub_cluster(brokers=2) as c:
        c.admin().create_topic("Ask", queues=2)
        yield c


def _replier(cluster, delay_s=0.0):
    """A PushConsumer of Ask answering each request with its body reversed (after `delay_s`)."""
    replier = cluster.client(Producer, "rpg").start()
    consumer = cluster.client(PushConsumer, "rcg", consume_from="first")
    consumer.subscribe("Ask", "*")
    seen = []

    def on(msgs):
        for m in msgs:
            seen.append(m)
            time.sleep(delay_s)
            replier.reply(m, m.body[::-1], properties={"who": "replier"})
        return ConsumeResult.SUCCESS
    consumer.register(on)
    consumer.start()
    return replier, consumer, seen


def test_each_request_gets_its_own_reply(cluster):
    replier, consumer, seen = _replier(cluster)
    try:
        with cluster.client(Producer, "qpg") as p:
            one = p.request(Message("Ask", b"abc"), timeout=10)
            assert one.body == b"cba" and one.properties["who"] == "replier"
            assert one.properties[MSG_TYPE] == "reply" and one.topic == "DefaultCluster_REPLY_TOPIC"
            futs = {i: p.request_async(Message("Ask", b"req-%d" % i), timeout=10) for i in range(20)}
            for i, f in futs.items():
                assert f.result(15).body == (b"req-%d" % i)[::-1]
            # delivery is at least once: a request seen twice is answered twice, the second late
            assert wait_until(lambda: p.requests.late_replies == len(seen) - 21, 10)
            assert p.requests.replies == 21
        req = seen[0]
        assert req.properties[REPLY_TO_CLIENT] == p.client_id and req.properties[CLUSTER] == "DefaultCluster"
        assert req.properties[TTL] == "10000" and len(req.properties[CORRELATION_ID]) == 32
        assert one.properties[CORRELATION_ID] == req.properties[CORRELATION_ID]
        assert len({m.properties[CORRELATION_ID] for m in seen}) == 21
        pushed = sum(b.service.counters["replies_pushed"] for b in cluster.brokers.values())
        assert pushed == len(seen)
    finally:
        consumer.shutdown()
        replier.shutdown()


def test_a_request_without_reply_times_out_and_its_late_reply_is_dropped(cluster):
    replier, consumer, _ = _replier(cluster, delay_s=1.0)
    try:
        with cluster.client(Producer, "qpg") as p:
            t0 = time.monotonic()
            with pytest.raises(RequestTimeoutError):
                p.request(Message("Ask", b"slow"), timeout=0.3)
            assert time.monotonic() - t0 < 5
            assert wait_until(lambda: p.requests.late_replies == 1, 15)
            assert p.requests.timeouts == 1 and p.requests.replies == 0
    finally:
        consumer.shutdown()
        replier.shutdown()


def test_a_reply_nobody_asked_for_is_dropped_and_counted(cluster):
    with cluster.client(Producer, "qpg") as p, cluster.client(Producer, "rpg") as r:
        p.request_async(Message("Ask", b"never answered"), timeout=30)   # registers p with the brokers
        fake = MessageExt("Ask", b"", None, [], {CORRELATION_ID: "f" * 32, REPLY_TO_CLIENT: p.client_id,
                                                  CLUSTER: "DefaultCluster"}, "id", None, "broker-a", 0, 0, 0, 0, 0, 0)
        assert r.reply(fake, b"who asked?").queue_id == 0
        assert wait_until(lambda: p.requests.unknown_replies == 1, 10)
        assert p.requests.replies == 0


def test_reply_to_a_message_that_is_no_request_says_so(cluster):
    with cluster.client(Producer, "rpg") as r:
        plain = MessageExt("Ask", b"x", None, [], {}, "ID1", None, "broker-a", 0, 0, 0, 0, 0, 0)
        with pytest.raises(MessageIllegalError, match="not a request"):
            r.reply(plain, b"no")


def test_the_broker_refuses_a_reply_without_correlation_or_to_another_topic(cluster):
    addr = cluster.broker_addrs["broker-a"]
    props = f"{REPLY_TO_CLIENT}\x01someone\x02"
    for topic, want in (("DefaultCluster_REPLY_TOPIC", "CORRELATION_ID"), ("Ask", "reply goes to")):
        req = rq.SendMessage(topic=topic, queue_id=0, metas=([0], [props]))
        env = cluster.network.call(addr, RequestCode.SEND_REPLY_MESSAGE, req.ext(), [b"body"], ok=(0, 13))
        assert env.code == ResponseCode.MESSAGE_ILLEGAL and want in env.remark


def test_shutdown_fails_the_requests_still_waiting(cluster):
    p = cluster.client(Producer, "qpg").start()
    fut = p.request_async(Message("Ask", b"x"), timeout=30)
    threading.Thread(target=p.shutdown).start()
    with pytest.raises(ClientError):
        fut.result(10)


def test_a_timeout_out_of_range_is_refused(cluster):
    with cluster.client(Producer, "qpg") as p:
        for bad in (0, -1, 10 ** 9):
            with pytest.raises(QuiverError, match="timeout"):
                p.request(Message("Ask", b"x"), timeout=bad)


def test_asyncio_requests_and_replies_are_awaited(cluster):
    consumer = cluster.client(PushConsumer, "arcg", consume_from="first")
    consumer.subscribe("Ask", "*")

    async def main():
        async with cluster.client(AsyncProducer, "aqpg") as asker, cluster.client(AsyncProducer, "arpg") as replier:
            loop = asyncio.get_running_loop()

            def on(msgs):   # a consume thread: each reply awaited on the loop
                for m in msgs:
                    asyncio.run_coroutine_threadsafe(replier.reply(m, b"re:" + m.body), loop).result(10)
                return ConsumeResult.SUCCESS
            consumer.register(on)
            consumer.start()
            replies = await asyncio.gather(*(asker.request(Message("Ask", b"%d" % i), timeout=10) for i in range(10)))
            with pytest.raises(RequestTimeoutError):
                await asker.request(Message("Nobody", b"x"), timeout=0.2)
            return replies
    try:
        replies = asyncio.run(main())
    finally:
        consumer.shutdown()
    assert [r.body for r in replies] == [b"re:%d" % i for i in range(10)]


def test_a_reply_for_a_requester_the_broker_does_not_know_is_stored_and_counted(cluster):
    gone = MessageExt("Ask", b"", None, [], {CORRELATION_ID: "e" * 32, REPLY_TO_CLIENT: "host@1#gone",
                                             CLUSTER: "DefaultCluster"}, "id", None, "broker-b", 0, 0, 0, 0, 0, 0)
    with cluster.client(Producer, "rpg") as r:
        sent = r.reply(gone, b"to nobody")
    counters = cluster.broker("broker-b").service.counters
    assert sent.broker == "broker-b" and sent.topic == "DefaultCluster_REPLY_TOPIC"
    assert counters["reply_push_failed"] == 1 and counters["replies_stored"] == 1 and counters["replies_pushed"] == 0
    assert cluster.broker("broker-b").store.max_offset("DefaultCluster_REPLY_TOPIC", 0) == 1


def test_a_malformed_reply_push_is_dropped_and_counted(cluster):
    with cluster.client(Producer, "qpg") as p:
        p.request_async(Message("Ask", b"x"), timeout=30)
        for ext, body in (({"b": "broker-a"}, b"not a record"), ({"b": 5}, b""), ({"b": "broker-a"}, None)):
            frames = protocol.request(RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT, 1, ext, [] if body is None else [body])
            p.requests.on_push(protocol.decode(frames))
        assert p.requests.unknown_replies == 3 and p.requests.replies == 0


def test_a_plain_producer_is_online_on_the_brokers_it_sends_to():
    from quiver import Message, Producer
    from quiver.testing import stub_cluster, wait_until
    with stub_cluster(brokers=2) as c:
        c.admin().create_topic("Online", queues=1, brokers=["broker-a"])
        with c.client(Producer, "pg-online") as p:
            assert p._heartbeat_brokers() == {}              # no route yet: no broker asked at start
            p.send(Message("Online", b"x"))
            assert set(p._heartbeat_brokers()) == {"broker-a"}
            p._send_heartbeats()                               # the 30 s loop's step (sent, not awaited)
            registry = c.broker("broker-a").clients
            assert wait_until(lambda: p.client_id in registry.producers.get("pg-online", {}))
            assert "pg-online" not in c.broker("broker-b").clients.producers
        assert wait_until(lambda: p.client_id not in registry.producers.get("pg-online", {}))  # left at shutdown
