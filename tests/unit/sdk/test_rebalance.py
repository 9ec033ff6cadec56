"""Allocation strategies: every queue owned exactly once, RocketMQ's layouts."""

import pytest

from quiver.client import MessageQueue
from quiver.rebalance import (allocate_averagely, allocate_circle, allocate_consistent_hash, strategy)

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
