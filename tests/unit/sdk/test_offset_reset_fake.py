"""Live offset reset (INVOKE_BROKER_TO_RESET_OFFSET -> RESET_CONSUMER_CLIENT_OFFSET): a running
group's members drop what they cached and consume again from the new offsets, and no commit of
the old position undoes it; a stopped group's offsets are stored for its next start. Real
brokers on quiver.testing's fake network."""

import threading
import time

import pytest

from quiver import ConsumeResult, Message, Producer, PullConsumer, PushConsumer
from quiver.wire import requests as rq
from quiver.client.admin import OffsetReset
from quiver.client.base import MessageQueue
from quiver.wire.codes import RequestCode, ResponseCode
from quiver.errors import ClientError, InvalidParameterError
from quiver.testing import stub_cluster, wait_until

MQ0 = MessageQueue("T", "broker-a", 0)


@pytest.fixture
def two_queues():
    with stub_cluster(brokers=1) as c:
        c.admin().create_topic("T", queues=2)
        yield c


def _send(cluster, bodies, queue_ids=(0, 1)):
    """Bodies spread round-robin over `queue_ids` (the sharding key "q" hashes to queue q of 2)."""
    with cluster.client(Producer, "pg") as p:
        for i, b in enumerate(bodies):
            sent = p.send_orderly(Message("T", b), str(queue_ids[i % len(queue_ids)]))
            assert sent.queue_id == queue_ids[i % len(queue_ids)]


def _drain(c, want, timeout=10.0):
    got = []
    wait_until(lambda: got.extend(c.poll(0.05)) or len(got) >= want, timeout)
    return sorted(m.body.decode() for m in got)


def _names(n, prefix="m"):
    return sorted(f"{prefix}{i}" for i in range(n))


def _offsets(cluster, group):
    meta = cluster.broker().metadata
    return [meta.get_offset(group, "T", q) for q in (0, 1)]


def test_pull_consumer_consumes_everything_again_after_a_live_reset(two_queues):
    cl = two_queues
    _send(cl, [f"m{i}".encode() for i in range(20)])
    with cl.client(PullConsumer, "cg", consume_from="first", commit_interval_ms=50) as c:
        c.subscribe("T")
        assert _drain(c, 20) == _names(20)
        assert wait_until(lambda: _offsets(cl, "cg") == [10, 10])
        done = cl.admin().reset_offset("cg", "T", 0)
        assert isinstance(done, OffsetReset) and done.online and done.members == 1
        assert done.offsets == {MQ0: 0, MessageQueue("T", "broker-a", 1): 0}
        assert _drain(c, 20) == _names(20)
        assert c.stats()["offset_resets"] == 2
        time.sleep(0.2)   # a few commit intervals: the group moves forward from the reset point only
        assert _offsets(cl, "cg") == [10, 10]


def test_push_consumer_consumes_everything_again_after_a_live_reset(two_queues):
    cl = two_queues
    seen, lock = [], threading.Lock()

    def listener(msgs):
        with lock:
            seen.extend(m.body.decode() for m in msgs)
        return ConsumeResult.SUCCESS
    _send(cl, [f"m{i}".encode() for i in range(20)])
    c = cl.client(PushConsumer, "push-cg", consume_from="first", commit_interval_ms=50)
    c.subscribe("T")
    c.register(listener)
    with c:
        assert wait_until(lambda: len(seen) >= 20 and _offsets(cl, "push-cg") == [10, 10])
        done = cl.admin().reset_offset("push-cg", "T", offset=5)
        assert done.online and set(done.offsets.values()) == {5}
        assert wait_until(lambda: len(seen) >= 30)
        time.sleep(0.2)
        assert c.stats()["offset_resets"] == 2
    again = sorted(seen[20:])
    assert again == sorted(f"m{i}" for i in range(10, 20))   # offsets 5..9 of both queues
    assert _offsets(cl, "push-cg") == [10, 10]


