"""ConsumeQueue files and the pull path: statuses, tag filtering, limits, tx bits."""

import os

import pytest

from quiver.wire import record
from quiver.client.message import tag_hash
from quiver.wire.names import SCHEDULE_TOPIC, TIMER_TOPIC
from quiver.wire.property_string import format_properties
from quiver_broker.config import DEFAULT_DELAY_LEVELS_MS
from quiver_broker.consume_queue import ENTRY, ENTRY_SIZE
from quiver_broker.store import GetStatus, MessageStore

HOST = b"\x7f\0\0\x01\0\0\x27\x10"


@pytest.fixture
def store(tmp_path):
    s = MessageStore(str(tmp_path / "s"), cq_entries_per_file=10, flush_interval_ms=3_600_000)
    s.open()
    yield s
    s.close()


def put(store, n, topic="T", qid=0, tags=None, sys_flag=0, extra=None, size=50):
    props = []
    for i in range(n):
        p = dict(extra or {})
        if tags:
            p["TAGS"] = tags[i % len(tags)]
        props.append(format_properties(p))
    bodies = [bytes([i % 256]) * size for i in range(n)]
    return store.put_batch(topic, qid, bodies, props, [0] * n, sys_flag, 1, HOST)


def test_files_roll_and_are_named_by_byte_offset(store, tmp_path):
    put(store, 25)
    qdir = tmp_path / "s" / "consumequeue" / "T" / "0"
    names = sorted(os.listdir(qdir))
    assert names == [f"{i * 10 * ENTRY_SIZE:020d}" for i in range(3)]
    assert [os.path.getsize(qdir / n) for n in names] == [200, 200, 100]
    # pulls read on across file boundaries
    offs, off = [], 0
    while True:
        got = store.get_messages("T", 0, off, max_msgs=32)
        if got.status is not GetStatus.FOUND:
            break
        offs += [r.queue_offset for r in record.decode_many(got.data)]
        off = got.next_offset
    assert offs == list(range(25))
    phys, size, code = ENTRY.unpack((qdir / names[0]).read_bytes()[:20])
    assert size == store.lookup(phys).size and code == 0


def test_all_six_pull_statuses(store, tmp_path):
    assert store.get_messages("T", 0, 0).status is GetStatus.NO_MESSAGE_IN_QUEUE
    put(store, 5)
    g = store.get_messages("T", 0, 2)
    assert (g.status, g.count, g.next_offset, g.min_offset, g.max_offset) == \
        (GetStatus.FOUND, 3, 5, 0, 5)
    g = store.get_messages("T", 0, 5)
    assert (g.status, g.next_offset) == (GetStatus.OFFSET_OVERFLOW_ONE, 5)
    g = store.get_messages("T", 0, 9)
    assert (g.status, g.next_offset) == (GetStatus.OFFSET_OVERFLOW_BADLY, 5)
    g = store.get_messages("T", 0, 1, tag_hashes={tag_hash("nope")})
    assert (g.status, g.next_offset, g.count) == (GetStatus.NO_MATCHED_MESSAGE, 5, 0)
    store.cqs[("T", 0)].min_offset = 2  # as retention would move it
    g = store.get_messages("T", 0, 1)
    assert (g.status, g.next_offset) == (GetStatus.OFFSET_TOO_SMALL, 2)
    assert store.get_messages("Other", 3, 0).status is GetStatus.NO_MESSAGE_IN_QUEUE


def test_tag_filter_picks_matching_and_advances(store):
    put(store, 30, tags=["a", "b", "c"])
    g = store.get_messages("T", 0, 0, max_msgs=4, tag_hashes={tag_hash("b")})
    recs = record.decode_many(g.data)
    assert g.status is GetStatus.FOUND and g.count == 4
    assert [r.queue_offset for r in recs] == [1, 4, 7, 10]
    assert g.next_offset == 11
    assert all(r.properties()["TAGS"] == "b" for r in recs)
    g = store.get_messages("T", 0, 0, max_msgs=100, tag_hashes={tag_hash("a"), tag_hash("c")})
    assert g.count == 20 and g.next_offset == 30


def test_filtered_scan_is_bounded(tmp_path):
    s = MessageStore(str(tmp_path / "s"), flush_interval_ms=3_600_000)
    s.open()
    for _ in range(10):
        put(s, 100, tags=["x"], size=1)
    g = s.get_messages("T", 0, 0, tag_hashes={tag_hash("y")})
    assert (g.status, g.next_offset) == (GetStatus.NO_MATCHED_MESSAGE, 800)
    g = s.get_messages("T", 0, 800, tag_hashes={tag_hash("y")})
    assert (g.status, g.next_offset) == (GetStatus.NO_MATCHED_MESSAGE, 1000)
    s.close()


def test_max_bytes_bounds_the_batch_but_returns_at_least_one(store):
    res = put(store, 5, size=1000)
    size = res.phys_offsets[1] - res.phys_offsets[0]
    g = store.get_messages("T", 0, 0, max_bytes=size * 2 + 10)
    assert g.count == 2 and g.next_offset == 2 and len(g.data) == 2 * size
    g = store.get_messages("T", 0, 0, max_bytes=1)
    assert g.count == 1 and g.next_offset == 1
    g = store.get_messages("T", 0, 0, max_msgs=3)
    assert g.count == 3


def test_interleaved_queues_read_exact_records(store):
    for i in range(6):
        put(store, 2, qid=i % 2, size=10 + i)
    g = store.get_messages("T", 1, 0, max_msgs=32)
    recs = record.decode_many(g.data)
    assert [len(r.body) for r in recs] == [11, 11, 13, 13, 15, 15]
    assert all(r.queue_id == 1 for r in recs)


def test_transaction_bits_decide_queue_and_index(store):
    keys = {"KEYS": "tx-key"}
    half = put(store, 1, sys_flag=record.TX_PREPARED, extra=keys)
    assert half.first_queue_offset == 0 and store.max_offset("T", 0) == 0
    put(store, 1, sys_flag=record.TX_ROLLBACK, extra=keys)
    assert store.max_offset("T", 0) == 0
    put(store, 1, sys_flag=record.TX_COMMIT, extra=keys)
    put(store, 1, sys_flag=record.TX_NOT)
    assert store.max_offset("T", 0) == 2
    found = store.query_by_key("T", "tx-key")
    flags = sorted(r.sys_flag & record.TX_MASK for r in found)
    assert flags == [record.TX_PREPARED, record.TX_COMMIT]  # rollback is not indexed


def test_schedule_and_timer_topics_store_delivery_time_as_tags_code(store):
    res = put(store, 2, topic=SCHEDULE_TOPIC, qid=2)
    _, _, code = store.cqs[(SCHEDULE_TOPIC, 2)].entry(1)
    assert code == res.store_ts + DEFAULT_DELAY_LEVELS_MS[2]
    put(store, 1, topic=TIMER_TOPIC, extra={"TIMER_DELIVER_MS": "1234567"})
    assert store.cqs[(TIMER_TOPIC, 0)].entry(0)[2] == 1234567
    put(store, 1, tags=["TagA"])
    assert store.cqs[("T", 0)].entry(0)[2] == tag_hash("TagA")
