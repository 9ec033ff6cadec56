"""The producer's shortcuts for plain messages give what the general path gives."""

import pytest

from quiver import Message, Producer
from quiver.errors import MessageIllegalError
from quiver.wire.properties import UNIQ_KEY
from quiver.wire.property_string import format_properties, parse_properties


@pytest.fixture
def producer():
    return Producer("pg", namesrv="127.0.0.1:1")   # never started: _encode needs no broker


def test_a_plain_message_carries_its_id_alone_as_the_general_path_writes_it(producer):
    msg_id, props = producer._encode(Message("T", b"x"))
    assert props == format_properties({UNIQ_KEY: msg_id})
    _, with_props = producer._encode(Message("T", b"x", properties={"a": "1"}))
    assert parse_properties(with_props).keys() == {UNIQ_KEY, "a"}
    _, traced_sys = producer._encode(Message("T", b"x"), {"CORRELATION_ID": "c"})
    assert parse_properties(traced_sys)["CORRELATION_ID"] == "c"


@pytest.mark.parametrize("body, why", [(b"", "empty"), ("text", "must be bytes"), (b"x" * 101, "limit")])
def test_bodies_the_check_refuses_are_refused_on_the_short_path_too(producer, body, why):
    producer.max_message_bytes = 100
    with pytest.raises(MessageIllegalError, match=why):
        producer._encode(Message("T", body))


def test_a_bytearray_or_a_tombstone_takes_the_full_check(producer):
    assert producer._encode(Message("T", bytearray(b"x")))[1]
    assert UNIQ_KEY in parse_properties(producer._encode(Message("T", b"", keys=["k"]))[1])


def test_an_avoided_broker_is_forgotten_once_its_time_is_served(producer):
    producer._note_latency("b1", 0, failed=True)
    assert not producer._available("b1")
    producer._avoid["b1"] = 0.0   # its time served
    assert producer._available("b1") and not producer._avoid


def test_a_queue_buffer_counts_its_bytes_through_partial_and_whole_takes(producer, monkeypatch):
    from quiver.client.base import MessageQueue
    from quiver.client.producer import _Batcher
    sent = []
    monkeypatch.setattr(producer, "_dispatch", lambda mq, addr, items, b: sent.append([i[2] for i in items]))
    producer._batch_max_messages, producer._batch_max_bytes = 3, 10
    b = _Batcher()
    for body in (b"aaaa", b"bbbb", b"cccc", b"d", b"e"):
        b.items.append(("id", "", body, 0, None, 0))
        b.bytes += len(body)
    mq = MessageQueue("T", "b", 0)
    producer._next_batch(mq, "a:1", b)      # over the byte bound: the first two only
    assert sent == [[b"aaaa", b"bbbb"]] and b.bytes == 6
    producer._next_batch(mq, "a:1", b)      # the rest fits both bounds: all of it
    assert sent[-1] == [b"cccc", b"d", b"e"] and b.items == [] and b.bytes == 0
