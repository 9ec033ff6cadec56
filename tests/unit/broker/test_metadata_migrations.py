"""The metadata schema through Alembic on SQLite: an older Quiver's database, a fresh one, brokers
sharing one file, upgrades racing, and the wait for a database that is not there yet."""

import logging
import sqlite3
import threading

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import BigInteger, Column, Integer, MetaData, String, Table, create_engine

from quiver_broker import metadata as md
from quiver_broker.config import Config
from quiver_broker.metadata import Metadata, owner, wait_until_reachable
from quiver_broker.migrations import BASELINE, alembic_config, head_revision, upgrade

# what Quiver created with MetaData.create_all before migrations (no broker column, no alembic_version)
_legacy = MetaData()
Table("topics", _legacy,
      Column("name", String(255), primary_key=True), Column("read_queues", Integer, nullable=False),
      Column("write_queues", Integer, nullable=False), Column("perm", Integer, nullable=False),
      Column("sysflag", Integer, nullable=False, default=0), Column("order_topic", Integer, nullable=False, default=0))
Table("subscription_groups", _legacy,
      Column("name", String(255), primary_key=True), Column("retry_max_times", Integer, nullable=False, default=16),
      Column("consume_enable", Integer, nullable=False, default=1))
Table("consumer_offsets", _legacy,
      Column("grp", String(255), primary_key=True), Column("topic", String(255), primary_key=True),
      Column("queue_id", Integer, primary_key=True), Column("offset", BigInteger, nullable=False),
      Column("updated_ms", BigInteger, nullable=False))


def _url(tmp_path, name="metadata.db") -> str:
    return f"sqlite:///{tmp_path / name}"


def _rows(tmp_path, sql: str, name="metadata.db") -> list[tuple]:
    with sqlite3.connect(tmp_path / name) as db:
        return sorted(db.execute(sql))


def _old_quiver_db(tmp_path) -> None:
    eng = create_engine(_url(tmp_path))
    _legacy.create_all(eng)
    with eng.begin() as conn:
        conn.exec_driver_sql("INSERT INTO topics VALUES ('Orders', 4, 4, 6, 0, 0), ('Paid', 2, 2, 6, 0, 1)")
        conn.exec_driver_sql("INSERT INTO subscription_groups VALUES ('billing', 3, 1)")
        conn.exec_driver_sql("INSERT INTO consumer_offsets VALUES ('billing', 'Orders', 0, 41, 1), "
                             "('billing', 'Orders', 3, 7, 1)")
    eng.dispose()


def test_an_older_quivers_database_is_stamped_upgraded_and_keeps_its_rows(tmp_path, caplog):
    _old_quiver_db(tmp_path)
    with caplog.at_level(logging.INFO, "quiver_broker.migrations"):
        meta = Metadata(_url(tmp_path), broker="broker-1")
    assert f"stamping it as revision {BASELINE}" in caplog.text
    assert meta.topics == {"Orders": {"read": 4, "write": 4, "perm": 6, "sysflag": 0, "order": False},
                           "Paid": {"read": 2, "write": 2, "perm": 6, "sysflag": 0, "order": True}}
    assert meta.groups == {"billing": {"retry_max_times": 3, "consume_enable": True}}
    assert meta.offsets == {("billing", "Orders", 0): 41, ("billing", "Orders", 3): 7}
    meta.close()
    assert _rows(tmp_path, "SELECT broker, name FROM topics") == [("broker-1", "Orders"), ("broker-1", "Paid")]
    assert _rows(tmp_path, "SELECT broker, grp, queue_id, \"offset\" FROM consumer_offsets") == [
        ("broker-1", "billing", 0, 41), ("broker-1", "billing", 3, 7)]
    assert _rows(tmp_path, "SELECT version_num FROM alembic_version") == [(head_revision(),)]


