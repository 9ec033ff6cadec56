"""Orderly consumption: per-key order across rebalancing; a poison message goes to the DLQ."""

import threading
import time

import pytest

from quiver import Admin, ConsumeResult, Message, Producer, PushConsumer
from quiver.client.message import java_hash
from support.waiting import wait_for as _wait

KEYS, PER_KEY, QUEUES = 20, 500, 4


# consume_inline: the listener on the IO thread (no pool hand-off) must keep the same order and locks
@pytest.mark.parametrize("inline", [False, True], ids=["pool", "inline"])
def test_per_key_order_holds_while_consumers_join_and_leave(cluster, inline):
    admin = Admin(namesrv=cluster.namesrv)
    admin.create_topic("Seq", queues=QUEUES, order=True)
    seen: list[tuple[str, int]] = []
    lock = threading.Lock()

    def fn(msgs):
        with lock:
            for m in msgs:
                key, seq = m.body.decode().split(":")
                seen.append((key, int(seq)))
        return ConsumeResult.SUCCESS

    def consumer():
        c = PushConsumer("ordered", namesrv=cluster.namesrv, consume_from="first", lock_interval_ms=2000,
                         consume_inline=inline)
        c.subscribe("Seq")
        c.register(fn, orderly=True)
        return c.start()

    keys = [f"key-{k}" for k in range(KEYS)]
    by_queue: dict[int, list[str]] = {}
    for k in keys:
        by_queue.setdefault(abs(java_hash(k)) % QUEUES, []).append(k)

    with Producer("pg", namesrv=cluster.namesrv) as p:
        def produce(qkeys):  # one sender per queue keeps each key's order
            for i in range(PER_KEY):
                for k in qkeys:
                    p.send_orderly(Message("Seq", f"{k}:{i}".encode()), sharding_key=k)

        first = consumer()
        senders = [threading.Thread(target=produce, args=(ks,)) for ks in by_queue.values()]
        for t in senders:
            t.start()
        _wait(lambda: len(seen) > 1000, 30, "first consumption")
        second = consumer()                       # join
        _wait(lambda: len(seen) > 3000, 30, "consumption after a join")
        third = consumer()                        # join
        _wait(lambda: len(seen) > 5000, 30, "consumption after a second join")
        first.shutdown()                          # leave
        for t in senders:
            t.join(60)
        _wait(lambda: len({x for x in seen}) >= KEYS * PER_KEY, 60, "every message")
        second.shutdown()
        third.shutdown()

    per_key: dict[str, list[int]] = {}
    for key, seq in seen:
        per_key.setdefault(key, []).append(seq)
    assert sorted(per_key) == sorted(keys)
    for key, seqs in per_key.items():
        assert list(dict.fromkeys(seqs)) == list(range(PER_KEY)), key  # in consumption order
    dups = len(seen) - KEYS * PER_KEY
    assert dups == 0, f"{dups} messages consumed twice across graceful rebalances"
    admin.shutdown()


@pytest.mark.parametrize("inline", [False, True], ids=["pool", "inline"])
def test_poison_message_retried_in_place_then_dead_lettered(cluster, inline):
    admin = Admin(namesrv=cluster.namesrv)
    admin.create_topic("Poison", queues=1, order=True)
    attempts: list[tuple[str, int, float]] = []

    def fn(msgs):
        m = msgs[0]
        attempts.append((m.body.decode(), m.reconsume_times, time.monotonic()))
        return ConsumeResult.RECONSUME_LATER if m.body == b"bad" else ConsumeResult.SUCCESS

    with Producer("pg", namesrv=cluster.namesrv) as p:
        for body in (b"ok-1", b"bad", b"ok-2"):
            p.send_orderly(Message("Poison", body), sharding_key="k")
    c = PushConsumer("poison", namesrv=cluster.namesrv, consume_from="first", max_reconsume_times=2,
                     suspend_current_queue_ms=200, consume_inline=inline)
    c.subscribe("Poison")
    c.register(fn, orderly=True)
    with c:
        c.start()
        _wait(lambda: any(a[0] == "ok-2" for a in attempts), 15, "the queue to move on")
    bodies = [a[0] for a in attempts]
    assert bodies == ["ok-1", "bad", "bad", "bad", "ok-2"]         # retried in place, in order
    assert [a[1] for a in attempts if a[0] == "bad"] == [0, 1, 2]
    bad = [a[2] for a in attempts if a[0] == "bad"]
    assert all(b - a >= 0.15 for a, b in zip(bad, bad[1:]))         # after the suspend interval
    dlq = _wait(lambda: admin.dlq_messages("poison"), 60, "dead letter")
    assert [m.body for m in dlq] == [b"bad"]
    assert dlq[0].properties["DLQ_ORIGIN_TOPIC"] == "Poison"
    admin.shutdown()
