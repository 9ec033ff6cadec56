"""The demo's steps (quiver.tools.demo) as assertions, over the whole cluster as real processes.

One test per user journey, each with its own topic and groups: send and pull,
tags, SQL92 through the filter server, a delay level through the scheduler, a
transaction with a check-back through the txn-checker, retry and dead letters,
lookups by key and msgId, orderly consumption, a push consumer.
"""

import threading
import time

import pytest

from quiver import (Admin, ConsumeResult, Message, MessageSelector, Producer, PullConsumer, PushConsumer,
                    SendStatus, TransactionProducer, TransactionState)
from quiver.errors import SubscriptionParseError
from support.scheduler import drain
from support.waiting import wait_for as _wait

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture
def admin(e2e):
    a = Admin(namesrv=e2e.namesrv)
    yield a
    a.shutdown()


def _order(topic: str, i: int) -> Message:
    """The demo's orders: odd ones tagged 'paid', even ones 'created', key order-<i>, property amount=<i>."""
    return Message(topic, f"order #{i}".encode(), tags="paid" if i % 2 else "created", keys=[f"order-{i}"],
                   properties={"amount": str(i)})


def _send_orders(namesrv: str, topic: str, count: int) -> list:
    """One sync send, then pipelined (auto-batched) sends, as the demo does."""
    with Producer("e2e-pg", namesrv=namesrv) as p:
        first = p.send(_order(topic, 0))
        futs = [p.send_async(_order(topic, i)) for i in range(1, count)]
        return [first] + [f.result(10) for f in futs]


def test_send_pull_commit_and_progress(e2e, admin):
    admin.create_topic("E2eOrders", queues=4)
    results = _send_orders(e2e.namesrv, "E2eOrders", 300)
    assert all(r.status is SendStatus.SEND_OK for r in results)
    assert len({r.msg_id for r in results}) == 300 and len({r.queue_id for r in results}) == 4
    with PullConsumer("e2e-all", namesrv=e2e.namesrv, consume_from="first") as c:
        c.subscribe("E2eOrders")
        got = drain(c, 300, 15)
        c.commit()
    assert sorted(m.body for m in got) == sorted(f"order #{i}".encode() for i in range(300))
    progress = admin.consumer_progress("e2e-all", ["E2eOrders"])
    assert len(progress) == 4 and all(row["lag"] == 0 for row in progress)
    assert sum(row["consumer_offset"] for row in progress) == 300


def test_tag_filter(e2e, admin):
    admin.create_topic("E2eTags", queues=4)
    _send_orders(e2e.namesrv, "E2eTags", 100)
    with PullConsumer("e2e-tags", namesrv=e2e.namesrv, consume_from="first") as c:
        c.subscribe("E2eTags", "paid")
        got = drain(c, 50, 15) + c.poll(0.5)
    assert sorted(int(m.properties["amount"]) for m in got) == list(range(1, 100, 2))
    assert {m.tags for m in got} == {"paid"}


def test_sql92_filter_through_the_filter_server(e2e, admin):
    admin.create_topic("E2eSql", queues=4)
    _send_orders(e2e.namesrv, "E2eSql", 200)
    with PullConsumer("e2e-sql", namesrv=e2e.namesrv, consume_from="first") as c:
        c.subscribe("E2eSql", MessageSelector.sql("amount BETWEEN 100 AND 109"))
        got = drain(c, 10, 15) + c.poll(0.5)
    assert sorted(int(m.properties["amount"]) for m in got) == list(range(100, 110))
    with PullConsumer("e2e-sql-bad", namesrv=e2e.namesrv) as c:   # a broken expression fails at subscribe
        with pytest.raises(SubscriptionParseError):
            c.subscribe("E2eSql", MessageSelector.sql("amount BETWEEN AND"))


def test_delay_level_through_the_scheduler(e2e, admin):
    admin.create_topic("E2eDelay", queues=1)
    with PullConsumer("e2e-delay", namesrv=e2e.namesrv, consume_from="first") as c, \
            Producer("e2e-delay", namesrv=e2e.namesrv) as p:
        c.subscribe("E2eDelay")
        sent = p.send(Message("E2eDelay", b"see you in a second", tags="delayed", delay_level=1))
        assert c.poll(0.3) == []                       # parked in SCHEDULE_TOPIC_XXXX, not yet visible
        got = drain(c, 1, 10)
    assert [m.msg_id for m in got] == [sent.msg_id] and got[0].tags == "delayed"
    assert got[0].store_timestamp - got[0].born_timestamp >= 900    # level 1 is 1 s on this broker
    assert "DELAY" not in got[0].properties


