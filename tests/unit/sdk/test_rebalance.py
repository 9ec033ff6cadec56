"""Allocation strategies: every queue owned exactly once, RocketMQ's layouts; the rebalance loop both consumers run."""

import types

import pytest

from quiver.wire import requests as rq
from quiver.client.base import MessageQueue
from quiver.wire.protocol import Envelope
from quiver.client.rebalance import (RebalanceLoop, Rebalancer, allocate_averagely, allocate_circle,
                                     allocate_consistent_hash, strategy)

MQS = [MessageQueue("T", "broker-a", i) for i in range(8)]
CIDS = ["c0", "c1", "c2"]


def _ids(mqs):
    return [m.queue_id for m in mqs]


def test_averagely_q8_c3_is_rocketmqs_example():
    assert [_ids(allocate_averagely(c, MQS, CIDS)) for c in CIDS] == [[0, 1, 2], [3, 4, 5], [6, 7]]


def test_averagely_fewer_queues_than_consumers():
    mqs = MQS[:2]
    assert [_ids(allocate_averagely(c, mqs, CIDS)) for c in CIDS] == [[0], [1], []]


def test_averagely_even_split_and_unknown_client():
    assert [_ids(allocate_averagely(c, MQS, ["a", "b"])) for c in ["a", "b"]] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert allocate_averagely("stranger", MQS, CIDS) == []
    assert allocate_averagely("c0", [], CIDS) == []


def test_circle():
    assert [_ids(allocate_circle(c, MQS, CIDS)) for c in CIDS] == [[0, 3, 6], [1, 4, 7], [2, 5]]


@pytest.mark.parametrize("alloc", [allocate_averagely, allocate_circle, allocate_consistent_hash])
@pytest.mark.parametrize("n_queues,n_clients", [(8, 3), (4, 4), (3, 5), (16, 1), (32, 7)])
def test_every_queue_owned_exactly_once(alloc, n_queues, n_clients):
    mqs = [MessageQueue("T", f"b{i % 2}", i) for i in range(n_queues)]
    cids = sorted(f"10.0.0.{i}@{i}" for i in range(n_clients))
    owned = [mq for c in cids for mq in alloc(c, mqs, cids)]
    assert sorted(owned) == sorted(mqs)


def test_consistent_hash_moves_few_queues_when_a_client_joins():
    mqs = [MessageQueue("T", "b", i) for i in range(64)]
    before = {mq: c for c in CIDS for mq in allocate_consistent_hash(c, mqs, CIDS)}
    cids = CIDS + ["c3"]
    after = {mq: c for c in cids for mq in allocate_consistent_hash(c, mqs, cids)}
    moved = [mq for mq in mqs if before[mq] != after[mq]]
    assert all(after[mq] == "c3" for mq in moved)  # only the newcomer gains queues


def test_strategy_lookup():
    assert strategy("averagely") is allocate_averagely
    assert strategy(allocate_circle) is allocate_circle
    with pytest.raises(ValueError):
        strategy("nope")


# ---- the loop both consumers run -------------------------------------------------------------------


class _Allocation:
    """A Rebalancer stand-in: `assignment` answers what the test set."""

    def __init__(self, group="G"):
        self.group, self.queues, self.missing = group, {}, {}
        self.client = types.SimpleNamespace(client_id="me")

    def assignment(self, topics):
        return {t: self.queues.get(t) for t in topics}


def _loop(alloc, refuse=(), topics=("T",)):
    owned, log = {}, []

    def take(mq, notified_at):
        if mq in refuse:
            return False
        owned[mq] = notified_at
        log.append(("take", mq))
        return True

    def release(mq):
        owned.pop(mq)
        log.append(("release", mq))
    changed = []
    loop = RebalanceLoop(alloc, 20.0, lambda: list(topics), owned, take, release, changed=lambda: changed.append(1))
    return loop, owned, log, changed


def test_a_round_takes_and_releases_the_difference():
    alloc = _Allocation()
    mqs = [MessageQueue("T", "b", i) for i in range(3)]
    loop, owned, log, changed = _loop(alloc)
    alloc.queues["T"] = mqs[:2]
    loop.step()
    assert sorted(owned) == mqs[:2] and changed == [1]
    alloc.queues["T"] = mqs[1:]
    loop.step()
    assert sorted(owned) == mqs[1:] and log[-2:] == [("release", mqs[0]), ("take", mqs[2])]
    alloc.queues["T"] = None          # unknown right now: keep what we have
    loop.step()
    assert sorted(owned) == mqs[1:] and len(changed) == 2


