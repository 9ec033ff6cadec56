"""Broker metadata through SQLAlchemy: topics, subscription groups, consumer offsets.

SQLite in the data dir by default; any SQLAlchemy URL (PostgreSQL...) by flag.
Several brokers may share one database: every row carries its owner in a `broker`
column, first in each primary key, and a `Metadata` reads and writes only the rows
of the owner it was made for. The owner is the broker name for a master and
`<name>@<id>` for a slave (`owner()`): a slave keeps a mirror of its master's topics
and groups plus offsets it advanced itself (ha_slave.py), and must not overwrite its
master's rows when both share a PostgreSQL ('@' is not allowed in a broker name, so
no master's name can equal a slave's owner).
The schema is Alembic's (migrations/): at start the database is upgraded to the
newest revision, after waiting up to `wait_s` for it to accept connections (a
PostgreSQL that starts next to the broker).
Offsets live in memory and are written in one transaction every few seconds
(and on shutdown), as RocketMQ persists consumerOffset.json. An offset outside
0..2^63-1 (what a BIGINT holds) is refused when it is set. A save that fails
loses nothing: its rows are written one by one, and those that still fail stay
marked for the next save (with whatever newer value they have by then).
A topic or group is in memory only once its row is stored; a database that
cannot store it (disk full, locked, gone) answers SERVICE_NOT_AVAILABLE.
"""

import contextlib
import logging
import threading
import time

from sqlalchemy import (BigInteger, Column, Integer, MetaData, String, Table, create_engine, delete,
                        insert, select, update)
from sqlalchemy.exc import DisconnectionError, InterfaceError, OperationalError

from quiver.errors import InvalidParameterError, ServiceNotAvailableError

from . import migrations

log = logging.getLogger(__name__)

MAX_OFFSET = 2 ** 63 - 1
# how long a reset offset overrides a group's commits and pulls of a queue at most (RocketMQ's
# resetOffsetTable): longer than a held pull and a client's heartbeat expiry
RESET_HOLD_S = 150.0
# the database itself is unusable (locked, gone, disk I/O): trying the next row would fail the same way
_DB_DOWN = (OperationalError, InterfaceError, DisconnectionError)

# the schema of the newest revision (migrations/versions/); tests/unit check they agree
_meta = MetaData()
topics_t = Table("topics", _meta,
                 Column("broker", String(255), primary_key=True),
                 Column("name", String(255), primary_key=True),
                 Column("read_queues", Integer, nullable=False),
                 Column("write_queues", Integer, nullable=False),
                 Column("perm", Integer, nullable=False),
                 Column("sysflag", Integer, nullable=False, default=0),
                 Column("order_topic", Integer, nullable=False, default=0))
groups_t = Table("subscription_groups", _meta,
                 Column("broker", String(255), primary_key=True),
                 Column("name", String(255), primary_key=True),
                 Column("retry_max_times", Integer, nullable=False, default=16),
                 Column("consume_enable", Integer, nullable=False, default=1))
offsets_t = Table("consumer_offsets", _meta,
                  Column("broker", String(255), primary_key=True),
                  Column("grp", String(255), primary_key=True),
                  Column("topic", String(255), primary_key=True),
                  Column("queue_id", Integer, primary_key=True, autoincrement=False),
                  Column("offset", BigInteger, nullable=False),
                  Column("updated_ms", BigInteger, nullable=False))


def owner(broker_name: str, broker_id: int = 0) -> str:
    """Whose rows a broker reads and writes: its name for a master, `<name>@<id>` for a slave."""
    return broker_name if broker_id == 0 else f"{broker_name}@{broker_id}"


