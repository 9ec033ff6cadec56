"""SDK misuse gets a clear error, not silence: poll() on a missing topic, send_orderly without a key;
and clients shut down without a traceback."""

import logging
import time

import pytest

from quiver import Admin, ConsumeResult, Message, Producer, PullConsumer, PushConsumer
from quiver.errors import MessageIllegalError, QuiverError, TopicNotExistError

# an exception that ends a client thread fails the test, not only a warning
pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")


def test_poll_waits_for_a_missing_topic_and_consumes_it_once_created(cluster):
    pc = PullConsumer("g-waits", namesrv=cluster.namesrv, consume_from="first")
    pc.subscribe("%DLQ%billing")     # a dead-letter topic before the first dead letter
    with pc:
        assert pc.poll(1.0) == [] and pc.stats()["missing_topics"] == ["%DLQ%billing"]
        with Admin(namesrv=cluster.namesrv) as admin, Producer("pg", namesrv=cluster.namesrv) as p:
            admin.create_topic("%DLQ%billing", queues=1)
            sent = p.send(Message("%DLQ%billing", b"dead")).msg_id
            got, deadline = [], time.monotonic() + 15
            while not got and time.monotonic() < deadline:
                got = pc.poll(0.3)
        assert pc.stats()["missing_topics"] == []
    assert [m.msg_id for m in got] == [sent]


def test_poll_on_a_missing_topic_raises_until_it_is_created(cluster):
    pc = PullConsumer("g-missing", namesrv=cluster.namesrv, consume_from="first", wait_for_topic=False)
    pc.subscribe("NoSuchTopic")
    with pc:
        t0 = time.monotonic()
        with pytest.raises(TopicNotExistError, match="NoSuchTopic"):
            pc.poll(5.0)
        assert time.monotonic() - t0 < 1.0   # nothing can come: no wait
        with Admin(namesrv=cluster.namesrv) as admin, Producer("pg", namesrv=cluster.namesrv) as p:
            admin.create_topic("NoSuchTopic", queues=1)
            sent = p.send(Message("NoSuchTopic", b"now it exists")).msg_id
            got, deadline = [], time.monotonic() + 15
            while not got and time.monotonic() < deadline:
                try:
                    got = pc.poll(0.3)
                except TopicNotExistError:
                    time.sleep(0.1)   # the rebalance the raise asked for has not run yet
    assert [m.msg_id for m in got] == [sent]


def test_poll_returns_messages_of_existing_topics_before_reporting_a_missing_one(cluster):
    with Producer("pg", namesrv=cluster.namesrv) as p:
        sent = p.send(Message("Exists", b"x")).msg_id
        pc = PullConsumer("g-mixed", namesrv=cluster.namesrv, consume_from="first", wait_for_topic=False)
        pc.subscribe("Exists")
        pc.subscribe("Missing")
        with pc:
            got, deadline = [], time.monotonic() + 10
            while not got and time.monotonic() < deadline:
                try:
                    got = pc.poll(0.5)
                except TopicNotExistError:
                    pass
            assert [m.msg_id for m in got] == [sent]
            with pytest.raises(TopicNotExistError, match="'Missing'"):
                pc.poll(0.2)


@pytest.mark.parametrize("key", [None, "", "   "])
def test_send_orderly_needs_a_sharding_key(cluster, key):
    with Producer("pg", namesrv=cluster.namesrv) as p:
        with pytest.raises(MessageIllegalError, match="sharding key"):
            p.send_orderly(Message("Orders", b"step"), key)
        assert p.send_orderly(Message("Orders", b"step"), 0).queue_id >= 0


def test_shutdown_leaves_no_traceback(cluster, caplog):
    caplog.set_level(logging.DEBUG, logger="quiver")
    with Producer("pg", namesrv=cluster.namesrv) as p:
        for i in range(8):
            p.send(Message("Bye", f"m{i}".encode()))
    for _ in range(4):
        producer = Producer("pg", namesrv=cluster.namesrv).start()
        pulls = []
        for _ in range(4):  # members leaving one after another: the others rebalance while shutting down
            pc = PullConsumer("g-bye", namesrv=cluster.namesrv, consume_from="first", rebalance_interval_ms=200)
            pc.subscribe("Bye")
            pulls.append(pc.start())
        push = PushConsumer("g-bye-push", namesrv=cluster.namesrv, consume_from="first")
        push.subscribe("Bye", "*")
        push.register(lambda msgs, ctx=None: ConsumeResult.SUCCESS)
        push.start()
        for pc in pulls:
            try:
                pc.poll(0.2)
            except QuiverError:
                pass
        for _ in range(100):
            producer.send_async(Message("Bye", b"late"))
        producer.shutdown()
        for client in [*pulls, push]:
            client.shutdown()
    time.sleep(0.5)  # threads that were still finishing a call
    tracebacks = [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()]
    assert tracebacks == [], [r.getMessage() for r in tracebacks]
