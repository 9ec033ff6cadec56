"""The broker's send and pull paths (sending.py, pulling.py) through its real handler table and
service loop, on quiver.testing's fake network: raw typed requests, no SDK client in between."""

import time

import pytest

from quiver.wire import requests as rq
from quiver.wire.codes import RequestCode, ResponseCode
from quiver.errors import InvalidParameterError, MessageIllegalError, NoPermissionError, TopicNotExistError
from quiver.wire.names import NOT_ALLOWED_SEND
from quiver.client.message import decode_messages
from quiver.testing import stub_cluster, wait_until

TOPIC = "Sp"


@pytest.fixture(params=["async", "sync"])
def broker(request):
    """(network, broker address, broker App) with topic Sp of 2 queues; async and sync flush."""
    with stub_cluster(broker_options={"flush": request.param}) as c:
        c.admin().create_topic(TOPIC, queues=2)
        yield c.network, c.broker_addrs["broker-a"], c.broker()


def _send(net, addr, bodies, queue_id=0, topic=TOPIC, props=None, code=None):
    props = props or ["TAGS\x01A\x02"] * len(bodies)
    ext = {"t": topic, "q": queue_id, "m": [[0, p] for p in props]}
    if len(bodies) > 1:
        ext["l"] = [len(b) for b in bodies]
        bodies = [b"".join(bodies)]
    code = code or (RequestCode.SEND_BATCH_MESSAGE if "l" in ext else RequestCode.SEND_MESSAGE)
    return net.call(addr, code, ext, bodies).ext


def _pull(net, addr, offset, queue_id=0, ok=(0, 19, 20, 21), **kw):
    req = rq.PullMessage(topic=TOPIC, queue_id=queue_id, offset=offset, **kw)
    return net.call(addr, req, ok=ok, timeout=10)


def test_send_then_pull(broker):
    net, addr, app = broker
    out = _send(net, addr, [b"hello"])
    assert (out["t"], out["q"], out["o"]) == (TOPIC, 0, 0) and len(out["p"]) == 1
    env = _pull(net, addr, 0)
    assert env.code == ResponseCode.SUCCESS and rq.PullReply.decode(env.ext).next == 1
    [m] = decode_messages(env.bodies[0], "broker-a")
    assert (m.body, m.tags, m.queue_offset, m.commit_log_offset) == (b"hello", "A", 0, out["p"][0])
    assert app.counters["put_messages"] == 1 and app.counters["pulled_messages"] == 1


def test_a_batch_is_one_put_with_consecutive_offsets(broker):
    net, addr, app = broker
    _send(net, addr, [b"first"])
    out = _send(net, addr, [f"m{i}".encode() for i in range(20)], queue_id=1)
    assert out["o"] == 0 and len(out["p"]) == 20 and out["p"] == sorted(out["p"])
    env = _pull(net, addr, 0, queue_id=1, max_msgs=32)
    assert [m.body for m in decode_messages(env.bodies[0], "b")] == [f"m{i}".encode() for i in range(20)]
    assert [m.queue_offset for m in decode_messages(env.bodies[0], "b")] == list(range(20))


def test_pull_waits_for_a_put_and_answers_at_once_then(broker):
    net, addr, app = broker
    _send(net, addr, [b"old"])
    t0 = time.monotonic()
    fut = net.call_future(addr, rq.PullMessage(topic=TOPIC, queue_id=0, offset=1, suspend_ms=10_000),
                               timeout=15)
    assert wait_until(lambda: app.puller.held_count() == 1)
    assert not fut.done()
    _send(net, addr, [b"new"])
    env = fut.result(5)
    assert env.code == ResponseCode.SUCCESS
    assert [m.body for m in decode_messages(env.bodies[0], "b")] == [b"new"]
    assert time.monotonic() - t0 < 5 and app.puller.held_count() == 0


