"""Compacted topics in the store: a pass keeps the latest record per key, pulls below the
watermark come from the compacted log with their original offsets, tombstones go after their
retention, retention waits for compaction, a torn or corrupt compacted file is never served."""

import os
import time

import pytest

from quiver.wire import record
from quiver.wire.property_string import format_properties
from quiver_broker import compacted_log
from quiver_broker.compaction import Throttle
from quiver_broker.store import GetStatus, MessageStore

HOST = b"\x7f\0\0\x01\0\0\x27\x10"


def open_store(d, **kw):
    s = MessageStore(str(d), segment_bytes=4096, flush_interval_ms=3_600_000, index_slots=512,
                     index_entries=4096, **kw)
    s.compaction.is_compacted = lambda topic: topic == "C"
    s.open()
    return s


def put(s, key, body, topic="C", qid=0):
    props = [format_properties({"KEYS": key} if key else {"TAGS": "a"})]
    return s.put_batch(topic, qid, [body], props, [0], 0, 1, HOST)


def compact(s):
    s.flush_step(force=True)   # a pass covers flushed records only
    return s.compaction.compact_queue("C", 0)


def pull_all(s, topic="C", qid=0, start=0):
    out, off = [], start
    while True:
        g = s.get_messages(topic, qid, off, max_msgs=7)
        if g.status not in (GetStatus.FOUND, GetStatus.NO_MATCHED_MESSAGE) or g.next_offset == off:
            return out
        out += record.decode_many(g.data)
        off = g.next_offset


def fill(s, keys=10, versions=8):
    """keys x versions, interleaved; returns {key: last body}."""
    latest = {}
    for v in range(versions):
        for k in range(keys):
            body = f"k{k}-v{v}".encode() * 5
            put(s, f"k{k}", body)
            latest[f"k{k}"] = body
    return latest


def test_pass_keeps_latest_per_key_with_original_offsets(tmp_path):
    s = open_store(tmp_path)
    latest = fill(s)
    put(s, None, b"no key")
    res = compact(s)
    assert 0 < res.watermark < s.max_offset("C", 0) and res.kept < res.read
    recs = pull_all(s)
    offs = [r.queue_offset for r in recs]
    assert offs == sorted(set(offs)) and offs[0] >= 0
    # below the watermark: one record per key; above it: everything
    below = [r for r in recs if r.queue_offset < res.watermark]
    keys = [r.properties().get("KEYS") for r in below]
    assert len(keys) == len(set(keys))
    seen = {}
    for r in recs:
        if r.properties().get("KEYS"):
            seen[r.properties()["KEYS"]] = r.body
    assert seen == latest
    assert s.stats()["compacted_queues"] == 1
    s.close()


def test_compacted_log_survives_reopen_and_retention(tmp_path):
    s = open_store(tmp_path)
    latest = fill(s, versions=12)
    first_seg = s.commit_log.segments[0].path
    assert s.clean_expired(now_ms=int(time.time() * 1000) + 10**12, force=True) == 0   # held: not compacted
    assert os.path.exists(first_seg)
    compact(s)
    assert s.clean_expired(now_ms=int(time.time() * 1000) + 10**12, force=True) > 0
    assert not os.path.exists(first_seg)
    s.close()
    s = open_store(tmp_path)
    assert s.min_offset("C", 0) == s.compaction.logs[("C", 0)].low
    seen = {r.properties()["KEYS"]: r.body for r in pull_all(s)}
    assert seen == latest
    s.close()


def test_tombstone_removed_after_delete_retention(tmp_path):
    s = open_store(tmp_path, delete_retention_ms=60_000)
    fill(s, keys=3, versions=30)
    put(s, "k1", b"")
    fill(s, keys=0)
    for _ in range(80):       # roll the tombstone out of the active segment
        put(s, "other", b"x" * 40)
    compact(s)
    assert any(r.properties()["KEYS"] == "k1" and r.body == b"" for r in pull_all(s))   # kept: retention not over
    s.compaction.clock = lambda: time.time() + 120
    compact(s)
    assert not any(r.properties()["KEYS"] == "k1" for r in pull_all(s))
    assert {r.properties()["KEYS"] for r in pull_all(s)} == {"k0", "k2", "other"}
    s.close()