def test_an_older_quivers_database_with_acl_tables_is_upgraded_too(tmp_path):
    _old_quiver_db(tmp_path)
    from quiver_broker import acl  # its tables came from create_all too, before migrations
    eng = create_engine(_url(tmp_path))
    acl._meta.create_all(eng)
    with eng.begin() as conn:
        conn.exec_driver_sql("INSERT INTO acl_users VALUES ('admin', 'k', 'SUPER')")
    eng.dispose()
    Metadata(_url(tmp_path), broker="broker-1").close()
    assert _rows(tmp_path, "SELECT name FROM acl_users") == [("admin",)]
    assert _rows(tmp_path, "SELECT version_num FROM alembic_version") == [(head_revision(),)]


def test_a_fresh_database_gets_the_schema_metadata_py_queries(tmp_path):
    meta = Metadata(_url(tmp_path), broker="broker-1")
    mine = set(md._meta.tables)  # later revisions add tables of other modules (acl.py)
    with meta.engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={
            "include_name": lambda name, kind, parent: kind != "table" or name in mine})
        assert ctx.get_current_revision() == head_revision()
        # every difference between the migrated tables and metadata.py's Table objects (types, keys, nulls)
        diffs = compare_metadata(ctx, md._meta)
    meta.close()
    assert diffs == []


def test_upgrading_again_is_a_no_op_and_keeps_rows(tmp_path):
    meta = Metadata(_url(tmp_path), broker="b")
    meta.put_topic("T", 8, 8)
    meta.close()
    assert upgrade(create_engine(_url(tmp_path)), "b") == (head_revision(), head_revision())
    again = Metadata(_url(tmp_path), broker="b")
    assert again.topics["T"]["read"] == 8
    again.close()


def test_brokers_sharing_one_file_see_only_their_own_rows(tmp_path):
    a = Metadata(_url(tmp_path), broker="broker-a")
    b = Metadata(_url(tmp_path), broker="broker-b")
    for meta, queues in ((a, 4), (b, 8)):   # the same names on both: no key collides
        meta.put_topic("Orders", queues, queues)
        meta.put_topic("Orders", queues, queues, perm=4)   # an update touches only its own row
        meta.put_group("billing", retry_max_times=queues)
    for q in range(4):                      # queue ids 0..3 exist on both brokers
        a.set_offset("billing", "Orders", q, 100 + q)
        b.set_offset("billing", "Orders", q, 200 + q)
    assert a.persist_offsets() == 4 and b.persist_offsets() == 4
    a.put_topic("OnlyA", 1, 1)
    b.delete_topic("Orders")                # b's topic and offsets go; a's stay
    a.close()
    b.close()
    a, b = Metadata(_url(tmp_path), broker="broker-a"), Metadata(_url(tmp_path), broker="broker-b")
    assert set(a.topics) == {"Orders", "OnlyA"} and a.topics["Orders"]["read"] == 4 and a.topics["Orders"]["perm"] == 4
    assert a.groups["billing"]["retry_max_times"] == 4 and b.groups["billing"]["retry_max_times"] == 8
    assert a.group_offsets("billing") == {("Orders", q): 100 + q for q in range(4)}
    assert b.topics == {} and b.offsets == {}
    a.close()
    b.close()


def test_a_slave_keeps_rows_of_its_own_beside_its_masters(tmp_path):
    assert owner("broker-a") == "broker-a" and owner("broker-a", 2) == "broker-a@2"
    master = Metadata(_url(tmp_path), broker=owner("broker-a", 0))
    slave = Metadata(_url(tmp_path), broker=owner("broker-a", 1))
    for meta in (master, slave):            # a slave mirrors its master's table: same names, no collision
        meta.put_topic("Orders", 4, 4)
    master.set_offset("g", "Orders", 0, 10)
    slave.set_offset("g", "Orders", 0, 12)  # advanced on the slave while the master was away
    master.close()
    slave.close()
    assert _rows(tmp_path, "SELECT broker, \"offset\" FROM consumer_offsets") == [("broker-a", 10), ("broker-a@1", 12)]
    with pytest.raises(ValueError, match="'@'"):
        Config(broker_name="broker-a@1")    # so no master's name is a slave's owner


