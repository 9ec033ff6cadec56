"""Bring a metadata database to the newest revision: what every broker does at start.

    Metadata(url, broker=...) -> upgrade(engine, broker) -> check, stamp, upgrade, in one transaction

Alembic's Config is built here in code (no alembic.ini at run time): `script_location`
is this package's directory, and the connection and the broker's name travel in
`config.attributes` (env.py and revision 0002 read them).

One broker at a time. The check (is there an `alembic_version`?), the stamp and the
upgrade run in one transaction that holds
  - PostgreSQL: `pg_advisory_xact_lock(LOCK_KEY)`. Brokers starting together against one
    empty database queue on it; the next one in finds the head already there and does
    nothing. DDL is transactional in PostgreSQL, so a broker killed mid-upgrade leaves
    nothing half done, and the lock goes with its session.
  - SQLite: `BEGIN IMMEDIATE`, the file's write lock (its DDL is transactional too;
    pysqlite's own transaction handling is switched off for this connection so that
    the BEGIN is ours).
  - anything else: a plain transaction.
Alembic's `op` and `context` are process-wide proxies, so within one process upgrades
also take turns (a threading lock: brokers of quiver.testing share a process).

A database that an older Quiver made (its three tables, no `alembic_version`) is stamped
as the baseline and then upgraded, keeping its rows: revision 0002 gives them the name of
the broker that upgrades it (on a shared PostgreSQL: the first broker to start; such a
database could only ever have held one broker's rows).

Owns: running the chain. Does not own: what each revision does (versions/), the table
definitions the broker queries with (metadata.py), waiting for the database (metadata.py).
"""

import contextlib
import logging
import os
import threading

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text

from quiver import __version__

from ..data_format import FormatError

log = logging.getLogger(__name__)

HERE = os.path.dirname(os.path.abspath(__file__))
BASELINE = "0001"                  # the schema of every Quiver before migrations
LOCK_KEY = 0x5155_4956_4552_4D44   # b"QUIVERMD": the advisory lock every broker's upgrade takes
LEGACY_TABLES = ("topics", "subscription_groups", "consumer_offsets")
_ONE_AT_A_TIME = threading.Lock()  # Alembic's proxies are module globals


def alembic_config(connection=None, broker: str | None = None) -> Config:
    """Alembic's Config without a file: this package's scripts, `connection` and `broker` as attributes."""
    cfg = Config()
    cfg.set_main_option("script_location", HERE)
    cfg.attributes["connection"] = connection
    cfg.attributes["broker"] = broker
    return cfg


def head_revision() -> str:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def current_revision(connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()


def upgrade(engine, broker: str, target: str = "head") -> tuple[str | None, str | None]:
    """Stamp an older Quiver's schema as the baseline, then upgrade to `target`, holding the
    database's lock throughout. Returns (revision before, revision after)."""
    quiet = logging.getLogger("alembic")
    if quiet.level == logging.NOTSET:  # a line per plugin and per context: ours below says what happened
        quiet.setLevel(logging.WARNING)
    with _ONE_AT_A_TIME, engine.connect() as conn, _locked(conn):
        tables = set(inspect(conn).get_table_names())
        cfg = alembic_config(conn, broker)
        if "alembic_version" not in tables and set(LEGACY_TABLES) <= tables:
            log.info("metadata database %s holds the tables of a Quiver before migrations: stamping it as "
                     "revision %s; its rows become those of broker %r", _shown(engine), BASELINE, broker)
            command.stamp(cfg, BASELINE)
        before = current_revision(conn)
        _known_or_refuse(engine, before)
        command.upgrade(cfg, target)
        after = current_revision(conn)
    if before != after:
        log.info("metadata database %s upgraded from revision %s to %s", _shown(engine), before or "(empty)", after)
    return before, after


def _known_or_refuse(engine, revision: str | None) -> None:
    """A revision this release has no script for was written by a newer one: refuse by name
    (downgrading is not supported) rather than fail inside Alembic."""
    scripts = ScriptDirectory.from_config(alembic_config())
    if revision is None or revision in {s.revision for s in scripts.walk_revisions()}:
        return
    raise FormatError(f"metadata database {_shown(engine)} is at revision {revision}, which quiver {__version__} "
                      f"(newest revision {scripts.get_current_head()}) does not know: a newer release upgraded it; "
                      f"start that release, or restore a backup taken by quiver {__version__} into a new data dir")


@contextlib.contextmanager
def _locked(conn):
    """One transaction on `conn` holding the lock that serialises upgrades (module docstring)."""
    dialect = conn.dialect.name
    if dialect == "sqlite":
        conn.execution_options(isolation_level="AUTOCOMMIT")  # pysqlite emits no BEGIN of its own now
        conn.exec_driver_sql("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            conn.exec_driver_sql("ROLLBACK")
            raise
        conn.exec_driver_sql("COMMIT")
        return
    with conn.begin():
        if dialect == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": LOCK_KEY})
        yield


def _shown(engine) -> str:
    return engine.url.render_as_string(hide_password=True)