def test_a_queue_not_taken_is_tried_again_soon():
    alloc = _Allocation()
    mq = MessageQueue("T", "b", 0)
    loop, owned, _, _ = _loop(alloc, refuse={mq})
    alloc.queues["T"] = [mq]
    loop.step()
    assert not owned and loop._retry_soon


def test_a_notification_for_the_group_wakes_the_loop_and_times_the_round():
    loop, owned, _, _ = _loop(_Allocation())
    loop.notified("a:1", Envelope(40, 1, rq.NotifyConsumerIdsChanged(group="other").ext()))
    assert not loop._wake.is_set() and loop.notified_at is None
    loop.notified("a:1", Envelope(40, 1, rq.NotifyConsumerIdsChanged(group="G").ext()))
    assert loop._wake.is_set() and loop.notified_at is not None
    t0 = loop.notified_at
    loop.rebalancer.queues["T"] = [MessageQueue("T", "b", 0)]
    loop.step()
    assert list(owned.values()) == [t0] and loop.notified_at is None


def test_a_stopped_loop_takes_nothing_and_release_all_gives_everything_up():
    alloc = _Allocation()
    loop, owned, _, _ = _loop(alloc)
    alloc.queues["T"] = [MessageQueue("T", "b", 0)]
    loop.step()
    loop.stop()
    alloc.queues["T"] = [MessageQueue("T", "b", 1)]
    loop.step()
    assert list(owned) == [MessageQueue("T", "b", 0)]
    loop.release_all()
    assert owned == {}


def test_a_topic_no_longer_subscribed_has_its_queues_released():
    alloc, subscribed = _Allocation(), ["T", "U"]
    t, u = MessageQueue("T", "b", 0), MessageQueue("U", "b", 0)
    alloc.queues.update({"T": [t], "U": [u]})
    loop, owned, log, changed = _loop(alloc, topics=subscribed)
    loop.step()
    assert sorted(owned) == [t, u]
    subscribed.remove("U")             # unsubscribed: released even though U still has queues
    loop.step()
    assert list(owned) == [t] and log[-1] == ("release", u) and len(changed) == 2


def test_a_missing_topic_is_logged_once_and_looked_for_every_second(caplog):
    from quiver.client import rebalance
    client = types.SimpleNamespace(client_id="me", route=lambda topic, refresh: (_ for _ in ()).throw(
        rebalance.TopicNotExistError(topic)))
    r = Rebalancer(client, "G")
    owned = {}
    loop = RebalanceLoop(r, 20.0, lambda: ["Gone"], owned, lambda mq, at: True, owned.pop)
    for _ in range(3):
        loop.step()
    assert list(r.missing) == ["Gone"] and loop._retry_soon and loop._wake.is_set()
    assert sum("Gone does not exist" in rec.getMessage() for rec in caplog.records) == 1


def test_a_listener_hears_of_revoked_queues_before_they_go_and_survives_its_own_errors():
    alloc = _Allocation()
    mqs = [MessageQueue("T", "b", i) for i in range(3)]
    loop, owned, log, _ = _loop(alloc)
    heard = []

    class Listener:
        def on_assigned(self, queues):
            heard.append(("assigned", queues))
            raise RuntimeError("a listener's bug")      # logged; the round goes on

        def on_revoked(self, queues):
            heard.append(("revoked", queues, sorted(owned)))   # still owned when told

    loop.listener = Listener()
    alloc.queues["T"] = mqs[:2]
    loop.step()
    assert heard == [("assigned", mqs[:2])] and sorted(owned) == mqs[:2]
    alloc.queues["T"] = mqs[1:]
    loop.step()
    assert heard[1:] == [("revoked", [mqs[0]], mqs[:2]), ("assigned", [mqs[2]])] and sorted(owned) == mqs[1:]
    loop.release_all()
    assert heard[-1] == ("revoked", mqs[1:], mqs[1:]) and not owned