def test_transaction_commit_rollback_and_check_back(e2e, admin):
    admin.create_topic("E2eTx", queues=2)
    decided = {b"debit-2": TransactionState.COMMIT}    # what the "database" says when asked later
    tp = TransactionProducer("e2e-tx", namesrv=e2e.namesrv, checker=lambda m: decided[m.body])
    with tp, PullConsumer("e2e-tx-c", namesrv=e2e.namesrv, consume_from="first") as c:
        c.subscribe("E2eTx")
        committed = tp.send_in_transaction(Message("E2eTx", b"debit-1"), lambda m, a: TransactionState.COMMIT)
        tp.send_in_transaction(Message("E2eTx", b"debit-rb"), lambda m, a: TransactionState.ROLLBACK)
        unknown = tp.send_in_transaction(Message("E2eTx", b"debit-2"), lambda m, a: TransactionState.UNKNOWN)
        got = drain(c, 2, 20)                          # debit-2 only after the txn-checker asked
        got += c.poll(0.5)
    assert sorted(m.body for m in got) == [b"debit-1", b"debit-2"]
    assert committed.local_state is TransactionState.COMMIT and unknown.local_state is TransactionState.UNKNOWN
    assert tp._checks_answered >= 1
    _wait(lambda: not admin.open_transactions().get("e2e-tx"), 10, "no open transaction left")


def test_retry_then_dead_letter_then_resend(e2e, admin):
    admin.create_topic("E2eWork", queues=1)
    admin.set_group_config("e2e-retry", retry_max_times=2)
    attempts, lock, healed = [], threading.Lock(), threading.Event()

    def listener(msgs):
        with lock:
            attempts.extend((m.body, m.reconsume_times) for m in msgs)
        return ConsumeResult.SUCCESS if healed.is_set() else ConsumeResult.RECONSUME_LATER
    pc = PushConsumer("e2e-retry", namesrv=e2e.namesrv, consume_from="first", threads=2)
    pc.subscribe("E2eWork")
    pc.register(listener)
    with pc, Producer("e2e-pg", namesrv=e2e.namesrv) as p:
        sent = p.send(Message("E2eWork", b"poison", keys=["job-1"]))
        dead = _wait(lambda: admin.dlq_messages("e2e-retry"), 60, "the dead letter")
        assert [(b, n) for b, n in attempts] == [(b"poison", 0), (b"poison", 1), (b"poison", 2)]
        assert dead[0].body == b"poison" and dead[0].properties.get("DLQ_ORIGIN_MESSAGE_ID") == sent.msg_id
        healed.set()
        assert len(admin.resend_dlq("e2e-retry")) == 1
        _wait(lambda: len(attempts) == 4, 20, "the resent message")
    assert attempts[-1][0] == b"poison"


def test_query_by_key_and_view_by_msg_id(e2e, admin):
    admin.create_topic("E2eLookup", queues=4)
    results = _send_orders(e2e.namesrv, "E2eLookup", 60)
    hits = admin.query_by_key("E2eLookup", "order-42")
    assert [m.body for m in hits] == [b"order #42"]
    first = results[0]
    assert admin.view_message(first.offset_msg_id).body == b"order #0"           # by offset msgId
    assert admin.view_message(results[7].msg_id, topic="E2eLookup").body == b"order #7"   # by unique id


def test_orderly_keeps_each_key_in_order(e2e, admin):
    admin.create_topic("E2eSeq", queues=4, order=True)
    keys, per_key = [f"acct-{k}" for k in range(6)], 30
    seen, lock = [], threading.Lock()

    def listener(msgs):
        with lock:
            seen.extend(m.body.decode().split(":") for m in msgs)
        return ConsumeResult.SUCCESS
    c = PushConsumer("e2e-seq", namesrv=e2e.namesrv, consume_from="first")
    c.subscribe("E2eSeq")
    c.register(listener, orderly=True)
    with c, Producer("e2e-pg", namesrv=e2e.namesrv) as p:
        for i in range(per_key):
            for k in keys:
                p.send_orderly(Message("E2eSeq", f"{k}:{i}".encode()), sharding_key=k)
        _wait(lambda: len(seen) >= len(keys) * per_key, 20, "every message")
    for k in keys:
        assert [int(i) for key, i in seen if key == k] == list(range(per_key)), k


def test_push_consumer_with_tags(e2e, admin):
    admin.create_topic("E2ePush", queues=4)
    _send_orders(e2e.namesrv, "E2ePush", 200)
    seen, lock = [], threading.Lock()

    def listener(msgs):
        with lock:
            seen.extend(msgs)
        return ConsumeResult.SUCCESS
    c = PushConsumer("e2e-push", namesrv=e2e.namesrv, consume_from="first")
    c.subscribe("E2ePush", "created")
    c.register(listener)
    with c:
        _wait(lambda: len(seen) >= 100, 20, "100 'created' messages")
        time.sleep(0.3)                                 # nothing more arrives: the rest are 'paid'
    assert sorted(int(m.properties["amount"]) for m in seen) == list(range(0, 200, 2))
    assert all(row["lag"] == 0 for row in admin.consumer_progress("e2e-push", ["E2ePush"]))