def _stuck_consumer(cl, group):
    """40 messages in queue 0 and a PushConsumer whose listener waits for `gate` (one thread)."""
    gate, seen, lock = threading.Event(), [], threading.Lock()

    def listener(msgs):
        gate.wait(10)
        with lock:
            seen.extend(m.body.decode() for m in msgs)
        return ConsumeResult.SUCCESS
    _send(cl, [f"m{i}".encode() for i in range(40)], queue_ids=(0,))
    c = cl.client(PushConsumer, group, consume_from="first", threads=1, commit_interval_ms=20)
    c.subscribe("T")
    c.register(listener)
    return c, gate, seen


def test_a_reset_while_messages_are_cached_and_being_consumed_is_not_undone(two_queues):
    """The listener is stuck in its first batch when the reset comes: that batch finishing
    afterwards, the cached messages behind it, the pull under way and the periodic and
    piggy-backed commits of the old position must not move the group past the reset point."""
    cl = two_queues
    c, gate, seen = _stuck_consumer(cl, "stuck")
    with c:
        assert wait_until(lambda: c._pqs.get(MQ0) is not None and len(c._pqs[MQ0].msgs) == 40)
        c._offsets.update(MQ0, 30)   # as if 30 had been consumed: the commits under way carry it
        assert wait_until(lambda: _offsets(cl, "stuck")[0] == 30)
        done = cl.admin().reset_offset("stuck", "T", 0)
        assert done.online
        time.sleep(0.1)             # commit intervals and pulls pass: the broker keeps 0
        assert _offsets(cl, "stuck")[0] == 0
        gate.set()   # the stuck call ends; the rest of its task is dropped with its queue
        assert wait_until(lambda: len(seen) >= 41, 10)
        time.sleep(0.1)
    assert seen[0] == "m0" and sorted(seen[1:]) == _names(40)   # then all 40 again, once
    assert _offsets(cl, "stuck")[0] == 40


def test_a_stopped_group_is_not_online_and_starts_from_the_reset_offsets(two_queues):
    cl = two_queues
    _send(cl, [f"m{i}".encode() for i in range(10)])
    with cl.client(PullConsumer, "cg", consume_from="first") as c:
        c.subscribe("T")
        assert _drain(c, 10) == _names(10)
    assert _offsets(cl, "cg") == [5, 5]
    done = cl.admin().reset_offset("cg", "T", offset=3)
    assert not done.online and done.members == 0 and set(done.offsets.values()) == {3}
    assert _offsets(cl, "cg") == [3, 3]
    with cl.client(PullConsumer, "cg", consume_from="last") as c:
        c.subscribe("T")
        assert _drain(c, 4) == ["m6", "m7", "m8", "m9"]


def test_an_explicit_offset_is_held_to_each_queue_and_a_time_past_the_end_is_the_end(two_queues):
    cl = two_queues
    _send(cl, [f"m{i}".encode() for i in range(6)], queue_ids=(0,))
    admin = cl.admin()
    assert set(admin.reset_offset("cg", "T", offset=10 ** 9).offsets.values()) == {6, 0}
    assert admin.reset_offset("cg", "T", offset=2).offsets == {MQ0: 2, MessageQueue("T", "broker-a", 1): 0}
    future = int(time.time() * 1000) + 3_600_000
    assert admin.reset_offset("cg", "T", future).offsets[MQ0] == 6


def test_bad_reset_requests_are_refused(two_queues):
    cl = two_queues
    admin = cl.admin()
    with pytest.raises(ClientError, match="exactly one"):
        admin.reset_offset("cg", "T")
    with pytest.raises(ClientError, match="exactly one"):
        admin.reset_offset("cg", "T", 0, offset=1)
    addr = cl.broker_addrs["broker-a"]
    with pytest.raises(InvalidParameterError, match="exactly one"):
        cl.network.call(addr, rq.ResetOffset(group="cg", topic="T"))
    with pytest.raises(InvalidParameterError, match="queue 7"):
        cl.network.call(addr, rq.ResetOffset(group="cg", topic="T", offset=0, queue_id=7))
    env = cl.network.call(addr, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, {"g": "cg", "t": "Nope", "o": 0},
                          ok=(ResponseCode.TOPIC_NOT_EXIST,))
    assert "Nope" in env.remark
    one = rq.ResetOffsetReply.decode(cl.network.call(addr, rq.ResetOffset(group="cg", topic="T", offset=0,
                                                                          queue_id=1)).ext)
    assert one.offsets == [(1, 0)] and one.members == 0


