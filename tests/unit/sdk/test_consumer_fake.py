"""PullConsumer seek, flow control, failover and offsets; PushConsumer delivery and send-back,
against real brokers on quiver.testing's fake network."""

import threading
import time

import pytest

from quiver import ConsumeResult, Message, Producer, PullConsumer, PushConsumer, RebalanceListener
from quiver.wire import requests as rq
from quiver.client.base import MessageQueue
from quiver.wire.codes import RequestCode
from quiver.testing import stub_cluster, wait_until

PULL = RequestCode.PULL_MESSAGE


@pytest.fixture
def one():
    with stub_cluster(brokers=1) as c:
        c.admin().create_topic("Q1", queues=1)
        yield c


def _send(cluster, topic, bodies, **kw):
    with cluster.client(Producer, "pg") as p:
        return [p.send(Message(topic, b, **kw)) for b in bodies]


def _drain(consumer, want, timeout=5.0, **kw):
    got = []
    wait_until(lambda: got.extend(consumer.poll(0.05, **kw)) or len(got) >= want, timeout)
    return got


def _bodies(msgs):
    return [m.body.decode() for m in msgs]


def _nums(n, start=0):
    return [str(i) for i in range(start, start + n)]


# ---- PullConsumer ------------------------------------------------------------------------------


def test_seek_replays_from_an_offset_and_from_the_beginning(one):
    _send(one, "Q1", [s.encode() for s in _nums(10)])
    mq = MessageQueue("Q1", "broker-a", 0)
    with one.client(PullConsumer, "cg", consume_from="first") as c:
        c.subscribe("Q1")
        assert _bodies(_drain(c, 10)) == _nums(10)
        c.seek(mq, 3)
        assert _bodies(_drain(c, 7)) == _nums(7, 3)
        c.seek_to_begin()
        assert _bodies(_drain(c, 10)) == _nums(10)


def test_seek_to_timestamp_skips_what_was_stored_before(one):
    _send(one, "Q1", [b"old-0", b"old-1"])
    cut = int(time.time() * 1000) + 1      # after every store time so far
    assert wait_until(lambda: time.time() * 1000 >= cut + 1)
    _send(one, "Q1", [b"new-0", b"new-1"])
    with one.client(PullConsumer, "cg", consume_from="first") as c:
        c.subscribe("Q1")
        assert len(_drain(c, 4)) == 4
        c.seek_to_timestamp(cut)
        assert _bodies(_drain(c, 2)) == ["new-0", "new-1"]


def test_seek_to_end_consumes_only_what_arrives_after(one):
    _send(one, "Q1", [b"old-0", b"old-1", b"old-2"])
    with one.client(PullConsumer, "cg", consume_from="first", pull_batch_size=1) as c:
        c.subscribe("Q1")
        assert wait_until(lambda: c.assignment())
        c.seek_to_end()
        _send(one, "Q1", [b"new-0"])
        assert _bodies(_drain(c, 1)) == ["new-0"]
        assert not c.poll(0.2)


class _Told(RebalanceListener):
    def __init__(self, consumer=None):
        self.events, self.consumer = [], consumer

    def on_assigned(self, queues):
        self.events.append(("assigned", queues))

    def on_revoked(self, queues):
        if self.consumer is not None:
            self.consumer.commit()          # still owned: the commit reaches the broker
        self.events.append(("revoked", queues))


def test_a_rebalance_listener_hears_of_queues_given_and_taken():
    with stub_cluster(brokers=1) as c:
        c.admin().create_topic("Rb", queues=4)
        mqs = [MessageQueue("Rb", "broker-a", i) for i in range(4)]
        told_a = _Told()
        a = c.client(PullConsumer, "cg", consume_from="first", rebalance_listener=told_a)
        told_a.consumer = a
        a.subscribe("Rb")
        a.start()
        try:
            assert wait_until(lambda: told_a.events == [("assigned", mqs)])
            told_b = _Told()
            with c.client(PullConsumer, "cg", consume_from="first", rebalance_listener=told_b) as b:
                b.subscribe("Rb")
                assert wait_until(lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2, 10)
                a._rebalance_now()
                assert wait_until(lambda: ("revoked", sorted(set(mqs) - set(a.assignment()))) in told_a.events)
                assert told_b.events[0] == ("assigned", sorted(b.assignment()))
            assert wait_until(lambda: len(a.assignment()) == 4, 10)
        finally:
            a.shutdown()
        assert told_a.events[-1] == ("revoked", mqs)      # shutdown gives every queue up


def test_commit_stores_the_polled_position_on_the_broker(one):
    _send(one, "Q1", [b"a", b"b", b"c"])
    with one.client(PullConsumer, "cg", consume_from="first", auto_commit=False) as c:
        c.subscribe("Q1")
        assert len(_drain(c, 2, max_messages=2)) == 2
        c.commit()
    assert one.broker().metadata.get_offset("cg", "Q1", 0) == 2
    with one.client(PullConsumer, "cg", consume_from="first") as c:   # the group resumes there
        c.subscribe("Q1")
        assert _bodies(_drain(c, 1)) == ["c"]


def test_flow_control_pauses_pulls_until_the_app_polls(one):
    _send(one, "Q1", [s.encode() for s in _nums(40)])
    with one.client(PullConsumer, "cg", consume_from="first", pull_batch_size=4, cached_msgs_per_queue=8) as c:
        c.subscribe("Q1")
        st = c._queues[MessageQueue("Q1", "broker-a", 0)]
        assert wait_until(lambda: st.paused)
        assert st.buffered == 8 and one.network.count(PULL) == 2   # two pulls of 4, then no more
        got = c.poll(0.1, max_messages=5)
        assert _bodies(got) == _nums(5)                            # below half: pulling resumes
        got += _drain(c, 35)
        assert _bodies(got) == _nums(40)


