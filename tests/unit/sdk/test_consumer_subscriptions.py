"""Subscriptions of running consumers on quiver.testing's stub cluster: a subscribed topic that does
not exist yet is waited for (logged once, in stats(), consumed once created) unless
wait_for_topic=False; pull consumers, sync and asyncio, subscribe and unsubscribe while running
(RocketMQ's lite pull consumer: an unsubscribed topic's queues commit and are given up)."""

import asyncio
import logging
import threading
import time

import pytest

from quiver import ConsumeResult, Message, Producer, PullConsumer, PushConsumer
from quiver.aio import AsyncPullConsumer
from quiver.errors import TopicNotExistError
from quiver.testing import stub_cluster, wait_until

DLQ = "%DLQ%billing"


@pytest.fixture
def cl():
    with stub_cluster(broker_options={"auto_create_topics": False}) as c:
        c.admin().create_topic("Orders", queues=2)
        c.admin().create_topic("Refunds", queues=2)
        yield c


def _send(cl, topic, n, prefix="m"):
    with cl.client(Producer, "pg") as p:
        for i in range(n):
            p.send(Message(topic, f"{prefix}{i}".encode()))


def _poll_until(c, want: set, timeout=10.0):
    got = set()
    assert wait_until(lambda: got.update(m.body.decode() for m in c.poll(0.05)) or got >= want, timeout), got
    return got


def _waits_logged(caplog, topic):
    return sum(1 for r in caplog.records if "does not exist" in r.getMessage() and topic in r.getMessage())


def test_a_pull_consumer_waits_for_a_topic_that_does_not_exist_yet(cl, caplog):
    caplog.set_level(logging.INFO)
    with cl.client(PullConsumer, "billing-dlq", consume_from="first") as c:
        c.subscribe(DLQ)
        t0 = time.monotonic()
        for _ in range(3):   # no TopicNotExistError: nothing yet, as at the end of a queue
            assert c.poll(0.5) == []
        assert time.monotonic() - t0 >= 1.2 and c.stats()["missing_topics"] == [DLQ]
        assert _waits_logged(caplog, DLQ) == 1      # once, though looked for every second
        cl.admin().create_topic(DLQ, queues=1)
        _send(cl, DLQ, 2, "dead")
        assert _poll_until(c, {"dead0", "dead1"}) == {"dead0", "dead1"}
        assert c.stats()["missing_topics"] == []
    assert _waits_logged(caplog, DLQ) == 1


def test_wait_for_topic_false_raises_instead(cl):
    with cl.client(PullConsumer, "strict", wait_for_topic=False) as c:
        c.subscribe("NoSuchTopic")
        with pytest.raises(TopicNotExistError, match="NoSuchTopic"):
            c.poll(0.2)
    push = cl.client(PushConsumer, "strict-push", wait_for_topic=False)
    push.subscribe("NoSuchTopic")
    push.register(lambda msgs: ConsumeResult.SUCCESS)
    with pytest.raises(TopicNotExistError, match="NoSuchTopic"):
        push.start()
    with pytest.raises(ValueError, match="wait_for_topic"):
        PullConsumer("g", namesrv=cl.namesrv, wait_for_topic="no")


def test_a_push_consumer_waits_for_a_topic_and_consumes_it_once_created(cl, caplog):
    caplog.set_level(logging.INFO)
    seen, lock = [], threading.Lock()

    def listener(msgs):
        with lock:
            seen.extend(m.body.decode() for m in msgs)
        return ConsumeResult.SUCCESS
    c = cl.client(PushConsumer, "billing-dlq-push", consume_from="first")
    c.subscribe(DLQ)
    c.register(listener)
    with c:
        assert wait_until(lambda: c.stats()["missing_topics"] == [DLQ])
        time.sleep(1.5)
        assert _waits_logged(caplog, DLQ) == 1
        cl.admin().create_topic(DLQ, queues=1)
        _send(cl, DLQ, 3, "dead")
        assert wait_until(lambda: len(seen) >= 3, 10)
        assert c.stats()["missing_topics"] == []


