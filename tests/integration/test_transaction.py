"""Transactional messages over real processes: commit, rollback, check-backs, max checks, admin."""

import dataclasses
import subprocess
import sys
import time

import pytest

from quiver import Admin, Message, PullConsumer, TransactionProducer, TransactionState
from quiver.wire import record
from quiver.wire.codes import RequestCode
from quiver.errors import MessageIllegalError
from quiver.wire.validation import CHECK_MAX_TOPIC

FAST = ("--check-interval-ms", "300", "--transaction-timeout-ms", "600")


def txn_cluster(make_cluster, *checker_flags):
    c = make_cluster()
    Admin(namesrv=c.namesrv).create_topic("Tx", queues=2)
    c.add_service("txn-checker", "quiver_txn", *(checker_flags or FAST))
    c.wait()
    return c


def drain(namesrv, topic, until, timeout=15.0, group="cg"):
    """Pull `topic` from the start until until(got) or the deadline."""
    got = []
    with PullConsumer(group, namesrv=namesrv, consume_from="first") as pc:
        pc.subscribe(topic)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not until(got):
            got.extend(pc.poll(0.2))
    return got


def wait_no_open(admin, timeout=15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(admin.open_transactions().values()):
            return True
        time.sleep(0.1)
    return False


def test_commit_rollback_unknown_then_checks(make_cluster):
    c = txn_cluster(make_cluster)
    local = {}  # body -> what the "database" says (what the checker answers)
    checker = lambda m: local[m.body]  # noqa: E731
    admin = Admin(namesrv=c.namesrv)
    with TransactionProducer("tpg", namesrv=c.namesrv, checker=checker) as tp:
        def send(body, execute_state, later_state):
            local[body] = later_state
            return tp.send_in_transaction(Message("Tx", body, keys=[body.decode()]),
                                          lambda m, a: execute_state if execute_state else 1 / 0)
        r_commit = send(b"commit", TransactionState.COMMIT, TransactionState.COMMIT)
        r_rb = send(b"rollback", TransactionState.ROLLBACK, TransactionState.COMMIT)  # the checker must not override
        r_uc = send(b"unknown-commit", TransactionState.UNKNOWN, TransactionState.COMMIT)
        send(b"unknown-rollback", TransactionState.UNKNOWN, TransactionState.ROLLBACK)
        r_exc = send(b"raises-commit", None, TransactionState.COMMIT)
        assert r_commit.transaction_id == r_commit.msg_id and r_commit.local_state is TransactionState.COMMIT
        assert r_exc.local_state is TransactionState.UNKNOWN and r_rb.local_state is TransactionState.ROLLBACK
        # a duplicate END_TRANSACTION for a committed half changes nothing
        tp._end(tp._route("Tx").addrs[r_commit.broker],
                [[r_commit.commit_log_offset, r_commit.queue_offset, 8, r_commit.transaction_id]], from_check=True)
        assert wait_no_open(admin), admin.open_transactions()
        assert tp._checks_answered >= 3
    want = {b"commit", b"unknown-commit", b"raises-commit"}
    got = drain(c.namesrv, "Tx", lambda g: {m.body for m in g} >= want, timeout=10)
    time.sleep(0.5)
    got += drain(c.namesrv, "Tx", lambda g: False, timeout=0.5)  # same group: anything late shows up here
    assert sorted(m.body for m in got) == sorted(want)  # each exactly once, no rollback delivered
    ids = {m.body: m.msg_id for m in got}
    assert ids[b"commit"] == r_commit.msg_id and ids[b"unknown-commit"] == r_uc.msg_id
    assert admin.view_message(r_commit.msg_id, topic="Tx").body == b"commit"
    admin.shutdown()


def test_delayed_and_batched_transactional_messages_refused(cluster):
    with TransactionProducer("tpg", namesrv=cluster.namesrv) as tp:
        with pytest.raises(MessageIllegalError, match="delayed"):
            tp.send_in_transaction(Message("Tx", b"x", delay_level=2), lambda m, a: TransactionState.COMMIT)
        with pytest.raises(MessageIllegalError, match="batched"):
            tp.send_in_transaction([Message("Tx", b"x")], lambda m, a: TransactionState.COMMIT)
        # the broker refuses a prepared batch or a prepared delayed message on its own too
        mq, addr = tp._pick("Tx")
        req, frames = tp._request(mq, ["UNIQ_KEY\x01a\x02PGROUP\x01tpg\x02", "UNIQ_KEY\x01b\x02PGROUP\x01tpg\x02"],
                                  [0, 0], [b"x", b"y"])
        req = dataclasses.replace(req, sys_flag=record.TX_PREPARED)
        with pytest.raises(MessageIllegalError, match="batched"):
            tp._call_broker(addr, RequestCode.SEND_BATCH_MESSAGE, req.ext(), frames)


def test_max_checks_discards_to_check_max_topic(make_cluster):
    c = txn_cluster(make_cluster, "--check-interval-ms", "200", "--transaction-timeout-ms", "300", "--max-checks", "2")
    with TransactionProducer("tpg", namesrv=c.namesrv, checker=lambda m: TransactionState.UNKNOWN) as tp:
        r = tp.send_in_transaction(Message("Tx", b"never"), lambda m, a: TransactionState.UNKNOWN)
        admin = Admin(namesrv=c.namesrv)
        assert wait_no_open(admin), admin.open_transactions()
        admin.shutdown()
        gone = drain(c.namesrv, CHECK_MAX_TOPIC, lambda g: len(g) >= 1, timeout=15, group="ops")
        assert [m.msg_id for m in gone] == [r.transaction_id]
        assert gone[0].properties["TRANSACTION_CHECK_TIMES"] == "2"
        assert tp._checks_answered == 2
        # too late now: a commit for a discarded transaction is ignored
        tp._end(tp._route("Tx").addrs[r.broker], [[r.commit_log_offset, r.queue_offset, 8, r.transaction_id]], True)
    time.sleep(0.3)
    assert drain(c.namesrv, "Tx", lambda g: False, timeout=1.0) == []


def test_no_live_producer_is_not_counted_and_immunity_honoured(make_cluster):
    c = txn_cluster(make_cluster, "--check-interval-ms", "200", "--transaction-timeout-ms", "300", "--max-checks", "2")
    admin = Admin(namesrv=c.namesrv)
    with TransactionProducer("lonely", namesrv=c.namesrv) as tp:
        r = tp.send_in_transaction(Message("Tx", b"orphan"), lambda m, a: TransactionState.UNKNOWN)
        immune = tp.send_in_transaction(Message("Tx", b"immune"), lambda m, a: TransactionState.UNKNOWN,
                                        check_immunity_ms=60_000)
    time.sleep(2.0)  # ~10 rounds with nobody to ask: still open, never counted
    rows = {x["transaction_id"]: x for x in admin.open_transactions()[r.broker]}
    assert rows[r.transaction_id]["checks"] == 0 and rows[r.transaction_id]["age_ms"] >= 1500
    assert rows[immune.transaction_id]["checks"] == 0
    out = subprocess.run([sys.executable, "-m", "quiver.tools.cli", "--namesrv", c.namesrv, "txn", "list"],
                         capture_output=True, text=True, timeout=30)
    assert r.transaction_id in out.stdout and "2 open transaction(s)" in out.stdout, out.stderr
    with TransactionProducer("lonely", namesrv=c.namesrv, checker=lambda m: TransactionState.COMMIT) as tp2:
        got = drain(c.namesrv, "Tx", lambda g: len(g) >= 1, timeout=10)
        assert [m.body for m in got] == [b"orphan"]  # the immune one is not asked about yet
        assert tp2._checks_answered == 1
    admin.shutdown()