def test_a_consumer_ignores_a_reset_of_another_group_or_of_queues_it_does_not_own(two_queues):
    cl = two_queues
    _send(cl, [f"m{i}".encode() for i in range(4)])
    with cl.client(PullConsumer, "cg", consume_from="first") as c:
        c.subscribe("T")
        assert _drain(c, 4) == _names(4)
        other = rq.ResetConsumerClientOffset(group="other", topic="T", broker="broker-a", offsets=[(0, 0)])
        c._on_push(cl.broker_addrs["broker-a"], _envelope(other))
        not_mine = rq.ResetConsumerClientOffset(group="cg", topic="T", broker="broker-z", offsets=[(0, 0)])
        c._on_push(cl.broker_addrs["broker-a"], _envelope(not_mine))
        assert c.poll(0.1) == [] and c.stats()["offset_resets"] == 0


def _envelope(req):
    from quiver.wire import protocol
    return protocol.decode(protocol.request(req, 1))


def _deaf(c):
    """A member the broker's reset notice does not reach (it was leaving, or not connected then)."""
    c._push_handlers = {k: v for k, v in type(c)._push_handlers.items() if k != RequestCode.RESET_CONSUMER_CLIENT_OFFSET}


def test_a_push_consumer_not_told_of_a_reset_is_moved_there_by_its_next_pull(two_queues):
    """Its commits of the old position are ignored by the broker and its next pull is answered
    OFFSET_MOVED: it drops what it cached and consumes everything again from the reset offset."""
    cl = two_queues
    c, gate, seen = _stuck_consumer(cl, "deaf")
    _deaf(c)
    with c:
        assert wait_until(lambda: c._pqs.get(MQ0) is not None and len(c._pqs[MQ0].msgs) == 40)
        old = c._pqs[MQ0]
        c._offsets.update(MQ0, 30)
        assert wait_until(lambda: _offsets(cl, "deaf")[0] == 30)
        assert cl.admin().reset_offset("deaf", "T", 0).online
        time.sleep(0.1)             # its commits of 30 meanwhile do not count
        assert _offsets(cl, "deaf")[0] == 0
        _send(cl, [b"later"], queue_ids=(0,))   # its held pull is answered; the next one is moved
        assert wait_until(lambda: c._pqs.get(MQ0) is not old, 10)   # a new ProcessQueue at 0
        gate.set()   # the stuck call ends; the rest of the old queue's work is dropped with it
        assert wait_until(lambda: len(seen) >= 42, 10)
        time.sleep(0.1)
    assert seen[0] == "m0" and sorted(seen[1:]) == sorted(_names(40) + ["later"])   # all again, once
    assert _offsets(cl, "deaf")[0] == 41 and c.stats()["offset_resets"] == 0


def test_a_pull_consumer_not_told_of_a_reset_drops_its_buffer_and_consumes_again(two_queues):
    cl = two_queues
    _send(cl, [f"m{i}".encode() for i in range(20)], queue_ids=(0,))
    with cl.client(PullConsumer, "deaf-pull", consume_from="first", auto_commit=False) as c:
        _deaf(c)
        c.subscribe("T")
        assert _drain(c, 20) == _names(20)
        c.commit()
        assert _offsets(cl, "deaf-pull")[0] == 20
        assert cl.admin().reset_offset("deaf-pull", "T", 0).online
        c.commit()                                  # nothing new: the broker keeps the reset
        _send(cl, [b"later"], queue_ids=(0,))       # answers the held pull; the next is moved back
        got = set()
        assert wait_until(lambda: got.update(m.body.decode() for m in c.poll(0.05)) or got >= {*_names(20), "later"})
        c.commit()
        assert _offsets(cl, "deaf-pull")[0] == 21
        assert c.stats()["offset_resets"] == 0   # it never heard of the reset
