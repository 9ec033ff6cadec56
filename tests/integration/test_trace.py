"""Message trace with real processes: each timeline complete and in order (issue 19, item 3).

Send + consume, a delayed message through the scheduler, a consumer that fails
until the dead-letter topic, a transactional commit, and a traced producer whose
trace topic cannot be written: its sends never fail.
"""

import asyncio
import json
import os
import subprocess
import sys
import threading

import pytest

from quiver import Admin, ConsumeResult, Message, Producer, PushConsumer, TransactionState
from quiver.aio import AsyncAdmin, AsyncPushConsumer, AsyncTransactionProducer
from quiver.client.trace_dispatcher import TraceDispatcher
from quiver.client.transaction_producer import TransactionProducer
from quiver.errors import NoPermissionError
from quiver.tools.local import LocalCluster
from quiver.wire.curve import init_auth_dir
from quiver.tools.trace_view import format_trace
from support.scheduler import sched_cluster
from support.waiting import wait_for

LEVELS = "100ms 100ms 100ms 200ms 200ms 200ms 200ms 200ms 200ms 200ms 200ms 200ms 200ms 200ms 200ms 200ms 200ms 200ms"


def _types(rows):
    return [r["type"] for r in rows]


def _timeline(admin, msg_id, done, timeout=20):
    """Admin.trace once `done(types)` holds (trace records arrive asynchronously)."""
    box = []

    def ready():
        box[:] = admin.trace(msg_id)
        return done(_types(box))
    wait_for(ready, timeout, f"the trace of {msg_id}")
    return box


def _consumer(namesrv, group, topic, listener, **kw):
    pc = PushConsumer(group, namesrv=namesrv, consume_from="first", trace=True, **kw)
    pc.subscribe(topic)
    pc.register(listener)
    return pc


def test_send_and_consume_timeline(make_cluster):
    c = make_cluster()
    admin = Admin(namesrv=c.namesrv)
    admin.create_topic("Orders", queues=2)
    got = threading.Event()
    with Producer("shop", namesrv=c.namesrv, trace=True) as p, \
            _consumer(c.namesrv, "billing", "Orders", lambda msgs: got.set() or ConsumeResult.SUCCESS) as pc:
        pc.start()
        r = p.send(Message("Orders", b"o-1", tags="created", keys=["order-1"]))
        assert got.wait(20)
    rows = _timeline(admin, r.msg_id, lambda t: "SubAfter" in t)
    assert _types(rows) == ["Pub", "SubBefore", "SubAfter"]
    pub, before, after = rows
    assert (pub["group"], pub["status"], pub["topic"], pub["broker"]) == ("shop", "SEND_OK", "Orders", r.broker)
    assert (pub["queue_id"], pub["queue_offset"], pub["keys"], pub["tags"]) == (r.queue_id, r.queue_offset,
                                                                                 "order-1", "created")
    assert pub["cost_ms"] is not None and pub["client"]
    assert before["group"] == after["group"] == "billing" and after["status"] == "SUCCESS"
    assert before["reconsume_times"] == 0 and after["cost_ms"] is not None
    assert pub["time_ms"] <= before["time_ms"] <= after["time_ms"]
    assert len(format_trace(rows)) == 3
    _cli_prints_the_timeline(c.namesrv, r.msg_id, rows)


def _quiver(namesrv, *args):
    return subprocess.run([sys.executable, "-m", "quiver.tools.cli", "--namesrv", namesrv, *args],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "NO_COLOR": "1"})


def _cli_prints_the_timeline(namesrv, msg_id, rows):
    """`quiver msg trace --id` as a process: one line per event, in the order Admin.trace gives."""
    out = _quiver(namesrv, "msg", "trace", "--id", msg_id)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert [line.split()[3] for line in lines] == ["Pub", "SubBefore", "SubAfter"]
    assert "SEND_OK" in lines[0] and "shop" in lines[0] and "Orders@" in lines[0]
    assert "SUCCESS" in lines[2] and "billing" in lines[2]
    doc = _quiver(namesrv, "msg", "trace", "--id", msg_id, "-o", "json")
    assert doc.returncode == 0, doc.stderr
    assert json.loads(doc.stdout) == {"msg_id": msg_id, "trace": rows}


def test_delayed_message_timeline(make_cluster):
    c, _, admin = sched_cluster(make_cluster)
    admin.create_topic("Later", queues=1)
    got = threading.Event()
    with Producer("pg", namesrv=c.namesrv, trace=True) as p, \
            _consumer(c.namesrv, "later-cg", "Later", lambda msgs: got.set() or ConsumeResult.SUCCESS) as pc:
        pc.start()
        r = p.send(Message("Later", b"d", delay_level=2))
        assert got.wait(20)
    rows = _timeline(admin, r.msg_id, lambda t: "SubAfter" in t and "Delayed" in t)  # each sent by its own process
    assert _types(rows) == ["Pub", "Delayed", "SubBefore", "SubAfter"]
    delayed = rows[1]
    assert delayed["topic"] == "Later" and delayed["status"] == "DELIVERED"
    assert delayed["due_ms"] <= delayed["time_ms"] and delayed["late_ms"] >= 0
    assert delayed["group"] == "SCHEDULE_CONSUMER"


