"""Units of the transaction feature: the checker's per-message decision and the SQLAlchemy helper."""

import collections
import time
from types import SimpleNamespace

from sqlalchemy import create_engine, text

from quiver import Message, MessageExt, TransactionState
from quiver.client.transaction import SqlTransaction
from quiver_txn.checking import Checker, _BrokerState
from quiver_txn.config import Config


def _msg(props, born_ms):
    return MessageExt("T", b"x", None, [], props, "id", "", "", 0, 0, 0, born_ms, born_ms, 0)


def test_checker_decisions():
    ck = Checker(SimpleNamespace(), Config(transaction_timeout_ms=1000, max_checks=3), collections.Counter())
    st = _BrokerState()
    now = int(time.time() * 1000)
    tx = "__transactionId__"
    assert ck._decide(_msg({tx: "a"}, now - 5000), st, now) == "c"
    assert ck._decide(_msg({tx: "a"}, now - 10), st, now) is None          # young: stop the scan
    assert ck._decide(_msg({tx: "a", "CHECK_IMMUNITY_TIME_IN_SECONDS": "60"}, now - 5000), st, now) == "r"
    assert ck._decide(_msg({tx: "a", "TRANSACTION_CHECK_TIMES": "3"}, now - 5000), st, now) == "d"
    assert ck._decide(_msg({tx: "a", "TRAN_BORN_MS": str(now - 9000)}, now), st, now) == "c"  # re-put keeps age
    st.resolve("a")
    assert ck._decide(_msg({tx: "a"}, now - 5000), st, now) == "skip"


def test_sql_transaction_execute_and_checker(tmp_path):
    eng = create_engine(f"sqlite:///{tmp_path}/x.db")
    with eng.begin() as c:
        c.execute(text("CREATE TABLE acc (id TEXT PRIMARY KEY, bal INTEGER)"))
        c.execute(text("INSERT INTO acc VALUES ('a', 10)"))

    def work(session, msg, arg):
        session.execute(text("UPDATE acc SET bal = bal - :n WHERE id = 'a'"), {"n": arg})
        if arg > 100:
            raise ValueError("too much")
    tx = SqlTransaction(eng, work, rollback_after_ms=1000)
    m = Message("T", b"x", properties={"__transactionId__": "tx-1"})
    assert tx.execute(m, 3) is TransactionState.COMMIT
    assert tx.execute(Message("T", b"x", properties={"__transactionId__": "tx-2"}), 500) is TransactionState.ROLLBACK
    with eng.connect() as c:
        assert c.execute(text("SELECT bal FROM acc")).scalar() == 7
    now = int(time.time() * 1000)
    assert tx.checker(_msg({"__transactionId__": "tx-1"}, now - 5000)) is TransactionState.COMMIT
    assert tx.checker(_msg({"__transactionId__": "tx-2"}, now)) is TransactionState.UNKNOWN
    assert tx.checker(_msg({"__transactionId__": "tx-2"}, now - 5000)) is TransactionState.ROLLBACK
