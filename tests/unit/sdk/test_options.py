"""ConsumerOptions: one frozen settings object, checked once, the same for both consumers."""

import dataclasses

import pytest

from quiver import PullConsumer, PushConsumer
from quiver.errors import MessageIllegalError
from quiver.client.options import ConsumerOptions

NS = "127.0.0.1:1"


def test_defaults_are_frozen_and_have_units():
    o = ConsumerOptions()
    assert (o.consume_from, o.pull_batch_size, o.suspend_ms, o.commit_interval_ms, o.rebalance_interval_ms) == \
        ("last", 32, 15_000, 5000, 20_000)
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.pull_batch_size = 64


def test_keywords_are_the_fields_and_the_push_consumers_threads_and_batch_size():
    o = ConsumerOptions.build(commit_interval_ms=1500, cached_msgs_per_queue=8, threads=4, batch_size=2)
    assert (o.commit_interval_ms, o.cached_msgs_per_queue, o.consume_threads, o.consume_batch_size) == \
        (1500, 8, 4, 2)
    for gone in ("auto_commit_interval_s", "persist_interval_s", "rebalance_interval_s", "heartbeat_interval_s",
                 "lock_interval_s", "pull_delay_on_error_s", "buffer_per_queue", "pull_threshold_for_queue",
                 "pull_threshold_bytes_for_queue", "max_span"):
        with pytest.raises(TypeError, match=gone):
            ConsumerOptions.build(**{gone: 1})
    base = ConsumerOptions(pull_batch_size=64)
    assert ConsumerOptions.build(base, suspend_ms=0) == ConsumerOptions(pull_batch_size=64, suspend_ms=0)
    assert ConsumerOptions.build(base) is base
    with pytest.raises(TypeError, match="nope"):
        ConsumerOptions.build(nope=1)


@pytest.mark.parametrize("bad", [dict(consume_from="earliest"), dict(consume_from=True), dict(consume_from=-1),
                                 dict(pull_batch_size=0), dict(pull_batch_size=1025), dict(consume_threads=0),
                                 dict(consume_batch_size=2000), dict(suspend_ms=-1), dict(allocate="random"),
                                 dict(commit_interval_ms=0), dict(rebalance_interval_ms=1.5),
                                 dict(commit_interval_ms="soon"), dict(instance_name=""),
                                 dict(consume_inline=1), dict(pop="yes")])
def test_bad_values_raise_value_error_naming_them(bad):
    name = next(iter(bad))
    with pytest.raises(ValueError, match=name):
        ConsumerOptions.build(**bad)


@pytest.mark.parametrize("cls", [PullConsumer, PushConsumer])
def test_both_consumers_check_the_same_way(cls):
    with pytest.raises(ValueError, match="consume_from"):
        cls("cg", namesrv=NS, consume_from="earliest")
    with pytest.raises(ValueError, match="pull_batch_size"):
        cls("cg", namesrv=NS, pull_batch_size=5000)
    with pytest.raises(ValueError, match="consume_threads"):
        cls("cg", namesrv=NS, options=ConsumerOptions.build(threads=0))
    with pytest.raises(MessageIllegalError):
        cls("bad/group", namesrv=NS)
    with pytest.raises(TypeError):
        cls("cg", namesrv=NS, no_such_setting=1)
    c = cls("cg", namesrv=NS, options=ConsumerOptions(pull_batch_size=64), suspend_ms=100)
    assert (c.options.pull_batch_size, c.options.suspend_ms) == (64, 100)


@pytest.mark.parametrize("cls", [PullConsumer, PushConsumer])
def test_settings_are_keywords_only(cls):
    with pytest.raises(TypeError):
        cls("cg", NS, "first")
    assert cls("cg", NS, consume_from="first").options.consume_from == "first"


def test_a_pull_consumer_does_not_broadcast():
    with pytest.raises(ValueError, match="broadcast"):
        PullConsumer("cg", namesrv=NS, broadcast=True)


def test_a_rebalance_listener_needs_both_callbacks():
    from quiver import RebalanceListener

    class Half:
        def on_assigned(self, queues):
            pass
    with pytest.raises(ValueError, match="on_assigned and on_revoked"):
        ConsumerOptions(rebalance_listener=Half())
    listener = RebalanceListener()
    assert PushConsumer("cg", namesrv=NS, rebalance_listener=listener).options.rebalance_listener is listener
