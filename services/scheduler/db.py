"""The scheduler's persistent state through SQLAlchemy (SQLite in --data-dir by default).

Owns three tables and nothing else:

- `timers`: every timer message this instance has ingested from a broker's
  timer topic, with its body and properties (so a pending timer outlives the
  CommitLog's retention), its due time and state (PENDING, DELIVERED,
  CANCELLED). Delivered rows lose their body and are kept for
  `delivered_keep_ms` so a late cancel can answer "too late".
- `progress`: per broker, the timer-topic offset ingested into `timers`
  (written in the same transaction as the rows).
- `cancels`: (msgId, topic) pairs cancelled before their message was seen
  here; `tombstones`, the same without a topic (written by older versions,
  read and purged, never written).

Level-queue progress is not here: it is the group's consumer offsets on the broker.

The service thread only reads here; its writes are the `write_*` methods, run
by the writer thread (writer.py) inside its group transaction. The plain
methods (`add`, `cancel` ...) are each one transaction of their own, for the
control thread and tests.
"""

import time

from sqlalchemy import (BigInteger, Column, Index, Integer, LargeBinary, MetaData, String, Table, Text,
                        create_engine, delete, event, func, select, update)
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

PENDING, DELIVERED, CANCELLED = 0, 1, 2

_meta = MetaData()
timers_t = Table("timers", _meta,
                 Column("id", String(64), primary_key=True),
                 Column("broker", String(255), nullable=False),
                 Column("due_ms", BigInteger, nullable=False),
                 Column("state", Integer, nullable=False, default=PENDING),
                 Column("queue_offset", BigInteger, nullable=False),
                 Column("stored_ms", BigInteger, nullable=False),
                 Column("flag", Integer, nullable=False, default=0),
                 Column("sys_flag", Integer, nullable=False, default=0),
                 Column("born_ts", BigInteger, nullable=False, default=0),
                 Column("reconsume", Integer, nullable=False, default=0),
                 Column("props", Text, nullable=False),
                 Column("body", LargeBinary),
                 Column("done_ms", BigInteger))
Index("ix_timers_pending", timers_t.c.broker, timers_t.c.state, timers_t.c.due_ms)
progress_t = Table("progress", _meta,
                   Column("broker", String(255), primary_key=True),
                   Column("ingested", BigInteger, nullable=False))
tombstones_t = Table("tombstones", _meta,
                     Column("id", String(64), primary_key=True),
                     Column("created_ms", BigInteger, nullable=False))
cancels_t = Table("cancels", _meta,
                  Column("id", String(64), primary_key=True),
                  Column("topic", String(255), primary_key=True),
                  Column("created_ms", BigInteger, nullable=False))

_COLS = ("id", "broker", "due_ms", "queue_offset", "stored_ms", "flag", "sys_flag", "born_ts", "reconsume",
         "props", "body")
_ROW_COLS = ("id", "broker", "due_ms", "state", "queue_offset", "stored_ms", "flag", "sys_flag", "born_ts",
             "reconsume", "props", "body", "done_ms")
# The hot statements go to the driver as they are, with tuples (executemany): SQLAlchemy's per-row
# work would hold the GIL the service thread needs; in the driver the rows are bound in C.
_UPSERT = (f"INSERT INTO timers ({', '.join(_ROW_COLS)}) VALUES ({', '.join('?' * len(_ROW_COLS))}) "
           "ON CONFLICT (id) DO UPDATE SET queue_offset = excluded.queue_offset, stored_ms = excluded.stored_ms, "
           f"broker = excluded.broker WHERE timers.state = {PENDING}")
_MARK = f"UPDATE timers SET state = {DELIVERED}, body = NULL, done_ms = ? WHERE id = ? AND state = {PENDING}"
_FETCH = f"SELECT {', '.join(_COLS)} FROM timers WHERE state = {PENDING} AND id IN "


class StaleIngest(Exception):
    """An ingest whose start is not where the index's progress is (one before it failed)."""


def _now() -> int:
    return int(time.time() * 1000)