def test_a_held_pull_ends_not_found_after_its_suspend_time(broker):
    net, addr, app = broker
    _send(net, addr, [b"only"])
    t0 = time.monotonic()
    env = _pull(net, addr, 1, suspend_ms=100)
    assert env.code == ResponseCode.PULL_NOT_FOUND and rq.PullReply.decode(env.ext).next == 1
    assert 0.09 <= time.monotonic() - t0 < 5
    assert _pull(net, addr, 1).code == ResponseCode.PULL_NOT_FOUND   # suspend 0: answered at once


def test_a_put_to_another_queue_does_not_wake_a_held_pull(broker):
    net, addr, app = broker
    fut = net.call_future(addr, rq.PullMessage(topic=TOPIC, queue_id=0, offset=0, suspend_ms=300), timeout=5)
    assert wait_until(lambda: app.puller.held_count() == 1)
    _send(net, addr, [b"elsewhere"], queue_id=1)
    assert fut.result(5).code == ResponseCode.PULL_NOT_FOUND


@pytest.mark.parametrize("offset, stored, nxt", [(100, 2, 2), (5, 0, 0)])
def test_offsets_outside_the_queue_are_moved(broker, offset, stored, nxt):
    net, addr, _ = broker
    if stored:
        _send(net, addr, [b"a", b"b"])
    env = _pull(net, addr, offset, suspend_ms=5000)   # answered at once, not held
    assert env.code == ResponseCode.PULL_OFFSET_MOVED
    assert rq.PullReply.decode(env.ext).next == nxt


def test_tag_filter_on_the_broker(broker):
    net, addr, _ = broker
    _send(net, addr, [b"a1", b"b1", b"a2"], props=["TAGS\x01A\x02", "TAGS\x01B\x02", "TAGS\x01A\x02"])
    env = _pull(net, addr, 0, expression="A")
    assert [m.body for m in decode_messages(env.bodies[0], "b")] == [b"a1", b"a2"]
    env = _pull(net, addr, 0, expression="C")
    assert env.code == ResponseCode.PULL_RETRY_IMMEDIATELY and rq.PullReply.decode(env.ext).next == 3


def test_a_pull_commits_the_offset_it_carries_forward_only(broker):
    net, addr, app = broker
    _send(net, addr, [b"a", b"b"])
    _pull(net, addr, 0, group="g", commit_offset=2)
    _pull(net, addr, 0, group="g", commit_offset=1)
    assert app.metadata.get_offset("g", TOPIC, 0) == 2


def test_send_checks(broker):
    net, addr, app = broker
    with pytest.raises(MessageIllegalError, match="empty"):
        _send(net, addr, [b""])
    with pytest.raises(InvalidParameterError, match="not a write queue"):
        _send(net, addr, [b"x"], queue_id=7)
    with pytest.raises(InvalidParameterError, match="exactly one message"):
        _send(net, addr, [b"x", b"y"], code=RequestCode.SEND_MESSAGE)
    with pytest.raises(TopicNotExistError):
        net.call(addr, rq.PullMessage(topic="Unknown", queue_id=0, offset=0))
    assert app.counters.get("put_messages", 0) == 0


def test_a_delayed_message_is_parked_in_the_schedule_topic(broker):
    net, addr, app = broker
    out = _send(net, addr, [b"later"], props=["DELAY\x013\x02"])
    assert (out["t"], out["q"]) == ("SCHEDULE_TOPIC_XXXX", 2)
    assert app.store.max_offset(TOPIC, 0) == 0    # not visible to consumers until the scheduler re-puts it


def test_auto_create_off_refuses_unknown_topics():
    with stub_cluster(broker_options={"auto_create_topics": False}) as c:
        with pytest.raises(TopicNotExistError, match="auto-create"):
            _send(c.network, c.broker_addrs["broker-a"], [b"x"], topic="Fresh")


def test_a_send_to_a_system_or_misnamed_topic_is_refused(broker):
    net, addr, app = broker
    for topic, error in [*((t, NoPermissionError) for t in sorted(NOT_ALLOWED_SEND)),
                         ("bad topic", MessageIllegalError), ("t" * 300, MessageIllegalError)]:
        with pytest.raises(error):
            _send(net, addr, [b"x"], topic=topic)
    assert app.counters["put_messages"] == 0