def test_second_pass_builds_on_first_and_tag_filter(tmp_path):
    s = open_store(tmp_path)
    fill(s, versions=6)
    w1 = compact(s).watermark
    latest = fill(s, versions=6)
    for _ in range(40):
        put(s, "pad", b"p" * 60)
    latest["pad"] = b"p" * 60
    w2 = compact(s).watermark
    assert w2 > w1
    seen = {r.properties()["KEYS"]: r.body for r in pull_all(s)}
    assert seen == latest
    g = s.get_messages("C", 0, 0, tag_hashes={12345})   # no record has that tag: skipped, offset moves
    assert g.status is GetStatus.NO_MATCHED_MESSAGE and g.next_offset > 0
    s.close()


def test_corrupt_or_torn_file_is_not_served(tmp_path):
    s = open_store(tmp_path)
    latest = fill(s)
    compact(s)
    path = s.compaction.logs[("C", 0)].path
    s.close()
    with open(path, "r+b") as f:    # flip a byte of the index
        f.seek(compacted_log.HEAD_SIZE + 3)
        b = f.read(1)
        f.seek(compacted_log.HEAD_SIZE + 3)
        f.write(bytes([b[0] ^ 0xFF]))
    open(os.path.join(os.path.dirname(path), compacted_log.TMP_NAME), "wb").write(b"torn")
    s = open_store(tmp_path)
    assert ("C", 0) not in s.compaction.logs      # the CommitLog still holds everything
    assert not os.path.exists(os.path.join(os.path.dirname(path), compacted_log.TMP_NAME))
    assert {r.properties()["KEYS"]: r.body for r in pull_all(s)} == latest
    s.close()


def test_corrupt_record_in_compacted_log_is_skipped(tmp_path):
    s = open_store(tmp_path)
    fill(s)
    compact(s)
    cl = s.compaction.logs[("C", 0)]
    with open(cl.path, "r+b") as f:   # a byte of the first record's body
        f.seek(cl.data_start + record.FIXED_SIZE + 1)
        f.write(b"\xff")
    recs = pull_all(s)
    assert cl.offsets[0] not in [r.queue_offset for r in recs]
    assert s.stats()["corrupt_records_skipped"] == 1
    s.close()


def test_delete_topic_removes_compacted_logs(tmp_path):
    s = open_store(tmp_path)
    fill(s)
    compact(s)
    s.delete_topic("C")
    assert not s.compaction.logs and not os.path.exists(os.path.join(str(tmp_path), "compaction", "C"))
    s.close()


def test_throttle_holds_rate():
    now = [0.0]
    slept = []
    t = Throttle(1000, clock=lambda: now[0], sleep=lambda s: (slept.append(s), now.__setitem__(0, now[0] + s)))
    for _ in range(10):
        t.add(500)
    assert now[0] == pytest.approx(5.0)
    Throttle(0, sleep=lambda s: slept.append(-1)).add(10**9)
    assert -1 not in slept


def test_worker_passes_hand_results_to_post_and_periodic_ones_do_not_pile_up(tmp_path):
    import threading
    s = open_store(tmp_path)
    latest = fill(s)
    posted, done = [], threading.Event()

    def post(fn, *args):   # the service thread's call_soon_threadsafe, run inline here
        posted.append(fn)
        fn(*args)

    got = {}
    s.compaction.submit(["C"], post, lambda results, error: (got.update(results=results, error=error), done.set()),
                        force=True)
    assert done.wait(30)
    assert got["error"] is None and [r.queue_id for r in got["results"]] == [0]
    assert ("C", 0) in s.compaction.logs and len(posted) == 2   # the swap, then the answer
    s.compaction._periodic = True          # one periodic pass already queued: another is not added
    s.compaction.submit(None, post)
    assert s.compaction._jobs.qsize() == 0
    s.compaction._periodic = False
    assert {r.properties()["KEYS"]: r.body for r in pull_all(s)} == latest
    s.close()


