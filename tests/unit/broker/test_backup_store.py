"""A backup of a store taken between puts, restored and opened again, serves exactly what it
held at the cut: every record by queue offset (compacted logs included), none written after."""

import os
import types

from quiver.wire import record
from quiver_broker import backup as backup_mod
from quiver_broker.backup import Backups
from quiver_broker.restore import restore
from quiver_broker.store import MessageStore

from test_compaction import compact, fill, open_store, pull_all, put


def _snapshot(store, root):
    meta = types.SimpleNamespace(topics={"C": {"read": 1, "write": 1, "perm": 6, "sysflag": 0, "order": False}},
                                 groups={}, offsets={("g", "C", 0): 3})
    b = Backups(str(root), store, meta, None, {"broker": "b", "cluster": "c", "broker_id": 0}, None)
    plan = b.plan(b.destination("one"))
    return plan


def test_restored_store_serves_what_the_cut_covered_compacted_log_included(tmp_path):
    s = open_store(tmp_path / "src")
    fill(s, keys=6, versions=10)
    assert compact(s).watermark > 0
    put(s, "k1", b"after the pass")
    before = [(r.queue_offset, r.body) for r in pull_all(s)]
    plan = _snapshot(s, tmp_path / "backups")
    for i in range(20):   # writes go on while the worker copies
        put(s, "k2", f"late-{i}".encode())
    backup_mod.write_out(plan)
    backup_mod._close(plan)
    os.rename(backup_mod._partial(plan.dest), plan.dest)
    assert any(p.rel.startswith("compaction/") for p in plan.parts) and plan.linked > 0
    s.close()

    summary = restore(plan.dest, str(tmp_path / "data"))
    assert summary["offsets"] == 1
    r = MessageStore(str(tmp_path / "data" / "b"), segment_bytes=4096, flush_interval_ms=3_600_000,
                     index_slots=512, index_entries=4096)
    r.compaction.is_compacted = lambda topic: topic == "C"
    r.open()
    try:
        assert [(x.queue_offset, x.body) for x in pull_all(r)] == before
        assert r.max_offset("C", 0) == before[-1][0] + 1
        found = r.query_by_key("C", "k1")   # the index past the last full file is rebuilt
        assert b"after the pass" in [x.body for x in found]
    finally:
        r.close()