def test_retry_until_dlq_timeline(make_cluster):
    c = make_cluster(broker_args=("--delay-levels", LEVELS))
    c.add_service("scheduler", "quiver_scheduler")
    c.wait()
    admin = Admin(namesrv=c.namesrv)
    admin.create_topic("Doomed", queues=1)
    admin.set_group_config("dg", retry_max_times=2)
    with Producer("pg", namesrv=c.namesrv, trace=True) as p, \
            _consumer(c.namesrv, "dg", "Doomed", lambda msgs: ConsumeResult.RECONSUME_LATER) as pc:
        pc.start()
        r = p.send(Message("Doomed", b"poison", keys=["k1"]))
        wait_for(lambda: admin.dlq_messages("dg"), 60, "the dead letter")
    rows = _timeline(admin, r.msg_id, lambda t: "DLQ" in t and t.count("SubAfter") == 3)
    consumer_side = [t for t in _types(rows) if t not in ("Delayed",)]  # each retry also passes the scheduler
    assert consumer_side == ["Pub", "SubBefore", "SubAfter", "Retry", "SubBefore", "SubAfter", "Retry",
                             "SubBefore", "SubAfter", "DLQ"]
    afters = [x for x in rows if x["type"] == "SubAfter"]
    assert [x["status"] for x in afters] == ["FAILED"] * 3
    assert [x["reconsume_times"] for x in afters] == [0, 1, 2]
    retries = [x for x in rows if x["type"] == "Retry"]
    assert all(x["group"] == "dg" and x["retry_topic"] == "%RETRY%dg" for x in retries)
    assert rows[-1]["dlq_topic"] == "%DLQ%dg" and rows[-1]["topic"] == "Doomed"


def test_transactional_commit_timeline(make_cluster):
    c = make_cluster()
    admin = Admin(namesrv=c.namesrv)
    admin.create_topic("Pay", queues=1)
    got = threading.Event()
    with TransactionProducer("tpg", namesrv=c.namesrv, trace=True) as tp, \
            _consumer(c.namesrv, "pay-cg", "Pay", lambda msgs: got.set() or ConsumeResult.SUCCESS) as pc:
        pc.start()
        r = tp.send_in_transaction(Message("Pay", b"p"), lambda m, a: TransactionState.COMMIT)
        assert got.wait(20)
    rows = _timeline(admin, r.msg_id, lambda t: "SubAfter" in t)
    assert _types(rows) == ["Pub", "EndTransaction", "SubBefore", "SubAfter"]
    assert rows[0]["transaction"] == "half" and rows[0]["group"] == "tpg"
    assert rows[1]["status"] == "COMMIT" and rows[1]["from_check"] is False


def test_trace_topic_unwritable_never_fails_a_send(make_cluster):
    c = make_cluster()
    admin = Admin(namesrv=c.namesrv)
    admin.create_topic("Orders", queues=1)
    with Producer("shop", namesrv=c.namesrv, trace=True) as p:
        # the trace topic behind a name server that does not answer, and a queue of one message
        p.tracer.dispatcher.close(0)
        dead = TraceDispatcher("127.0.0.1:1", max_pending_msgs=1)
        p.tracer.dispatcher = dead
        results = [p.send(Message("Orders", b"%d" % i)) for i in range(20)]
        results += [f.result(10) for f in [p.send_async(Message("Orders", b"a")) for _ in range(200)]]
        assert all(r.status.name == "SEND_OK" for r in results)
        wait_for(lambda: dead.stats()["dropped"] > 0 and dead.stats()["in_flight"] == 0, 20, "drops counted")
        assert dead.stats()["sent"] == 0
    dead.close(0)


def test_aio_clients_pass_trace_through(make_cluster):
    c = make_cluster()
    admin = Admin(namesrv=c.namesrv)
    admin.create_topic("Aio", queues=1)

    async def main():
        got = asyncio.Event()

        async def handle(msgs):
            got.set()
            return ConsumeResult.SUCCESS
        pc = AsyncPushConsumer("aio-cg", namesrv=c.namesrv, consume_from="first", trace=True)
        pc.subscribe("Aio")
        pc.register(handle)
        async with pc, AsyncTransactionProducer("aio-tp", namesrv=c.namesrv, trace=True) as tp:
            r = await tp.send_in_transaction(Message("Aio", b"a"), lambda m, a: TransactionState.COMMIT)
            await asyncio.wait_for(got.wait(), 20)
        return r
    r = asyncio.run(main())
    rows = _timeline(admin, r.msg_id, lambda t: "SubAfter" in t)
    assert _types(rows) == ["Pub", "EndTransaction", "SubBefore", "SubAfter"]
    assert rows[0]["cost_ms"] is not None and rows[2]["group"] == "aio-cg"

    async def read():
        async with AsyncAdmin(namesrv=c.namesrv) as aa:
            return await aa.trace(r.msg_id)
    assert _types(asyncio.run(read())) == _types(rows)


def test_auth_normal_user_traces_super_user_reads(tmp_path):
    auth = str(tmp_path / "auth")
    admin_creds = init_auth_dir(auth)
    c = LocalCluster(str(tmp_path / "cluster"), auth_dir=auth)
    try:
        c.add_namesrv()
        c.wait()
        c.add_broker()
        c.wait()
        c.wait_registered(1)
        admin = Admin(c.namesrv, credentials=admin_creds)
        admin.create_topic("Orders", queues=1)
        app = admin.acl_add_user("orders-app")      # PUB on its topic, nothing on the trace topic
        admin.acl_grant("orders-app", "topic:Orders", ["PUB"])
        with Producer("shop", namesrv=c.namesrv, credentials=app, trace=True) as p:
            r = p.send(Message("Orders", b"o"))
        rows = _timeline(admin, r.msg_id, lambda t: t == ["Pub"])
        assert rows[0]["group"] == "shop"
        user = Admin(c.namesrv, credentials=app)     # reading the trace topic: SUPER only
        with pytest.raises(NoPermissionError):
            user.trace(r.msg_id)
        user.shutdown()
        admin.shutdown()
    finally:
        for svc in c.services:
            svc.kill()


@pytest.fixture(autouse=True)
def _no_env_trace(monkeypatch):
    monkeypatch.delenv("QUIVER_TRACE", raising=False)
