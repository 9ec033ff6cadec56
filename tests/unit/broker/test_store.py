"""MessageStore façade: reopen, SYNC visibility, time search, delete_topic, stats."""

import threading
import time

import pytest

from quiver.wire import record
from quiver.wire.property_string import format_properties
from quiver_broker.store import GetStatus, MessageStore, PutStatus

HOST = b"\x7f\0\0\x01\0\0\x27\x10"


def put(store, n, topic="T", qid=0, keys=None):
    props = [format_properties({"KEYS": keys} if keys else {"TAGS": "a"})] * n
    bodies = [f"{topic}-{qid}-{i}-{time.monotonic_ns()}".encode() for i in range(n)]
    return bodies, store.put_batch(topic, qid, bodies, props, [7] * n, 0, 1, HOST)


def pull_all(store, topic, qid):
    out, off = [], 0
    while True:
        g = store.get_messages(topic, qid, off)
        if g.status is not GetStatus.FOUND:
            return out
        out += record.decode_many(g.data)
        off = g.next_offset


def test_clean_reopen_keeps_everything(tmp_path):
    d = str(tmp_path / "s")
    s = MessageStore(d, segment_bytes=2048, flush_interval_ms=3_600_000)
    s.open()
    b0, _ = put(s, 30, qid=0, keys="k1")
    b1, _ = put(s, 10, qid=1)
    raw = s.get_messages("T", 0, 0, max_msgs=64).data
    end = s.max_phys_offset
    s.close()
    s = MessageStore(d, segment_bytes=2048, flush_interval_ms=3_600_000)
    s.open()
    assert s.max_phys_offset == end == s.flushed_offset
    assert s.get_messages("T", 0, 0, max_msgs=64).data == raw
    assert [r.body for r in pull_all(s, "T", 0)] == b0
    assert [r.body for r in pull_all(s, "T", 1)] == b1
    assert len(s.query_by_key("T", "k1")) == 30
    assert s.topics_on_disk() == {"T": [0, 1]}
    _, res = put(s, 1, qid=0)
    assert res.first_queue_offset == 30 and res.phys_offsets[0] >= end
    s.close()


def test_async_flush_step_flushes_everything(tmp_path):
    s = MessageStore(str(tmp_path / "s"), flush_interval_ms=3_600_000)
    s.open()
    put(s, 5)
    assert s.flushed_offset < s.max_phys_offset == s.confirm_offset
    assert s.flush_step() == s.max_phys_offset == s.flushed_offset
    s.close()


def test_sync_mode_gates_visibility_and_reports_from_flush_thread(tmp_path):
    calls = []
    flushed = threading.Event()

    def on_flushed(off):
        calls.append((off, threading.get_ident()))
        flushed.set()

    s = MessageStore(str(tmp_path / "s"), flush_sync=True, flush_interval_ms=3_600_000,
                     on_flushed=on_flushed)
    s.open()
    put(s, 3)
    s.request_flush(s.max_phys_offset)
    assert flushed.wait(5)
    flushed.clear()
    _, res = put(s, 2)
    # written but not fsynced: invisible to consumers
    assert s.confirm_offset < res.end_offset
    assert s.max_offset("T", 0) == 3
    g = s.get_messages("T", 0, 3)
    assert g.status is GetStatus.OFFSET_OVERFLOW_ONE and g.max_offset == 3
    assert s.get_messages("T", 0, 0, max_msgs=10).count == 3
    s.request_flush(res.end_offset)
    assert flushed.wait(5)
    off, tid = calls[-1]
    assert off >= res.end_offset and tid != threading.get_ident()
    assert s.confirm_offset >= res.end_offset
    assert s.max_offset("T", 0) == 5
    assert s.get_messages("T", 0, 3).count == 2
    s.close()


def test_sync_group_commit_covers_many_requests(tmp_path):
    seen = []
    s = MessageStore(str(tmp_path / "s"), flush_sync=True, flush_interval_ms=3_600_000,
                     on_flushed=seen.append)
    s.open()
    ends = []
    for _ in range(50):
        _, r = put(s, 10)
        ends.append(r.end_offset)
        s.request_flush(r.end_offset)
    deadline = time.monotonic() + 5
    while (not seen or seen[-1] < ends[-1]) and time.monotonic() < deadline:
        time.sleep(0.005)
    assert seen[-1] >= ends[-1]
    assert len(seen) <= 50
    s.close()


def test_search_offset_by_time(tmp_path):
    s = MessageStore(str(tmp_path / "s"), flush_interval_ms=3_600_000)
    s.open()
    stamps = []
    for _ in range(5):
        _, r = put(s, 4)
        stamps.append(r.store_ts)
        while int(time.time() * 1000) <= r.store_ts:
            time.sleep(0.001)
    assert s.search_offset_by_time("T", 0, 0) == 0
    for i, ts in enumerate(stamps):
        assert s.search_offset_by_time("T", 0, ts) == 4 * i
    assert s.search_offset_by_time("T", 0, stamps[-1] + 1) == 20
    assert s.search_offset_by_time("None", 0, 0) == 0
    s.close()


def test_delete_topic(tmp_path):
    d = str(tmp_path / "s")
    s = MessageStore(d, flush_interval_ms=3_600_000)
    s.open()
    put(s, 3, topic="A", qid=0)
    put(s, 3, topic="A", qid=2)
    put(s, 3, topic="B")
    assert s.topics_on_disk() == {"A": [0, 2], "B": [0]}
    s.delete_topic("A")
    assert s.topics_on_disk() == {"B": [0]}
    assert not (tmp_path / "s" / "consumequeue" / "A").exists()
    assert s.get_messages("A", 0, 0).status is GetStatus.NO_MESSAGE_IN_QUEUE
    assert s.max_offset("A", 0) == 0
    s.close()
    s = MessageStore(d, flush_interval_ms=3_600_000)
    s.open()
    assert s.topics_on_disk() == {"B": [0]}  # recovery does not bring it back
    _, r = put(s, 1, topic="A")
    assert r.first_queue_offset == 0
    s.close()


def test_stats_and_put_result(tmp_path):
    s = MessageStore(str(tmp_path / "s"), flush_interval_ms=3_600_000)
    s.open()
    _, r = put(s, 3)
    assert r.status is PutStatus.PUT_OK and len(r.phys_offsets) == 3
    st = s.stats()
    assert st["put_msgs"] == 3 and st["segments"] == 1 and st["queues"] == 1
    assert st["max_phys_offset"] == r.end_offset and 0 <= st["disk_ratio"] <= 1
    rec = s.lookup(r.phys_offsets[1])
    assert rec.flag == 7 and rec.born_host == HOST and rec.queue_offset == 1
    s.close()


def test_abort_file_marks_open_store(tmp_path):
    s = MessageStore(str(tmp_path / "s"), flush_interval_ms=3_600_000)
    s.open()
    assert (tmp_path / "s" / "abort").exists()
    s.close()
    assert not (tmp_path / "s" / "abort").exists()
    assert (tmp_path / "s" / "checkpoint").stat().st_size == 44


@pytest.mark.parametrize("n", [1, 100])
def test_body_crcs_passed_through(tmp_path, n):
    s = MessageStore(str(tmp_path / "s"), flush_interval_ms=3_600_000)
    s.open()
    bodies = [b"x%d" % i for i in range(n)]
    crcs = [record.crc(b) for b in bodies]
    r = s.put_batch("T", 0, bodies, [""] * n, [0] * n, 0, 1, HOST, body_crcs=crcs)
    assert s.lookup(r.phys_offsets[-1]).body == bodies[-1]
    s.close()
