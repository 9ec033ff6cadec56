"""The short demo `quiver up --demo` runs: one pass over the main features.

Send (sync, pipelined), consume with a tag filter, query by key and msgId, a
delayed message through the scheduler, a SQL92 subscription through a filter
server, a transactional message, and a push consumer. Each step prints one
line; a step whose service is not running says so and the demo goes on.
"""

import threading
import time

from quiver.client.admin import Admin
from quiver.client.consumer import PullConsumer
from quiver.errors import QuiverError
from quiver.client.message import ConsumeResult, Message, MessageSelector, TransactionState
from quiver.client.producer import Producer


def _drain(consumer, want: int, timeout: float) -> list:
    got, deadline = [], time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        got.extend(consumer.poll(0.2))
    return got


def run_demo(namesrv: str, topic: str = "DemoOrders", count: int = 1000) -> None:
    admin = Admin(namesrv=namesrv)
    admin.create_topic(topic, queues=4)
    print(f"demo: created topic {topic} with 4 queues")
    with Producer("demo-producer", namesrv=namesrv) as p:
        first = p.send(Message(topic, b"order #0", tags="created", keys=["order-0"], properties={"amount": "0"}))
        print(f"demo: sync send -> {first.status.value} msg_id={first.msg_id} queue={first.queue_id}")
        t0 = time.perf_counter()
        futs = [p.send_async(Message(topic, f"order #{i}".encode(), tags="created" if i % 2 else "paid",
                                     keys=[f"order-{i}"], properties={"amount": str(i)})) for i in range(1, count)]
        for f in futs:
            f.result()
        print(f"demo: {count - 1} pipelined sends in {time.perf_counter() - t0:.2f} s")
    with PullConsumer("demo-consumer", namesrv=namesrv, consume_from="first") as c:
        c.subscribe(topic, "paid")
        got = _drain(c, count // 2 - 1, 10)
        c.commit()
        print(f"demo: consumer with tag filter 'paid' got {len(got)} messages")
    hits = admin.query_by_key(topic, "order-42")
    print(f"demo: query by key order-42 -> {[m.body.decode() for m in hits]}")
    view = admin.view_message(first.offset_msg_id)
    print(f"demo: view by offset msgId {first.offset_msg_id} -> {view.body.decode()!r}")
    for step in (_sql92, _delayed, _transaction, _push):
        try:
            step(namesrv, topic)
        except QuiverError as exc:
            print(f"demo: {step.__name__.strip('_')} skipped: {exc}")
    admin.shutdown()


def _sql92(namesrv: str, topic: str) -> None:
    with PullConsumer("demo-sql", namesrv=namesrv, consume_from="first") as c:
        c.subscribe(topic, MessageSelector.sql("amount BETWEEN 100 AND 109"))
        got = _drain(c, 10, 10)
    print(f"demo: SQL92 'amount BETWEEN 100 AND 109' through a filter server -> "
          f"{sorted(m.body.decode() for m in got)[:3]}... ({len(got)} messages)")


def _delayed(namesrv: str, topic: str) -> None:
    with PullConsumer("demo-delay", namesrv=namesrv, consume_from="last") as c, \
            Producer("demo-delay", namesrv=namesrv) as p:
        c.subscribe(topic, "delayed")
        c.poll(0.3)
        t0 = time.monotonic()
        p.send(Message(topic, b"see you in a second", tags="delayed", delay_level=1))
        got = _drain(c, 1, 10)
    if got:
        print(f"demo: delay level 1 -> delivered by the scheduler after {time.monotonic() - t0:.2f} s")
    else:
        print("demo: delayed message not delivered in 10 s (is the scheduler running?)")


def _transaction(namesrv: str, topic: str) -> None:
    from quiver.client.transaction_producer import TransactionProducer
    tp = TransactionProducer("demo-tx", namesrv=namesrv, checker=lambda msg: TransactionState.COMMIT)
    tp.start()
    try:
        with PullConsumer("demo-tx-c", namesrv=namesrv, consume_from="last") as c:
            c.subscribe(topic, "tx")
            c.poll(0.3)
            r = tp.send_in_transaction(Message(topic, b"debit done", tags="tx"),
                                       execute=lambda msg, arg: TransactionState.COMMIT)
            got = _drain(c, 1, 10)
        print(f"demo: transactional message {r.msg_id}: half stored, local transaction committed, "
              f"consumer got {len(got)}")
    finally:
        tp.shutdown()


def _push(namesrv: str, topic: str) -> None:
    from quiver.client.push_consumer import PushConsumer
    seen, done = [], threading.Event()

    def listener(msgs):
        seen.extend(msgs)
        if len(seen) >= 100:
            done.set()
        return ConsumeResult.SUCCESS
    c = PushConsumer("demo-push", namesrv=namesrv, consume_from="first")
    c.subscribe(topic, "created")
    c.register(listener)
    c.start()
    try:
        done.wait(10)
    finally:
        c.shutdown()
    print(f"demo: push consumer listener called for {len(seen)} 'created' messages")