def test_brokers_upgrading_one_fresh_file_at_once_do_not_break_each_other(tmp_path):
    errors, metas = [], []
    go = threading.Barrier(4)

    def start(name):
        go.wait()
        try:
            metas.append(Metadata(_url(tmp_path), broker=name))
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(f"broker-{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == [] and len(metas) == 4
    for m in metas:
        m.put_topic("T", 1, 1)
        m.close()
    assert _rows(tmp_path, "SELECT version_num FROM alembic_version") == [(head_revision(),)]
    assert len(_rows(tmp_path, "SELECT broker FROM topics")) == 4


def test_a_database_missing_a_table_gets_it_from_the_baseline(tmp_path):
    eng = create_engine(_url(tmp_path))
    _legacy.tables["topics"].create(eng)  # create_all stopped after its first table
    eng.dispose()
    meta = Metadata(_url(tmp_path), broker="b")
    meta.put_group("g")
    meta.set_offset("g", "T", 0, 1)
    meta.close()
    assert _rows(tmp_path, "SELECT broker, grp FROM consumer_offsets") == [("b", "g")]


def test_rows_without_a_named_owner_are_refused_with_what_to_do(tmp_path):
    _old_quiver_db(tmp_path)
    with pytest.raises(RuntimeError, match="name the broker they belong to"):
        upgrade(create_engine(_url(tmp_path)), None)
    assert _rows(tmp_path, "SELECT name FROM topics") == [("Orders",), ("Paid",)]  # rolled back whole
    assert _rows(tmp_path, "SELECT name FROM sqlite_master WHERE name LIKE '_alembic%'") == []


def test_downgrade_to_the_baseline_keeps_one_brokers_rows_and_refuses_several(tmp_path):
    meta = Metadata(_url(tmp_path), broker="a")
    meta.put_topic("T", 2, 2)
    meta.close()
    eng = create_engine(_url(tmp_path))
    with eng.begin() as conn:
        command.downgrade(alembic_config(conn), BASELINE)
    assert _rows(tmp_path, "SELECT * FROM topics") == [("T", 2, 2, 6, 0, 0)]
    assert upgrade(eng, "a") == (BASELINE, head_revision())
    Metadata(_url(tmp_path), broker="b").close()
    with sqlite3.connect(tmp_path / "metadata.db") as db:
        db.execute("INSERT INTO topics VALUES ('U', 1, 1, 6, 0, 0, 'b')")
    with eng.begin() as conn, pytest.raises(RuntimeError, match="rows of 2 brokers"):
        command.downgrade(alembic_config(conn), BASELINE)
    eng.dispose()


def test_a_database_not_there_yet_is_retried_then_named_in_the_error(tmp_path, caplog):
    later = tmp_path / "later"            # SQLite cannot open a file in a missing directory
    eng = create_engine(f"sqlite:///{later / 'metadata.db'}")
    naps = []
    with caplog.at_level(logging.INFO, "quiver_broker.metadata"):
        wait_until_reachable(eng, 30, sleep=lambda s: naps.append(s) or (len(naps) == 3 and later.mkdir()))
    assert len(naps) == 3 and "not reachable yet, retrying for up to 30 s" in caplog.text
    assert caplog.records[-1].getMessage().endswith("metadata.db reachable")
    gone = create_engine(f"sqlite:///{tmp_path / 'never' / 'metadata.db'}")
    with pytest.raises(RuntimeError, match=r"metadata database sqlite:///.*never.* not reachable after 0.01 s"):
        wait_until_reachable(gone, 0.01)


def test_metadata_url_setting_empty_means_sqlite_and_nonsense_is_refused():
    assert Config(metadata_url="").metadata_url == ""
    with pytest.raises(ValueError, match="not a SQLAlchemy URL"):
        Config(metadata_url="postgres at db1")
    with pytest.raises(ValueError, match="metadata_wait_ms"):
        Config(metadata_wait_ms=-1)
