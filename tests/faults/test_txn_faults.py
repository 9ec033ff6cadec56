"""Transactions under kill -9: producer, txn-checker and broker; every transaction ends exactly once."""

import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

from quiver import Admin, Message, PullConsumer, TransactionProducer, TransactionState
from quiver.tools.local import wait_healthy
from support.waiting import wait_for as _wait

pytestmark = [pytest.mark.slow, pytest.mark.faults]

CHECKER = ("--check-interval-ms", "300", "--transaction-timeout-ms", "800")

_CRASHY = """
import sys, time
from quiver import Message, TransactionProducer
tp = TransactionProducer("crashy", namesrv=sys.argv[1]).start()
def execute(msg, arg):
    print("HALF", msg.properties["__transactionId__"], flush=True)
    time.sleep(60)  # killed here: the half is stored, no END_TRANSACTION ever comes
tp.send_in_transaction(Message("Tx", b"survivor"), execute)
"""


def _cluster(make_cluster):
    c = make_cluster()
    Admin(namesrv=c.namesrv).create_topic("Tx", queues=2)
    checker = c.add_service("txn-checker", "quiver_txn", *CHECKER)
    c.wait()
    return c, checker


def _no_open(admin):
    try:
        return not any(admin.open_transactions().values())
    except Exception:
        return False


def _delivered(namesrv, want: int, timeout=20.0) -> Counter:
    got = []
    with PullConsumer("cg", namesrv=namesrv, consume_from="first") as pc:
        pc.subscribe("Tx")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and len(got) < want:
            got.extend(pc.poll(0.2))
        end = time.monotonic() + 1.0  # and nothing more shows up
        while time.monotonic() < end:
            got.extend(pc.poll(0.2))
    return Counter(m.keys[0] for m in got)


def test_producer_killed_after_half_second_producer_answers(make_cluster):
    c, _ = _cluster(make_cluster)
    p = subprocess.Popen([sys.executable, "-c", _CRASHY, c.namesrv], stdout=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline().split()
        assert line and line[0] == "HALF", line
        txid = line[1]
    finally:
        os.kill(p.pid, signal.SIGKILL)
        p.wait(10)
    asked = []

    def checker(msg):
        asked.append(msg.msg_id)
        return TransactionState.COMMIT
    with TransactionProducer("crashy", namesrv=c.namesrv, checker=checker):
        got = []
        with PullConsumer("cg", namesrv=c.namesrv, consume_from="first") as pc:
            pc.subscribe("Tx")
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and not got:
                got.extend(pc.poll(0.2))
    assert [(m.body, m.msg_id) for m in got] == [(b"survivor", txid)]
    assert asked == [txid]


def _states(n):
    return {f"k{i}": TransactionState.COMMIT if i % 2 == 0 else TransactionState.ROLLBACK for i in range(n)}


def test_txn_checker_kill9_mid_check_resumes_exactly_once(make_cluster):
    c, checker_svc = _cluster(make_cluster)
    checker_svc.kill()  # halves first, then a checker that dies in the middle of its work
    n = 300
    local = _states(n)

    def checker(msg):
        time.sleep(0.005)
        return local[msg.keys[0]]
    admin = Admin(namesrv=c.namesrv)
    with TransactionProducer("tpg", namesrv=c.namesrv, checker=checker) as tp:
        for k in local:
            tp.send_in_transaction(Message("Tx", k.encode(), keys=[k]), lambda m, a: TransactionState.UNKNOWN)
        time.sleep(0.8)
        checker_svc.args += ["--check-batch", "10", "--pull-batch", "10"]  # many small steps to die between
        checker_svc.start()
        _wait(lambda: tp._checks_answered >= 10, 20, "first check answers")
        checker_svc.kill()
        checker_svc.start()
        wait_healthy([checker_svc])
        _wait(lambda: _no_open(admin), 40, "every transaction resolved")
    got = _delivered(c.namesrv, n // 2)
    assert got == Counter({k: 1 for k, s in local.items() if s is TransactionState.COMMIT})
    admin.shutdown()


def test_broker_kill9_between_half_and_op(make_cluster):
    c, _ = _cluster(make_cluster)
    broker = next(s for s in c.services if s.role == "broker")
    n = 200
    local = _states(n)
    admin = Admin(namesrv=c.namesrv)
    with TransactionProducer("tpg", namesrv=c.namesrv, checker=lambda m: local[m.keys[0]],
                             heartbeat_interval_s=0.5) as tp:
        for i, k in enumerate(local):
            # the first half ends at once; the rest are halves without op when the broker dies
            tp.send_in_transaction(Message("Tx", k.encode(), keys=[k]),
                                   lambda m, a, i=i: local[m.keys[0]] if i < n // 2 else TransactionState.UNKNOWN)
        broker.kill()
        broker.start()
        wait_healthy([broker])
        _wait(lambda: _no_open(admin), 40, "every transaction resolved after the broker restart")
    got = _delivered(c.namesrv, n // 2)
    assert got == Counter({k: 1 for k, s in local.items() if s is TransactionState.COMMIT})
    admin.shutdown()
