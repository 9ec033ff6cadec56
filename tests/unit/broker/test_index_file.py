"""IndexFile: key queries by KEYS element and UNIQ_KEY, rollover, collisions, time range."""

import os
import time

import pytest

from quiver_broker.index_file import (ENTRY_SIZE, HEADER, HEADER_SIZE, IndexFile, key_hash,
                                      prefix_crc)
from quiver_broker.store import MessageStore
from quiver.wire.property_string import format_properties

HOST = b"\x7f\0\0\x01\0\0\x27\x10"


@pytest.fixture
def store(tmp_path):
    s = MessageStore(str(tmp_path / "s"), index_slots=100, index_entries=40,
                     flush_interval_ms=3_600_000)
    s.open()
    yield s
    s.close()


def put_keyed(store, keys: list[str], topic="T", uniq=None):
    props = [format_properties({"KEYS": k, **({"UNIQ_KEY": uniq[i]} if uniq else {})})
             for i, k in enumerate(keys)]
    bodies = [k.encode() for k in keys]
    return store.put_batch(topic, 0, bodies, props, [0] * len(keys), 0, 1, HOST)


def test_keys_elements_and_unique_key_are_indexed(store):
    put_keyed(store, ["a b", "b c", "c"], uniq=["U1", "U2", "U3"])
    assert sorted(r.body for r in store.query_by_key("T", "b")) == [b"a b", b"b c"]
    assert [r.body for r in store.query_by_key("T", "U2")] == [b"b c"]
    assert store.query_by_key("T", "zzz") == []
    assert store.query_by_key("Other", "b") == []  # topic is part of the key


def test_newest_first_and_max_num(store):
    for i in range(5):
        put_keyed(store, ["same"])
    got = store.query_by_key("T", "same", max_num=3)
    assert len(got) == 3
    offs = [r.phys_offset for r in got]
    assert offs == sorted(offs, reverse=True)


def test_index_file_rollover_keeps_older_files_queryable(store, tmp_path):
    for i in range(30):  # 2 keys each (KEYS + UNIQ_KEY) -> 60 entries > 39 per file
        put_keyed(store, [f"key-{i}"], uniq=[f"uniq-{i}"])
    files = sorted(os.listdir(tmp_path / "s" / "index"))
    assert len(files) == 2
    size = os.path.getsize(tmp_path / "s" / "index" / files[0])
    assert size == HEADER_SIZE + 100 * 4 + 40 * ENTRY_SIZE
    for i in (0, 15, 29):
        assert [r.body for r in store.query_by_key("T", f"key-{i}")] == [f"key-{i}".encode()]
        assert len(store.query_by_key("T", f"uniq-{i}")) == 1
    header = HEADER.unpack((tmp_path / "s" / "index" / files[0]).read_bytes()[:HEADER_SIZE])
    assert header[5] == 40  # indexCount: entries 1..39 used, so the file is full


# Found by brute force over f"c{i}": crc32("T#c3985819") == crc32("T#c4420602") (31 bits).
COLLIDING = ("c3985819", "c4420602")


def test_hash_collision_is_rechecked_on_the_record(store):
    k1, k2 = COLLIDING
    pre = prefix_crc("T")
    assert key_hash(pre, k1) == key_hash(pre, k2)
    put_keyed(store, [k1, k2])
    assert [r.body for r in store.query_by_key("T", k1)] == [k1.encode()]
    assert [r.body for r in store.query_by_key("T", k2)] == [k2.encode()]


def test_slot_sharing_keys_are_told_apart(tmp_path):
    s = MessageStore(str(tmp_path / "s"), index_slots=1, index_entries=100,
                     flush_interval_ms=3_600_000)
    s.open()
    put_keyed(s, [f"k{i}" for i in range(20)])
    assert [r.body for r in s.query_by_key("T", "k7")] == [b"k7"]
    s.close()


def test_time_range_filters(store):
    res = put_keyed(store, ["t"])
    assert len(store.query_by_key("T", "t", begin_ms=res.store_ts, end_ms=res.store_ts)) == 1
    assert store.query_by_key("T", "t", begin_ms=res.store_ts + 1) == []
    assert store.query_by_key("T", "t", end_ms=res.store_ts - 1) == []


def test_index_file_reopens_with_its_header(tmp_path):
    path = str(tmp_path / "idx")
    f = IndexFile(path, 10, 20)
    now = int(time.time() * 1000)
    assert f.put_many([(5, 100), (15, 200), (7, 300)], now) == 3
    f.close()
    f = IndexFile(path, 10, 20)
    assert f.count == 4 and f.end_phy == 300 and f.begin_phy == 100
    assert list(f.candidates(15, 0, 2**62)) == [200]
    assert list(f.candidates(5, 0, 2**62)) == [100]  # same slot as 15, other hash
    assert f.put_many([(1, 1)] * 30, now) == 16  # room for entries 4..19
    assert f.full
    f.close()