def test_a_pull_consumer_subscribes_and_unsubscribes_while_running(cl):
    _send(cl, "Orders", 10, "o")
    with cl.client(PullConsumer, "live", consume_from="first", auto_commit=False) as c:
        c.subscribe("Orders")
        assert _poll_until(c, {f"o{i}" for i in range(10)})
        c.subscribe("Refunds")                       # while running: its queues are taken at once
        assert {mq.topic for mq in c.assignment()} == {"Orders", "Refunds"}
        _send(cl, "Refunds", 4, "r")
        assert _poll_until(c, {f"r{i}" for i in range(4)})
        c.unsubscribe("Orders")                      # committed first, then given up
        assert {mq.topic for mq in c.assignment()} == {"Refunds"}
        meta = cl.broker().metadata
        assert sum(meta.get_offset("live", "Orders", q) or 0 for q in (0, 1)) == 10
        _send(cl, "Orders", 3, "late")
        _send(cl, "Refunds", 1, "r-late")
        got = _poll_until(c, {"r-late0"})
        time.sleep(0.3)
        got.update(m.body.decode() for m in c.poll(0.1))
        assert not any(b.startswith("late") for b in got)
        c.unsubscribe("Nope")                        # unknown: nothing happens
        assert c.stats()["missing_topics"] == []


def test_unsubscribe_drops_what_is_buffered_of_the_topic(cl):
    _send(cl, "Orders", 6, "o")
    with cl.client(PullConsumer, "buffered", consume_from="first", auto_commit=False) as c:
        c.subscribe("Orders")
        assert wait_until(lambda: sum(st.buffered for st in c._queues.values()) == 6)
        c.unsubscribe("Orders")
        assert c.poll(0.1) == [] and c.assignment() == []
    meta = cl.broker().metadata   # nothing was handed out: nothing committed past the start
    assert all((meta.get_offset("buffered", "Orders", q) or 0) == 0 for q in (0, 1))


def test_async_pull_consumer_subscribes_unsubscribes_and_waits_while_running(cl):
    _send(cl, "Orders", 4, "o")

    async def main():
        c = cl.client(AsyncPullConsumer, "aio-live", consume_from="first")
        c.subscribe("Orders")
        async with c:
            got = set()
            while len(got) < 4:
                got.update(m.body.decode() for m in await c.poll(1.0))
            c.subscribe(DLQ)                          # does not exist yet: waited for, no raise
            c.subscribe("Refunds")
            await asyncio.sleep(0.3)
            assert await c.poll(0.3) == [] and c.stats()["missing_topics"] == [DLQ]
            _send(cl, "Refunds", 2, "r")
            while not {"r0", "r1"} <= got:
                got.update(m.body.decode() for m in await c.poll(1.0))
            c.unsubscribe("Orders")
            for _ in range(50):
                if {mq.topic for mq in c.assignment()} == {"Refunds"}:
                    break
                await asyncio.sleep(0.1)
            assert {mq.topic for mq in c.assignment()} == {"Refunds"}
    asyncio.run(main())


def test_a_push_consumer_unsubscribes_while_running(cl):
    seen, lock = [], threading.Lock()

    def listener(msgs):
        with lock:
            seen.extend(m.body.decode() for m in msgs)
        return ConsumeResult.SUCCESS
    _send(cl, "Orders", 4, "o")
    c = cl.client(PushConsumer, "push-live", consume_from="first", commit_interval_ms=50)
    c.subscribe("Orders")
    c.subscribe("Refunds")
    c.register(listener)
    with c:
        assert wait_until(lambda: len(seen) >= 4)
        c.unsubscribe("Orders")
        assert wait_until(lambda: {mq.topic for mq in c.assignment()} == {"Refunds"})
        meta = cl.broker().metadata
        assert sum(meta.get_offset("push-live", "Orders", q) or 0 for q in (0, 1)) == 4   # committed on release
        _send(cl, "Orders", 2, "late")
        _send(cl, "Refunds", 2, "r")
        assert wait_until(lambda: {"r0", "r1"} <= set(seen))
        time.sleep(0.3)
    assert not any(b.startswith("late") for b in seen)
