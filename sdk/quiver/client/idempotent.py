"""Exactly-once effects for an at-least-once consumer: dedupe in the app's own database.

    seen = SqlDedupe(engine, group="billing")           # table quiver_consumed, made if absent
    def on_messages(msgs):
        for m in msgs:
            with engine.begin() as conn:                # one database transaction per message
                if not seen.claim(conn, m):             # delivered before: its effect is committed
                    continue
                conn.execute(charge.insert().values(order=m.json()["order"]))
        return ConsumeResult.SUCCESS

`claim` inserts (group, key) in the same database transaction as the app's
write: if the transaction commits, the key is recorded with the effect; if it
rolls back (or the process dies first) neither exists and the redelivery does
the work. A second delivery, also a concurrent one on another consumer, finds
the key and returns False. The key defaults to the message's unique id
(UNIQ_KEY: the same for every redelivery, retry and DLQ resend); pass
`key=lambda m: m.keys[0]` for a business key. `purge` drops keys older than
the window in which a duplicate can still arrive.

Owns the table `quiver_consumed` (group, msg_key, consumed_ms) and nothing else;
SQLite and PostgreSQL are supported (their INSERT .. ON CONFLICT DO NOTHING).
"""

import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import BigInteger, Column, MetaData, String, Table, delete
from sqlalchemy.engine import Connection, Engine

CONSUMED_TABLE = "quiver_consumed"
MAX_KEY = 255


def consumed_table(metadata: MetaData | None = None, name: str = CONSUMED_TABLE) -> Table:
    return Table(name, metadata or MetaData(),
                 Column("group", String(255), primary_key=True),
                 Column("msg_key", String(MAX_KEY), primary_key=True),
                 Column("consumed_ms", BigInteger, nullable=False, index=True))


def _unique_id(msg: Any) -> str:
    return msg.msg_id


class SqlDedupe:
    """Remembers which messages of a consumer group took effect, in the app's database."""

    def __init__(self, engine: Engine, group: str, key: Callable[[Any], str] = _unique_id,
                 table: str = CONSUMED_TABLE, create_table: bool = True):
        if not group:
            raise ValueError("SqlDedupe needs the consumer group (keys are per group)")
        self.group = group
        self.key = key
        self.table = consumed_table(name=table)
        self._insert = _insert_for(engine.dialect.name)
        if create_table:
            self.table.metadata.create_all(engine)

    def claim(self, conn: Connection, msg: Any) -> bool:
        """Record `msg` as consumed inside the caller's transaction `conn`: True the first time
        (do the work), False if it took effect before (skip it)."""
        key = self.key(msg)
        if not isinstance(key, str) or not key or len(key) > MAX_KEY:
            raise ValueError(f"a dedupe key must be a non-empty string of at most {MAX_KEY} characters, "
                             f"got {key!r:.80}")
        stmt = self._insert(self.table).values(group=self.group, msg_key=key,
                                                consumed_ms=int(time.time() * 1000))
        # RETURNING, not rowcount: some drivers (psycopg 3) report -1 for INSERT .. ON CONFLICT
        return conn.execute(stmt.on_conflict_do_nothing().returning(self.table.c.msg_key)).first() is not None

    def purge(self, conn: Connection, older_than_s: float) -> int:
        """Forget keys consumed more than `older_than_s` ago (past any redelivery); returns how many."""
        cutoff = int((time.time() - older_than_s) * 1000)
        t = self.table.c
        return conn.execute(delete(self.table).where(t.group == self.group, t.consumed_ms < cutoff)).rowcount


def _insert_for(dialect: str):
    if dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert
        return insert
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
        return insert
    raise ValueError(f"SqlDedupe supports SQLite and PostgreSQL, not {dialect!r}")
