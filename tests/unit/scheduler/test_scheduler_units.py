"""Scheduler domain modules without processes: allocation, re-put restore, timer DB, stats."""

import types

from quiver_broker.schedule import restore
from quiver_scheduler import db as dbm
from quiver_scheduler.allocation import Unit, addr_of, allocate, client_id, units_of
from quiver_scheduler.stats import DeliveryStats


def test_allocation_is_disjoint_complete_and_averaged():
    units = units_of("b", 18) + units_of("a", 18)
    for n in range(1, 6):
        members = [f"m{i}" for i in range(n)]
        shares = [allocate(units, members, m) for m in members]
        flat = [u for s in shares for u in s]
        assert sorted(flat) == sorted(units) and len(set(flat)) == len(units)
        assert max(map(len, shares)) - min(map(len, shares)) <= 1
    assert allocate(units, [], "solo") == sorted(units)
    assert str(Unit("b", "S", 0)) == "b/level-1" and str(Unit("b", "T", 0)) == "b/timer-0"


def test_client_id_carries_the_address():
    cid = client_id("10.0.0.1:10931", 7, 99)
    assert addr_of(cid) == "10.0.0.1:10931"
    assert addr_of("host@123#456") is None


def test_restore_drops_delay_keeps_the_rest():
    props = "UNIQ_KEY\x01ID1\x02TAGS\x01T\x02KEYS\x01a b\x02ü\x01ß\x02DELAY\x013\x02TIMER_DELIVER_MS\x019\x02" \
            "REAL_TOPIC\x01Orders\x02REAL_QID\x012\x02"
    topic, qid, out = restore(props, 1234)
    assert (topic, qid) == ("Orders", 2)
    assert "DELAY\x01" not in out and "TIMER_DELIVER_MS" not in out
    for part in ("TAGS\x01T\x02", "KEYS\x01a b\x02", "ü\x01ß\x02", "SCHEDULE_ORIGIN_ID\x01ID1\x02",
                 "SCHEDULE_DUE_MS\x011234\x02", "UNIQ_KEY\x01ID1\x02"):
        assert part in out
    assert restore("", None) == (None, 0, "")


def _rec(off, store_ts=1000):
    return types.SimpleNamespace(queue_offset=off, store_ts=store_ts, flag=0, sys_flag=0, born_ts=1,
                                 reconsume=0, props="UNIQ_KEY\x01x\x02", body=b"\x00body")


def test_timer_db_ingest_deliver_cancel_rebuild(tmp_path):
    db = dbm.TimerDB(f"sqlite:///{tmp_path / 't.db'}")
    rows = [dbm.row_dict("b", f"id{i}", 100 + i, _rec(i)) for i in range(10)]
    db.add("b", rows, 10)
    db.add("b", [dbm.row_dict("b", "id0", 100, _rec(20, 5000))], 21)      # a rolled copy: upsert
    assert db.progress("b") == 21 and db.pending_count() == 10
    assert [r[1] for r in db.due_between(["b"], 100, 103)] == ["id1", "id2", "id3"]
    assert db.fetch_pending(["id0"])[0].body == b"\x00body"
    assert db.to_roll(["b"], 2000, 0) and all(r.id != "id0" for r in db.to_roll(["b"], 2000, 0))
    db.mark_delivered(["id0", "id1"])
    assert db.state_of("id0") == (dbm.DELIVERED, "UNIQ_KEY\x01x\x02") and db.min_pending_due("b") == 102
    assert db.cancel("id2") and not db.cancel("id2") and db.state_of("id2")[0] == dbm.CANCELLED
    assert db.state_of("never") is None
    assert db.drop_delivered_by_others("b", 104) == 2                     # id3, id4
    assert db.pending_count(["b"]) == 5
    db.add_tombstone("gone", "Orders")
    db.add_tombstone("gone", "Orders")
    db.add_tombstone("gone", "Other")        # another topic's cancel of the same id: a pair of its own
    assert sorted(db.tombstones()) == [("gone", "Orders"), ("gone", "Other")]
    db.reset_broker("b")
    assert db.pending_count() == 0 and db.progress("b") is None
    db.close()


def test_stats_lag_and_early():
    s = DeliveryStats(remember_ids=2)
    s.delivered(1000, [990, 1000, 1001], ["a", "b", "c"])
    assert s.early == 1 and s.count == 3 and list(s.recent) == ["b", "c"]
    summary = s.lag_summary()
    assert summary["max"] == 10 and summary["min"] == -1 and summary["n"] == 3
