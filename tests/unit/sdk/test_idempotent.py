"""SqlDedupe on a real SQLite file: first claim wins, a rolled-back claim is forgotten, keys per group."""

import threading
import types

import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table, create_engine, func, select

from quiver.client.idempotent import SqlDedupe


def _msg(msg_id="7F000001000000000000000000000001", keys=()):
    return types.SimpleNamespace(msg_id=msg_id, keys=list(keys))


@pytest.fixture
def engine(tmp_path):
    eng = create_engine(f"sqlite:///{tmp_path / 'app.db'}")
    yield eng
    eng.dispose()


def test_the_first_claim_does_the_work_and_a_redelivery_is_skipped(engine):
    seen = SqlDedupe(engine, group="billing")
    with engine.begin() as conn:
        assert seen.claim(conn, _msg()) is True
    with engine.begin() as conn:
        assert seen.claim(conn, _msg()) is False
    other = SqlDedupe(engine, group="audit")            # keys are per group
    with engine.begin() as conn:
        assert other.claim(conn, _msg()) is True


def test_a_claim_rolled_back_with_the_apps_write_is_forgotten(engine):
    seen = SqlDedupe(engine, group="billing")
    charges = Table("charges", MetaData(), Column("id", Integer, primary_key=True), Column("m", String(64)))
    charges.metadata.create_all(engine)
    with pytest.raises(RuntimeError):
        with engine.begin() as conn:
            assert seen.claim(conn, _msg())
            conn.execute(charges.insert().values(m="x"))
            raise RuntimeError("the app's write failed")
    with engine.begin() as conn:                          # redelivered: done this time, once
        assert seen.claim(conn, _msg())
        conn.execute(charges.insert().values(m="x"))
    with engine.begin() as conn:
        assert not seen.claim(conn, _msg())
        assert conn.execute(select(func.count()).select_from(charges)).scalar() == 1


def test_business_keys_purge_and_bad_keys(engine):
    seen = SqlDedupe(engine, group="billing", key=lambda m: m.keys[0])
    with engine.begin() as conn:
        assert seen.claim(conn, _msg("A", keys=["order-1"]))
        assert not seen.claim(conn, _msg("B", keys=["order-1"]))   # another id, same business key
        assert seen.purge(conn, older_than_s=3600) == 0
        assert seen.purge(conn, older_than_s=-1) == 1
        assert seen.claim(conn, _msg("C", keys=["order-1"]))       # forgotten: past the window
        for bad in ("", "k" * 256):
            with pytest.raises(ValueError, match="dedupe key"):
                seen.claim(conn, _msg(keys=[bad]))
    with pytest.raises(ValueError, match="group"):
        SqlDedupe(engine, group="")


def test_concurrent_deliveries_claim_once(tmp_path):
    eng = create_engine(f"sqlite:///{tmp_path / 'race.db'}", connect_args={"timeout": 30})
    seen = SqlDedupe(eng, group="billing")
    wins = []

    def deliver():
        with eng.begin() as conn:
            wins.append(seen.claim(conn, _msg()))
    threads = [threading.Thread(target=deliver) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(wins) == [False] * 7 + [True]
    eng.dispose()


def test_postgresql(tmp_path):
    from support.postgres import running_postgres
    with running_postgres("app") as prefix:
        eng = create_engine(prefix + "app")
        try:
            seen = SqlDedupe(eng, group="billing")
            with eng.begin() as conn:
                assert seen.claim(conn, _msg()) and not seen.claim(conn, _msg())
            with pytest.raises(RuntimeError):
                with eng.begin() as conn:
                    assert seen.claim(conn, _msg("other"))
                    raise RuntimeError("rolled back")
            with eng.begin() as conn:
                assert seen.claim(conn, _msg("other"))
        finally:
            eng.dispose()
