"""The timer index's writer thread: group commits, hand-backs only after the commit, a bad item
failing alone, and the index refusing an ingest that would skip one whose write failed."""

import threading
import types

import pytest

from quiver_scheduler import db as dbm
from quiver_scheduler.writer import Writer


def _rec(off):
    return types.SimpleNamespace(queue_offset=off, store_ts=1000, flag=0, sys_flag=0, born_ts=1, reconsume=0,
                                 props="UNIQ_KEY\x01x\x02", body=b"body")


@pytest.fixture
def index(tmp_path):
    db = dbm.TimerDB(f"sqlite:///{tmp_path / 't.db'}")
    handed = []
    w = Writer(db.engine, lambda fn, *a: handed.append((fn, a)))
    yield db, w, handed
    w.close()
    db.close()


def _held(w):
    """Queue a write that holds the thread until the returned event is set: what is queued
    meanwhile goes in one batch."""
    go = threading.Event()
    w.submit(lambda conn: go.wait(10))
    return go


def _ingest(db, n, start, nxt):
    rows = [dbm.row_dict("b", f"id{i}", 100 + i, _rec(i)) for i in range(start, nxt)][:n]
    return lambda conn: db.write_ingest(conn, "b", rows, start, nxt)


def test_a_failing_item_fails_alone_and_the_writer_goes_on(index):
    db, w, handed = index
    go = _held(w)
    seen = []
    w.submit(_ingest(db, 2, 0, 2), lambda r: seen.append(("first", r)))
    w.submit(lambda conn: conn.exec_driver_sql("INSERT INTO no_such_table VALUES (1)"), lambda r: seen.append(("bad", r)))
    w.submit(_ingest(db, 2, 2, 4), lambda r: seen.append(("third", r)))
    go.set()
    assert w.sync(10)
    for fn, args in handed:
        fn(*args)
    assert [s[0] for s in seen] == ["first", "bad", "third"]                # in the order queued
    assert seen[0][1] is None and seen[2][1] is None and isinstance(seen[1][1], Exception)
    assert db.pending_count() == 4 and db.progress("b") == 4 and w.failed == 1
    w.submit(_ingest(db, 1, 4, 5))                                          # and it still writes
    assert w.sync(10) and db.progress("b") == 5


def test_an_exception_in_the_hand_back_does_not_stop_the_writer(tmp_path):
    db = dbm.TimerDB(f"sqlite:///{tmp_path / 't.db'}")

    def deliver(fn, *a):
        raise RuntimeError("the service loop is gone")
    w = Writer(db.engine, deliver)
    w.submit(_ingest(db, 1, 0, 1), lambda r: None)
    w.submit(_ingest(db, 1, 1, 2), lambda r: None)
    assert w.sync(10) and db.progress("b") == 2
    w.close()
    db.close()


def test_hand_backs_come_only_after_their_batch_is_committed(index):
    db, w, handed = index
    go = _held(w)
    for i in range(5):
        w.submit(_ingest(db, 1, i, i + 1), lambda r: None)
    go.set()
    assert w.sync(10)
    assert len(handed) == 5 and w.batches <= 3                             # grouped: not one commit each
    w.close()
    seen = []      # what the service thread would see when a result is handed back: another connection
    w = Writer(db.engine, lambda fn, *a: seen.append((db.progress("b"), db.pending_count())))
    w.submit(_ingest(db, 1, 5, 6), lambda r: None)
    w.submit(_ingest(db, 1, 6, 7), lambda r: None)
    assert w.sync(10)
    assert seen in ([(6, 6), (7, 7)], [(7, 7), (7, 7)])
    w.close()


def test_the_index_refuses_an_ingest_past_a_failed_one(index):
    db, w, handed = index
    w.submit(_ingest(db, 2, 0, 2))
    w.submit(_ingest(db, 2, 4, 6), lambda r: None)                         # 2..4 never got in
    assert w.sync(10)
    (_, (refused,)), = handed
    assert isinstance(refused, dbm.StaleIngest)
    assert db.progress("b") == 2 and db.pending_count() == 2
