"""A ready execute/checker pair for local transactions that are SQLAlchemy sessions.

    tx = SqlTransaction(engine, work)          # work(session, msg, arg) does the app's writes
    tp = TransactionProducer("g", namesrv=..., checker=tx.checker)
    tp.send_in_transaction(msg, tx.execute, arg)

`execute` runs `work` and inserts the transaction id into `quiver_tx_log` in
the same database transaction, so the row exists exactly when the app's
writes were committed. `checker` answers COMMIT when the row exists, ROLLBACK
when it does not and the transaction is older than `rollback_after_ms` (the
local transaction can no longer commit), UNKNOWN otherwise. `work` may return
TransactionState.ROLLBACK (or raise) to abort: its writes are rolled back.
A failure while committing is UNKNOWN: the database may or may not have
committed, and the checker will find out from the log row.
"""

import logging
import time

from sqlalchemy import BigInteger, Column, MetaData, String, Table, select
from sqlalchemy.orm import Session

from quiver.client.message import TransactionState
from quiver.client.transaction_producer import transaction_id

log = logging.getLogger(__name__)

TX_LOG_TABLE = "quiver_tx_log"


def tx_log_table(metadata: MetaData | None = None, name: str = TX_LOG_TABLE) -> Table:
    return Table(name, metadata or MetaData(),
                 Column("tx_id", String(64), primary_key=True),
                 Column("created_ms", BigInteger, nullable=False))


class SqlTransaction:
    def __init__(self, engine, work, rollback_after_ms: int = 60_000, table: str = TX_LOG_TABLE,
                 create_table: bool = True):
        self.engine = engine
        self.work = work
        self.rollback_after_ms = rollback_after_ms
        self.table = tx_log_table(name=table)
        if create_table:
            self.table.metadata.create_all(engine)

    def execute(self, msg, arg=None) -> TransactionState:
        txid = transaction_id(msg)
        if not txid:
            raise ValueError("message has no transaction id: use SqlTransaction.execute with send_in_transaction")
        session = Session(self.engine)
        try:
            session.begin()
            try:
                outcome = self.work(session, msg, arg)
                if outcome is TransactionState.ROLLBACK:
                    session.rollback()
                    return TransactionState.ROLLBACK
                session.execute(self.table.insert().values(tx_id=txid, created_ms=int(time.time() * 1000)))
                session.flush()
            except Exception:
                log.exception("local transaction %s failed: rolled back", txid)
                session.rollback()
                return TransactionState.ROLLBACK
            try:
                session.commit()
            except Exception:
                log.exception("commit of local transaction %s failed: outcome unknown", txid)
                return TransactionState.UNKNOWN
            return TransactionState.COMMIT
        finally:
            session.close()

    def checker(self, msg) -> TransactionState:
        txid = transaction_id(msg)
        with self.engine.connect() as conn:
            found = conn.execute(select(self.table.c.tx_id).where(self.table.c.tx_id == txid)).first()
        if found is not None:
            return TransactionState.COMMIT
        if int(time.time() * 1000) - msg.born_timestamp > self.rollback_after_ms:
            return TransactionState.ROLLBACK
        return TransactionState.UNKNOWN
