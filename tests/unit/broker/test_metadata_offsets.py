"""Consumer offsets on a real SQLite file: range guard, and a failed save loses nothing."""

import sqlite3

import pytest

from quiver.errors import InvalidParameterError, ServiceNotAvailableError
from quiver_broker.metadata import MAX_OFFSET, Metadata


def _open(tmp_path, timeout_s=None) -> Metadata:
    url = f"sqlite:///{tmp_path / 'metadata.db'}"
    return Metadata(url + (f"?timeout={timeout_s}" if timeout_s is not None else ""), broker="broker-a")


def _stored(tmp_path) -> dict:
    with sqlite3.connect(tmp_path / "metadata.db") as db:
        return {(g, t, q): o for g, t, q, o in db.execute("SELECT grp, topic, queue_id, offset FROM consumer_offsets "
                                                          "WHERE broker = 'broker-a'")}


@pytest.mark.parametrize("bad", [2 ** 63, 2 ** 64, 10 ** 5000, -1, "5", 1.0, True, None, [[[]]]],
                         ids=lambda v: type(v).__name__)
def test_out_of_range_offset_is_refused_and_changes_nothing(tmp_path, bad):
    meta = _open(tmp_path)
    meta.set_offset("g", "T", 0, 5)
    for setter in (meta.set_offset, meta.advance_offset):
        with pytest.raises(InvalidParameterError, match="0..9223372036854775807"):
            setter("g", "T", 0, bad)
        with pytest.raises(InvalidParameterError):
            setter("other", "T", 1, bad)
    assert meta.offsets == {("g", "T", 0): 5} and meta.persist_offsets() == 1
    meta.close()
    assert _stored(tmp_path) == {("g", "T", 0): 5}


def test_extremes_of_the_range_survive_a_reopen(tmp_path):
    meta = _open(tmp_path)
    meta.set_offset("g", "T", 0, 0)
    meta.set_offset("g", "T", 1, MAX_OFFSET)
    meta.advance_offset("g", "T", 2, MAX_OFFSET)
    meta.close()
    again = _open(tmp_path)
    assert again.group_offsets("g") == {("T", 0): 0, ("T", 1): MAX_OFFSET, ("T", 2): MAX_OFFSET}
    again.close()


def test_one_unsavable_row_does_not_drop_the_others(tmp_path):
    meta = _open(tmp_path)
    meta.set_offset("a", "T", 0, 10)
    meta.set_offset("b", "T", 0, 20)
    meta.set_offset("c", "U", 3, 30)
    with meta._lock:  # a value that reached memory some other way: the database cannot hold it
        meta.offsets[("poison", "T", 0)] = 2 ** 63
        meta._dirty.add(("poison", "T", 0))
    assert meta.persist_offsets() == 3
    assert _stored(tmp_path) == {("a", "T", 0): 10, ("b", "T", 0): 20, ("c", "U", 3): 30}
    assert meta._dirty == {("poison", "T", 0)}        # kept for the next try
    meta.set_offset("b", "T", 0, 21)
    meta.set_offset("poison", "T", 0, 7)              # a good value replaces it: saved next time
    assert meta.persist_offsets() == 2 and meta._dirty == set()
    meta.close()
    again = _open(tmp_path)
    assert again.offsets == {("a", "T", 0): 10, ("b", "T", 0): 21, ("c", "U", 3): 30, ("poison", "T", 0): 7}
    again.close()


def test_save_while_the_database_is_locked_keeps_rows_and_newer_values_win(tmp_path):
    meta = _open(tmp_path, timeout_s=0.05)
    meta.set_offset("a", "T", 0, 1)
    meta.set_offset("b", "T", 0, 1)
    assert meta.persist_offsets() == 2
    meta.set_offset("a", "T", 0, 2)
    meta.set_offset("b", "T", 0, 2)
    locker = sqlite3.connect(tmp_path / "metadata.db", isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")
    try:
        assert meta.persist_offsets() == 0
        assert meta._dirty == {("a", "T", 0), ("b", "T", 0)}
        meta.advance_offset("a", "T", 0, 3)          # moves on while the save is pending
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    assert _stored(tmp_path) == {("a", "T", 0): 1, ("b", "T", 0): 1}
    assert meta.persist_offsets() == 2
    assert _stored(tmp_path) == {("a", "T", 0): 3, ("b", "T", 0): 2}
    meta.close()


def test_deleted_topic_is_not_brought_back_by_a_retry(tmp_path):
    meta = _open(tmp_path)
    meta.set_offset("a", "Gone", 0, 5)
    meta.set_offset("a", "Kept", 0, 6)
    with meta._lock:
        meta.offsets[("a", "Gone", 1)] = 2 ** 63
        meta._dirty.add(("a", "Gone", 1))
    meta.persist_offsets()
    meta.delete_topic("Gone")
    assert meta.persist_offsets() == 0
    meta.close()
    assert _stored(tmp_path) == {("a", "Kept", 0): 6}


def test_a_topic_or_group_the_database_cannot_store_is_service_not_available(tmp_path):
    meta = _open(tmp_path, timeout_s=0.05)
    meta.put_topic("Kept", 4, 4)
    locker = sqlite3.connect(tmp_path / "metadata.db", isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(ServiceNotAvailableError, match="topic 'New' not saved"):
            meta.put_topic("New", 4, 4)
        with pytest.raises(ServiceNotAvailableError, match="group 'g' not saved"):
            meta.put_group("g")
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    assert set(meta.topics) == {"Kept"} and meta.groups == {}   # in memory only once stored
    meta.put_topic("New", 4, 4)
    meta.close()
    again = _open(tmp_path)
    assert set(again.topics) == {"Kept", "New"}
    again.close()
