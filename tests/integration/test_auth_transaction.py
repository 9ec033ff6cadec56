"""Transaction check-back with auth on (real processes: name server, broker, txn-checker, each
with the auth dir): a NORMAL user's TransactionProducer, granted only PUB on its topic, leaves
two half messages UNKNOWN; the txn-checker (its service key) has the broker ask the producer,
whose checker answers COMMIT for one and ROLLBACK for the other over the producer's own CURVE
connection. A consumer with SUB gets the committed one, never the rolled-back one."""

import time

import pytest

from quiver import Message, PullConsumer, TransactionProducer, TransactionState

from support.secure import add_user, secure_cluster
from support.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

CHECKER = ("txn-checker", "quiver_txn", "--check-interval-ms", "300", "--transaction-timeout-ms", "600")


def test_checkback_commits_and_rolls_back_for_a_normal_user(tmp_path):
    with secure_cluster(tmp_path, [CHECKER], topics=["TxAuth"]) as (c, admin, _):
        tina = add_user(admin, "tina", ("topic:TxAuth", ["PUB"]))
        sam = add_user(admin, "sam", ("topic:TxAuth", ["SUB"]), ("group:sam-cg", ["SUB"]))
        later = {b"commit-later": TransactionState.COMMIT, b"rollback-later": TransactionState.ROLLBACK}
        with TransactionProducer("tina-tx", c.namesrv, credentials=tina, checker=lambda m: later[m.body]) as tp:
            for body in later:
                r = tp.send_in_transaction(Message("TxAuth", body), lambda m, a: TransactionState.UNKNOWN)
                assert r.local_state is TransactionState.UNKNOWN
            wait_for(lambda: tp._checks_answered >= 2, 30, "the producer's checker to answer both checks")
            wait_for(lambda: not any(admin.open_transactions().values()), 30, "both halves to be ended")
        got = []
        with PullConsumer("sam-cg", c.namesrv, credentials=sam, consume_from="first") as pc:
            pc.subscribe("TxAuth")
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and not got:
                got += pc.poll(0.3)
            got += pc.poll(1.0)   # a rolled-back message delivered late would show up here
        assert [m.body for m in got] == [b"commit-later"]