def test_offset_beyond_the_queue_is_moved_back(one):
    _send(one, "Q1", [b"a", b"b"])
    one.network.call(one.broker_addrs["broker-a"], rq.UpdateConsumerOffset(group="cg", topic="Q1", queue_id=0,
                                                                         offset=1000))
    with one.client(PullConsumer, "cg", consume_from="first") as c:
        c.subscribe("Q1")
        st = c._queues[MessageQueue("Q1", "broker-a", 0)]
        assert wait_until(lambda: st.next == 2)   # PULL_OFFSET_MOVED: the queue's max
        _send(one, "Q1", [b"c"])
        assert _bodies(_drain(c, 1)) == ["c"]


def test_tag_subscription_gets_only_its_tags(one):
    with one.client(Producer, "pg") as p:
        for i in range(10):
            p.send(Message("Q1", str(i).encode(), tags="even" if i % 2 == 0 else "odd"))
    with one.client(PullConsumer, "cg", consume_from="first") as c:
        c.subscribe("Q1", "odd")
        assert _bodies(_drain(c, 5)) == ["1", "3", "5", "7", "9"]
        assert c.poll(0.1) == []


def test_a_broker_that_goes_away_and_returns_loses_and_repeats_nothing():
    with stub_cluster(brokers=2) as two:
        two.admin().create_topic("Fo", queues=1)
        b = two.broker_addrs["broker-b"]
        with two.client(PullConsumer, "cg", consume_from="first") as c:
            c.subscribe("Fo")
            assert wait_until(lambda: len(c.assignment()) == 2 and two.broker("broker-b").puller.held_count())
            two.network.disconnect(b)       # its held pull fails; the consumer keeps retrying it
            sent = _send(two, "Fo", [f"a{i}".encode() for i in range(6)])
            assert {r.broker for r in sent} == {"broker-a"}
            got = _drain(c, 6)
            two.network.reconnect(b)
            with two.client(Producer, "pg2") as p:   # a new producer: nothing to avoid
                sent += [p.send(Message("Fo", f"b{i}".encode())) for i in range(6)]
            assert {r.broker for r in sent} == {"broker-a", "broker-b"}
            got += _drain(c, 12 - len(got))
            assert sorted(_bodies(got)) == [f"a{i}" for i in range(6)] + [f"b{i}" for i in range(6)]
            assert c.poll(0.1) == []


# ---- PushConsumer ------------------------------------------------------------------------------


def test_push_consumer_delivers_everything_once(one):
    seen, lock = [], threading.Lock()

    def listener(msgs):
        with lock:
            seen.extend(m.body.decode() for m in msgs)
        return ConsumeResult.SUCCESS
    c = one.client(PushConsumer, "push-cg", consume_from="first", threads=2)
    c.subscribe("Q1")
    c.register(listener)
    with c:
        _send(one, "Q1", [s.encode() for s in _nums(30)])
        assert wait_until(lambda: len(seen) >= 30)
    assert sorted(seen, key=int) == _nums(30)
    assert one.broker().metadata.get_offset("push-cg", "Q1", 0) == 30   # committed on shutdown


def test_push_consumer_sends_failures_back_for_retry(one):
    c = one.client(PushConsumer, "push-retry", consume_from="first", threads=1)
    c.subscribe("Q1")
    c.register(lambda msgs: ConsumeResult.RECONSUME_LATER)
    with c:
        _send(one, "Q1", [b"poison"])
        assert wait_until(lambda: one.network.count(RequestCode.CONSUMER_SEND_MSG_BACK) == 1)
    store = one.broker().store
    # parked for the scheduler (not run here) at delay level 3, the first retry
    assert store.max_offset("SCHEDULE_TOPIC_XXXX", 2) == 1


def test_inline_listener_runs_on_the_io_thread_and_loses_nothing(one):
    seen, threads = [], set()

    def listener(msgs):
        threads.add(threading.current_thread().name)
        seen.extend(m.body.decode() for m in msgs)
        return ConsumeResult.SUCCESS
    c = one.client(PushConsumer, "inline-cg", consume_from="first", consume_inline=True)
    c.subscribe("Q1")
    c.register(listener)
    with c:
        _send(one, "Q1", [s.encode() for s in _nums(50)])
        assert wait_until(lambda: len(seen) >= 50)
    assert seen == _nums(50)                                        # one queue: in order, once each
    assert threads == {c._transport._thread.name}                    # no hand-off to the consume pool
    assert one.broker().metadata.get_offset("inline-cg", "Q1", 0) == 50


def test_inline_listener_failures_are_sent_back_and_never_committed(one):
    calls = []

    def listener(msgs):
        calls.append(msgs[0].body)
        if msgs[0].body == b"bad":
            raise RuntimeError("poison")                            # raising counts as RECONSUME_LATER
        return ConsumeResult.SUCCESS
    c = one.client(PushConsumer, "inline-retry", consume_from="first", consume_inline=True)
    c.subscribe("Q1")
    c.register(listener)
    with c:
        _send(one, "Q1", [b"ok-1", b"bad", b"ok-2"])
        assert wait_until(lambda: one.network.count(RequestCode.CONSUMER_SEND_MSG_BACK) == 1 and len(calls) >= 3)
    assert calls == [b"ok-1", b"bad", b"ok-2"]
    assert one.broker().store.max_offset("SCHEDULE_TOPIC_XXXX", 2) == 1   # parked for its first retry
    assert one.broker().metadata.get_offset("inline-retry", "Q1", 0) == 3  # sent back: the queue moves on