class TimerDB:
    def __init__(self, url: str):
        self.engine = create_engine(url, future=True)
        if url.startswith("sqlite"):
            event.listen(self.engine, "connect", _sqlite_pragmas)
        _meta.create_all(self.engine)
        mark = "?" if self.engine.dialect.paramstyle == "qmark" else "%s"
        self._sql = {k: v.replace("?", mark) for k, v in (("upsert", _UPSERT), ("mark", _MARK))}
        self._mark = mark

    def close(self) -> None:
        self.engine.dispose()

    # ---- ingest ---------------------------------------------------------------------

    def add(self, broker: str, rows: list[dict], ingested: int) -> None:
        """Upsert ingested timers (a rolled copy refreshes offset and stored time) and the progress."""
        with self.engine.begin() as conn:
            self.write_ingest(conn, broker, rows, None, ingested)

    def write_ingest(self, conn, broker: str, rows: list[dict], start: int | None, ingested: int) -> None:
        """`add` within `conn`'s transaction. With `start` (the offset the rows were pulled from), refused
        (StaleIngest) unless the stored progress is `start` or absent: an ingest after one whose write
        failed would otherwise move the progress over the rows that never got in."""
        if start is not None:
            at = conn.execute(select(progress_t.c.ingested).where(progress_t.c.broker == broker)).scalar()
            if at is not None and at != start:
                raise StaleIngest(f"{broker}: ingest from {start}, the index is at {at}")
        if rows:
            conn.exec_driver_sql(self._sql["upsert"], [tuple(r[c] for c in _ROW_COLS) for r in rows])
        self._set_progress(conn, broker, ingested)

    @staticmethod
    def _set_progress(conn, broker, ingested) -> None:
        ins = sqlite_insert(progress_t).values(broker=broker, ingested=ingested)
        conn.execute(ins.on_conflict_do_update(index_elements=["broker"], set_={"ingested": ingested}))

    def progress(self, broker: str) -> int | None:
        with self.engine.connect() as conn:
            return conn.execute(select(progress_t.c.ingested).where(progress_t.c.broker == broker)).scalar()

    def reset_broker(self, broker: str) -> None:
        """Forget a broker's pending timers (they are rebuilt from its timer topic)."""
        with self.engine.begin() as conn:
            conn.execute(delete(timers_t).where(timers_t.c.broker == broker, timers_t.c.state == PENDING))
            conn.execute(delete(progress_t).where(progress_t.c.broker == broker))

    def drop_delivered_by_others(self, broker: str, watermark: int) -> int:
        """Pending rows at or below another owner's delivered watermark were delivered there."""
        with self.engine.begin() as conn:
            return conn.execute(update(timers_t).where(
                timers_t.c.broker == broker, timers_t.c.state == PENDING, timers_t.c.due_ms <= watermark)
                .values(state=DELIVERED, body=None, done_ms=_now())).rowcount

    # ---- delivery -------------------------------------------------------------------

    def due_between(self, brokers, after_ms: int, until_ms: int) -> list[tuple[int, str, str]]:
        """(due, id, broker) of pending timers with after < due <= until."""
        if not brokers:
            return []
        t = timers_t.c
        with self.engine.connect() as conn:
            return [tuple(r) for r in conn.execute(
                select(t.due_ms, t.id, t.broker).where(t.broker.in_(list(brokers)), t.state == PENDING,
                                                       t.due_ms > after_ms, t.due_ms <= until_ms))]

    def fetch_pending(self, ids: list[str]) -> list:
        """Pending rows of `ids` (at most max_reput_batch ids: one statement)."""
        if not ids:
            return []
        with self.engine.connect() as conn:
            return list(conn.exec_driver_sql(f"{_FETCH}({', '.join([self._mark] * len(ids))})", tuple(ids)))

    def mark_delivered(self, ids: list[str]) -> None:
        with self.engine.begin() as conn:
            self.write_delivered(conn, ids)

    def write_delivered(self, conn, ids: list[str]) -> None:
        now = _now()
        conn.exec_driver_sql(self._sql["mark"], [(now, i) for i in ids])

    def min_pending_due(self, broker: str) -> int | None:
        with self.engine.connect() as conn:
            return self.min_pending_in(conn, broker)

    @staticmethod
    def min_pending_in(conn, broker: str) -> int | None:
        t = timers_t.c
        return conn.execute(select(func.min(t.due_ms)).where(t.broker == broker, t.state == PENDING)).scalar()

    def pending_count(self, brokers=None) -> int:
        t = timers_t.c
        q = select(func.count()).select_from(timers_t).where(t.state == PENDING)
        if brokers is not None:
            q = q.where(t.broker.in_(list(brokers)))
        with self.engine.connect() as conn:
            return conn.execute(q).scalar() or 0

    def to_roll(self, brokers, stored_before_ms: int, due_after_ms: int, limit: int = 1000) -> list:
        """Pending timers whose stored copy is old and whose due time is still far."""
        if not brokers:
            return []
        t = timers_t.c
        with self.engine.connect() as conn:
            return list(conn.execute(select(*[timers_t.c[c] for c in _COLS]).where(
                t.broker.in_(list(brokers)), t.state == PENDING, t.stored_ms < stored_before_ms,
                t.due_ms > due_after_ms).limit(limit)))

    # ---- cancel ---------------------------------------------------------------------

    def state_of(self, msg_id: str) -> tuple[int, str] | None:
        """(state, properties) of the timer `msg_id`, or None if it was never ingested here."""
        with self.engine.connect() as conn:
            row = conn.execute(select(timers_t.c.state, timers_t.c.props).where(timers_t.c.id == msg_id)).first()
            return None if row is None else (row.state, row.props)

    def cancel(self, msg_id: str) -> bool:
        with self.engine.begin() as conn:
            return self.write_cancel(conn, msg_id)

    @staticmethod
    def write_cancel(conn, msg_id: str) -> bool:
        return conn.execute(update(timers_t).where(timers_t.c.id == msg_id, timers_t.c.state == PENDING)
                            .values(state=CANCELLED, body=None, done_ms=_now())).rowcount > 0

    def add_tombstone(self, msg_id: str, topic: str) -> None:
        with self.engine.begin() as conn:
            self.write_tombstone(conn, msg_id, topic)

    @staticmethod
    def write_tombstone(conn, msg_id: str, topic: str) -> None:
        conn.execute(sqlite_insert(cancels_t).values(id=msg_id, topic=topic, created_ms=_now())
                     .on_conflict_do_nothing())

    def tombstones(self) -> list[tuple[str, str | None]]:
        """Every (msg id, topic) cancelled before its message was seen; topic None: any topic."""
        with self.engine.connect() as conn:
            old = [(r[0], None) for r in conn.execute(select(tombstones_t.c.id))]
            return old + [(r[0], r[1]) for r in conn.execute(select(cancels_t.c.id, cancels_t.c.topic))]

    # ---- housekeeping ---------------------------------------------------------------------

    def purge(self, done_before_ms: int, tombstones_before_ms: int) -> int:
        with self.engine.begin() as conn:
            return self.write_purge(conn, done_before_ms, tombstones_before_ms)

    @staticmethod
    def write_purge(conn, done_before_ms: int, tombstones_before_ms: int) -> int:
        n = conn.execute(delete(timers_t).where(timers_t.c.state != PENDING,
                                                timers_t.c.done_ms < done_before_ms)).rowcount
        conn.execute(delete(tombstones_t).where(tombstones_t.c.created_ms < tombstones_before_ms))
        conn.execute(delete(cancels_t).where(cancels_t.c.created_ms < tombstones_before_ms))
        return n


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: a killed process loses no committed row
    cur.close()


def row_dict(broker: str, msg_id: str, due: int, rec) -> dict:
    """A timers row from a decoded timer-topic record."""
    return {"id": msg_id, "broker": broker, "due_ms": due, "state": PENDING, "queue_offset": rec.queue_offset,
            "stored_ms": rec.store_ts, "flag": rec.flag, "sys_flag": rec.sys_flag, "born_ts": rec.born_ts,
            "reconsume": rec.reconsume, "props": rec.props, "body": rec.body, "done_ms": None}