class Metadata:
    """The rows of `broker` (see `owner()`) in the database at `url`, upgraded to the newest
    revision first; `wait_s`: how long a database that refuses connections is retried at start."""

    def __init__(self, url: str, *, broker: str, wait_s: float = 0.0):
        self.broker = broker
        self.engine = create_engine(url, future=True)
        wait_until_reachable(self.engine, wait_s)
        migrations.upgrade(self.engine, broker)
        self.topics: dict[str, dict] = {}
        self.groups: dict[str, dict] = {}
        self.offsets: dict[tuple[str, str, int], int] = {}
        self._dirty: set = set()
        self._resets: dict[tuple[str, str, int], tuple[int, float]] = {}  # key -> (offset, held until)
        self._lock = threading.Lock()  # the persist job runs on another thread
        self._load()

    def _load(self) -> None:
        with self.engine.connect() as conn:
            for r in conn.execute(select(topics_t).where(self._mine(topics_t))):
                self.topics[r.name] = {"read": r.read_queues, "write": r.write_queues, "perm": r.perm,
                                       "sysflag": r.sysflag, "order": bool(r.order_topic)}
            for r in conn.execute(select(groups_t).where(self._mine(groups_t))):
                self.groups[r.name] = {"retry_max_times": r.retry_max_times, "consume_enable": bool(r.consume_enable)}
            for r in conn.execute(select(offsets_t).where(self._mine(offsets_t))):
                self.offsets[(r.grp, r.topic, r.queue_id)] = r.offset

    # ---- topics ---------------------------------------------------------------

    def put_topic(self, name: str, read: int, write: int, perm: int = 6, sysflag: int = 0, order=False) -> dict:
        conf = {"read": read, "write": write, "perm": perm, "sysflag": sysflag, "order": bool(order)}
        row = {"read_queues": read, "write_queues": write, "perm": perm, "sysflag": sysflag, "order_topic": int(bool(order))}
        with _saved(f"topic {name!r}"), self.engine.begin() as conn:
            if name in self.topics:
                conn.execute(update(topics_t).where(self._mine(topics_t) & (topics_t.c.name == name))
                             .values(**row))
            else:
                conn.execute(insert(topics_t).values(broker=self.broker, name=name, **row))
        self.topics[name] = conf  # only once stored
        return conf

    def delete_topic(self, name: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(delete(topics_t).where(self._mine(topics_t) & (topics_t.c.name == name)))
            conn.execute(delete(offsets_t).where(self._mine(offsets_t) & (offsets_t.c.topic == name)))
        self.topics.pop(name, None)
        with self._lock:
            for key in [k for k in self.offsets if k[1] == name]:
                self.offsets.pop(key, None)
                self._dirty.discard(key)

    # ---- groups -----------------------------------------------------------------

    def put_group(self, name: str, retry_max_times: int = 16) -> None:
        with _saved(f"group {name!r}"), self.engine.begin() as conn:
            if name in self.groups:
                conn.execute(update(groups_t).where(self._mine(groups_t) & (groups_t.c.name == name))
                             .values(retry_max_times=retry_max_times))
            else:
                conn.execute(insert(groups_t).values(broker=self.broker, name=name, retry_max_times=retry_max_times,
                                                     consume_enable=1))
        self.groups[name] = {"retry_max_times": retry_max_times, "consume_enable": True}

    def delete_group(self, name: str, clean_offset: bool = True) -> bool:
        """Drop a group's config (and its offsets); False if this broker knew neither."""
        known = name in self.groups or any(k[0] == name for k in self.offsets)
        with self.engine.begin() as conn:
            conn.execute(delete(groups_t).where(self._mine(groups_t) & (groups_t.c.name == name)))
            if clean_offset:
                conn.execute(delete(offsets_t).where(self._mine(offsets_t) & (offsets_t.c.grp == name)))
        self.groups.pop(name, None)
        if clean_offset:
            with self._lock:
                for key in [k for k in self.offsets if k[0] == name]:
                    self.offsets.pop(key, None)
                    self._dirty.discard(key)
        return known

    # ---- offsets --------------------------------------------------------------------

    def get_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        return self.offsets.get((group, topic, queue_id))

    def set_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        _check_offset(offset)
        key = (group, topic, queue_id)
        with self._lock:
            self.offsets[key] = offset
            self._dirty.add(key)

    def advance_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Set the offset unless it would move backwards (piggy-backed commits may arrive late)."""
        _check_offset(offset)
        key = (group, topic, queue_id)
        with self._lock:
            if offset > self.offsets.get(key, -1):
                self.offsets[key] = offset
                self._dirty.add(key)

    def reset_offset(self, group: str, topic: str, queue_id: int, offset: int, now: float | None = None) -> None:
        """An admin's reset: the offset is set, and until a pull of the group arrives at it
        (`reset_target`) the group's commits of other offsets of the queue are ignored: they
        were made before its consumers learnt of the reset (a pull in flight, a queue given up
        in a rebalance, a consumer shutting down) and would undo it."""
        _check_offset(offset)
        key = (group, topic, queue_id)
        with self._lock:
            self.offsets[key] = offset
            self._dirty.add(key)
            self._resets[key] = (offset, (time.monotonic() if now is None else now) + RESET_HOLD_S)

    def _held_reset(self, key, now: float | None) -> int | None:
        held = self._resets.get(key)
        if held is None:
            return None
        if held[1] <= (time.monotonic() if now is None else now):
            del self._resets[key]
            return None
        return held[0]

    def reset_target(self, group: str, topic: str, queue_id: int, offset: int, now: float | None = None) -> int | None:
        """Where a pull of the group at `offset` must go instead: the reset offset while one
        is held and the pull is elsewhere (a consumer that has not moved yet), else None. A
        pull at the reset offset ends the hold: its consumer consumes from there."""
        key = (group, topic, queue_id)
        with self._lock:
            target = self._held_reset(key, now)
            if target is None:
                return None
            if target == offset:
                del self._resets[key]
                return None
            return target

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int, advance: bool = False,
                      now: float | None = None) -> bool:
        """A consumer's commit (`advance`: a pull's piggy-backed one, never backwards); ignored
        while a reset of the queue to another offset is held (see reset_offset). True if taken."""
        _check_offset(offset)
        key = (group, topic, queue_id)
        with self._lock:
            held = self._held_reset(key, now)
            if held is not None and held != offset:
                return False
            if advance and offset <= self.offsets.get(key, -1):
                return False
            self.offsets[key] = offset
            self._dirty.add(key)
            return True

    def group_offsets(self, group: str) -> dict[tuple[str, int], int]:
        return {(t, q): o for (g, t, q), o in self.offsets.items() if g == group}

    def persist_offsets(self) -> int:
        """Write changed offsets in one transaction, else row by row; returns how many were saved.
        Rows not saved are marked changed again, so the next call retries them."""
        with self._lock:
            dirty, self._dirty = self._dirty, set()
            rows = [(k, self.offsets[k]) for k in dirty if k in self.offsets]
        if not rows:
            return 0
        try:
            self._write(rows)
            return len(rows)
        except Exception as exc:  # any failure: nothing of this transaction was stored
            if isinstance(exc, _DB_DOWN):
                self._retry_later([k for k, _ in rows], exc)
                return 0
            first = exc
        saved, failed = 0, []
        for i, row in enumerate(rows):  # one bad row must not keep the others from being saved
            try:
                self._write([row])
                saved += 1
            except Exception as exc:
                failed.append(row[0])
                if isinstance(exc, _DB_DOWN):
                    failed.extend(k for k, _ in rows[i + 1:])
                    first = exc
                    break
        self._retry_later(failed, first)
        return saved

    def _write(self, rows) -> None:
        now = int(time.time() * 1000)
        with self.engine.begin() as conn:
            for (g, t, q), off in rows:
                res = conn.execute(update(offsets_t).where(
                    self._mine(offsets_t) & (offsets_t.c.grp == g) & (offsets_t.c.topic == t)
                    & (offsets_t.c.queue_id == q)
                ).values(offset=off, updated_ms=now))
                if res.rowcount == 0:
                    conn.execute(insert(offsets_t).values(broker=self.broker, grp=g, topic=t, queue_id=q, offset=off,
                                                          updated_ms=now))

    def _mine(self, table):
        return table.c.broker == self.broker

    def _retry_later(self, keys, exc: Exception) -> None:
        if not keys:
            return
        with self._lock:  # merged with what changed meanwhile: the newest value is the one saved next
            self._dirty.update(k for k in keys if k in self.offsets)
        log.warning("%d consumer offset(s) not saved, kept for the next save (first: %s): %s",
                    len(keys), keys[0], exc)

    def close(self) -> None:
        self.persist_offsets()
        self.engine.dispose()


def wait_until_reachable(engine, wait_s: float, sleep=time.sleep) -> None:
    """Connect, retrying a database that refuses (not up yet, starting) for up to `wait_s` seconds;
    then raise RuntimeError saying which database and why."""
    deadline, delay, said = time.monotonic() + wait_s, 0.2, False
    while True:
        try:
            with engine.connect():
                break
        except _DB_DOWN as exc:
            why = " ".join(str(getattr(exc, "orig", None) or exc).split())
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"metadata database {_shown(engine)} not reachable"
                                   f"{f' after {wait_s:g} s' if wait_s > 0 else ''}: {why}") from None
            if not said:
                log.warning("metadata database %s not reachable yet, retrying for up to %g s "
                            "(--metadata-wait-ms): %s", _shown(engine), wait_s, why)
                said = True
            sleep(min(delay, left))
            delay = min(delay * 2, 2.0)
    if said:
        log.info("metadata database %s reachable", _shown(engine))


def _shown(engine) -> str:
    return engine.url.render_as_string(hide_password=True)


def _check_offset(offset) -> None:
    if type(offset) is int and 0 <= offset <= MAX_OFFSET:
        return
    got = (type(offset).__name__ if type(offset) is not int
           else offset if offset.bit_length() <= 128 else f"an integer of {offset.bit_length()} bits")
    raise InvalidParameterError(f"consumer offset must be an integer 0..{MAX_OFFSET}, got {got}")


@contextlib.contextmanager
def _saved(what: str):
    """A database that cannot take the write (disk full, locked, gone) -> SERVICE_NOT_AVAILABLE."""
    try:
        yield
    except _DB_DOWN as exc:
        raise ServiceNotAvailableError(f"{what} not saved, the metadata database refused it: "
                                       f"{getattr(exc, 'orig', None) or exc}") from None