def test_records_not_yet_flushed_are_not_compacted(tmp_path):
    s = open_store(tmp_path)
    fill(s)
    assert s.flushed_offset < s.commit_log.segments[-1].start
    res = s.compaction.compact_queue("C", 0)
    first_unflushed = s.cqs[("C", 0)].first_offset_where(lambda e: e[0] + e[1] > s.flushed_offset)
    assert res.watermark <= first_unflushed < compact(s).watermark
    s.close()


def test_throttle_keeps_a_pass_busy_a_quarter_of_the_time():
    now = [0.0]
    slept = []

    def sleep(s):
        slept.append(s)
        now[0] += s

    t = Throttle(0, busy_ratio=0.25, clock=lambda: now[0], sleep=sleep)
    for _ in range(100):
        now[0] += 0.005    # 5 ms of work per record
        t.add(1000)
    work = 100 * 0.005
    assert sum(slept) == pytest.approx(3 * work, rel=0.1)


def test_an_asked_for_pass_flushes_first_and_covers_every_sealed_segment(tmp_path):
    # `quiver topic compact` under load: the flush thread lagged, the pass covered a prefix and a
    # consumer read tombstoned keys back; the asked-for pass now syncs the CommitLog first
    import threading
    s = open_store(tmp_path, delete_retention_ms=0)
    latest = fill(s)
    put(s, "k3", b"")   # a tombstone, past its retention at once
    del latest["k3"]
    for _ in range(40):   # roll it out of the active segment
        put(s, "filler", b"f" * 200)
    latest["filler"] = b"f" * 200
    assert s.flushed_offset < s.commit_log.segments[-1].start   # the flush thread has not run
    got, done = {}, threading.Event()
    s.compaction.submit(["C"], lambda fn, *a: fn(*a), lambda results, error: (got.update(results=results),
                                                                               done.set()), force=True)
    assert done.wait(30)
    sealed_end = s.cqs[("C", 0)].first_offset_where(lambda e: e[0] >= s.commit_log.segments[-1].start)
    assert got["results"][0].watermark == sealed_end
    below = [r for r in pull_all(s) if r.queue_offset < sealed_end]
    assert {r.properties()["KEYS"]: r.body for r in below} == latest   # one latest record a live key
    assert len(below) == len(latest)
    s.close()


def test_a_pass_in_a_child_process_that_fails_replaces_nothing_and_close_stops_one(tmp_path):
    import signal
    import threading
    from support.waiting import wait_for
    s = open_store(tmp_path)
    fill(s)
    first = compact(s)
    fill(s, versions=4)
    s.flush_step(force=True)
    phys, size, _ = s.cqs[("C", 0)].entry(first.watermark + 1)
    seg = s.commit_log.segment_for(phys)
    with open(seg.path, "r+b") as f:   # a byte of a body the next pass reads
        f.seek(phys - seg.start + size - 30)
        f.write(b"\xff")
    installed = s.compaction.logs[("C", 0)]
    got, done = {}, threading.Event()
    report = lambda results, error: (got.update(error=error), done.set())   # noqa: E731
    s.compaction.submit(["C"], lambda fn, *a: fn(*a), report, force=True)
    assert done.wait(30)
    assert "compaction process failed" in got["error"] and s.compaction.logs[("C", 0)] is installed
    s.compaction.bytes_per_s, done = 1, threading.Event()   # a child that would take days
    s.compaction.submit(["C"], lambda fn, *a: fn(*a), report, force=True)
    child = wait_for(lambda: s.compaction._child if s.compaction._child.poll() is None else None, 30,
                     "a running compaction process")
    s.compaction.close()   # the broker stopping: its pass is not installed
    assert child.returncode == -signal.SIGKILL and done.wait(30) and got["error"]
    s.close()
