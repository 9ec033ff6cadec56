"""RocketMQ API parity in the sync SDK: send to a chosen queue or by selector, a listener's own
retry delay (ConsumeResult.later), Message.json. Real brokers on quiver.testing's fake network."""

import orjson
import pytest

from quiver import ConsumeResult, Message, Producer, PushConsumer
from quiver.client.base import MessageQueue
from quiver.client.message import ReconsumeLater
from quiver.errors import ClientError, MessageIllegalError
from quiver.testing import stub_cluster, wait_until
from quiver.wire.validation import SCHEDULE_TOPIC, TIMER_TOPIC


@pytest.fixture
def two():
    with stub_cluster(brokers=2) as c:
        c.admin().create_topic("Orders", queues=2)
        yield c


def test_message_json_round_trip():
    m = Message.json("Orders", {"id": "ö-1", "qty": 2, "tags": []}, keys=["ö-1"], tags="T")
    assert m.json() == {"id": "ö-1", "qty": 2, "tags": []} and m.keys == ["ö-1"] and m.tags == "T"
    assert Message.json("Orders", {}).body == b"{}" and Message.json("Orders", None).json() is None
    with pytest.raises(ValueError):
        Message("Orders", b"\xff not json").json()
    with pytest.raises(TypeError):
        Message.json("Orders", object())


def test_consume_result_later_checks_its_arguments():
    assert ConsumeResult.later(delay_level=5) == ReconsumeLater(delay_level=5)
    assert ConsumeResult.later(seconds=1.5) == ReconsumeLater(delay_ms=1500)
    for bad in ({}, {"delay_level": 1, "seconds": 1}, {"delay_level": 0}, {"delay_level": True},
                {"seconds": 0}, {"seconds": -1}, {"seconds": 10 ** 9}, {"seconds": "5"}):
        with pytest.raises(ValueError):
            ConsumeResult.later(**bad)


def test_send_to_a_queue_and_by_selector(two):
    seen = []

    def selector(mqs, msg, arg):
        seen.append((len(mqs), msg.topic, arg))
        return mqs[arg % len(mqs)]
    with two.client(Producer, "pg") as p:
        mq = MessageQueue("Orders", "broker-b", 0)
        r = p.send(Message("Orders", b"x"), queue=mq)
        by_sel = [p.send(Message("Orders", b"y"), selector=selector, arg=5) for _ in range(3)]
        fut = p.send_async(Message("Orders", b"z"), queue=mq)
        assert (fut.result(5).broker, fut.result(5).queue_id) == ("broker-b", 0)
        with pytest.raises(MessageIllegalError):
            p.send(Message("Orders", b"x"), queue=MessageQueue("Other", "broker-b", 0))
        with pytest.raises(MessageIllegalError):
            p.send(Message("Orders", b"x"), selector=lambda mqs, msg, arg: None)
        with pytest.raises(ClientError):
            p.send(Message("Orders", b"x"), queue=mq, selector=selector)
    assert (r.broker, r.queue_id) == ("broker-b", 0)
    assert len({(x.broker, x.queue_id) for x in by_sel}) == 1 and seen[0] == (4, "Orders", 5)


def _parked(cluster, topic, queue_id):
    return sum(app.store.max_offset(topic, queue_id) for app in cluster.brokers.values())


@pytest.mark.parametrize("later, topic, queue_id", [(ConsumeResult.later(delay_level=5), SCHEDULE_TOPIC, 4),
                                                    (ConsumeResult.later(seconds=30), TIMER_TOPIC, 0)])
def test_a_listener_chooses_the_retry_delay(two, later, topic, queue_id):
    calls = []

    def fn(msgs):
        calls.append(msgs[0].body)
        return later
    with two.client(Producer, "pg") as p:
        p.send(Message("Orders", b"job"))
    with two.client(PushConsumer, "cg", consume_from="first") as c:
        c.subscribe("Orders")
        c.register(fn)
        c.start()
        assert wait_until(lambda: _parked(two, topic, queue_id) == 1, 10)
    assert calls == [b"job"]
