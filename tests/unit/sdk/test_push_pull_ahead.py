"""PushConsumer sends a queue's next pull before an inline listener that takes a while gets the
batch, so a message stored while the listener runs finds a pull held at the broker; offsets,
order and flow control stay as they were (quiver.testing's fake network, a real broker)."""

import threading

import pytest

from quiver import ConsumeResult, Message, Producer, PushConsumer
from quiver.client.access import broker_access
from quiver.client.consume_service import ConsumeService
from quiver.client.options import ConsumerOptions
from quiver.wire.codes import RequestCode
from quiver.testing import stub_cluster, wait_until


@pytest.fixture
def one():
    with stub_cluster(brokers=1) as c:
        c.admin().create_topic("Q1", queues=1)
        yield c


def _watch_pulls(consumer, topic: str) -> list[int]:
    """The offsets of the consumer's pulls of `topic`, as they are sent."""
    offsets: list[int] = []
    transport = broker_access(consumer).transport
    send = transport.send

    def watched(addr, code, ext, bodies, callback, timeout=3.0):
        if getattr(code, "CODE", None) == RequestCode.PULL_MESSAGE and code.topic == topic:
            offsets.append(code.offset)
        return send(addr, code, ext, bodies, callback, timeout)
    transport.send = watched
    return offsets


def _send(cluster, bodies):
    with cluster.client(Producer, "pg") as p:
        for b in bodies:
            p.send(Message("Q1", b))


def _blocking_listener():
    """A listener noting what it got and holding each call until `release` is set."""
    release, entered = threading.Event(), threading.Event()
    seen: list[bytes] = []

    def listener(msgs):
        seen.extend(m.body for m in msgs)
        entered.set()
        release.wait(10)
        return ConsumeResult.SUCCESS
    return listener, seen, entered, release


@pytest.mark.parametrize("inline", [True, False])
def test_next_pull_is_at_the_broker_while_the_listener_runs(one, inline):
    listener, seen, entered, release = _blocking_listener()
    c = one.client(PushConsumer, "ahead-cg", consume_from="first", consume_inline=inline, threads=1)
    c.subscribe("Q1")
    c.register(listener)
    with c:
        pulls = _watch_pulls(c, "Q1")
        _send(one, [b"m0"])
        assert entered.wait(10)
        # the listener holds the first batch: the pull past it left before it was called
        assert wait_until(lambda: 1 in pulls, 5), pulls
        _send(one, [b"m1", b"m2"])     # stored while the listener runs: answered to the held pull
        release.set()
        assert wait_until(lambda: len(seen) >= 3, 10)
    assert seen == [b"m0", b"m1", b"m2"]                      # in order, once each
    assert sorted(set(pulls)) == pulls[:len(set(pulls))]      # pulls never go back
    assert one.broker().metadata.get_offset("ahead-cg", "Q1", 0) == 3   # stored at shutdown: all consumed


def test_flow_control_counts_the_batch_being_consumed(one):
    """With one message cached at most, the one in the listener's hands stops the next pull: it
    is sent once the listener has finished (the flow control's timer)."""
    listener, seen, entered, release = _blocking_listener()
    c = one.client(PushConsumer, "ahead-fc", consume_from="first", consume_inline=True, pull_batch_size=1,
                   cached_msgs_per_queue=1)
    c.subscribe("Q1")
    c.register(listener)
    with c:
        pulls = _watch_pulls(c, "Q1")
        _send(one, [b"a", b"b"])
        assert entered.wait(10)
        threading.Event().wait(0.3)
        assert 1 not in pulls                     # the cache is full: no pull while the batch runs
        release.set()
        assert wait_until(lambda: len(seen) >= 2, 10)
    assert seen == [b"a", b"b"]
    assert 1 in pulls


@pytest.mark.parametrize("inline, cost_s, n, first", [
    (False, None, 1, True),       # the consume threads: the submit goes first, the pull right after
    (False, 0.01, 32, True),
    (True, None, 1, False),       # inline, the listener's cost not known yet: the pull first
    (True, 0.000_005, 4, True),   # a listener quicker than sending the pull: the batch first
    (True, 0.000_005, 32, False),
    (True, 0.001, 1, False),      # one that takes a while runs with the next pull at the broker
])
def test_what_goes_first_the_batch_or_the_next_pull(inline, cost_s, n, first):
    svc = ConsumeService("g", ConsumerOptions.build(None, consume_inline=inline), lambda msgs: None, orderly=False,
                         broadcast=False, timer=None, call_broker=None, commit=None, relock=None)
    try:
        svc._cost_per_msg_s = cost_s
        assert svc.hand_off_first(n) is first
    finally:
        svc.close()
