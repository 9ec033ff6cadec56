"""Retention: expiry by mtime, delete hours, disk ratios, disk_full, min offsets follow."""

import os
import time

import pytest

from quiver.wire import record
from quiver.wire.property_string import format_properties
from quiver_broker.store import GetStatus, MessageStore, PutStatus

HOST = b"\x7f\0\0\x01\0\0\x27\x10"
SEG = 1024
HOUR_MS = 3_600_000


class Disk:
    """A fake partition (statvfs_usage's shape) whose used ratio the test moves."""
    TOTAL = 100 << 30

    def __init__(self, ratio=0.1):
        self.ratio = ratio

    def __call__(self, path):
        used = int(self.TOTAL * self.ratio)
        return self.TOTAL, used, self.TOTAL - used


@pytest.fixture
def store(tmp_path):
    s = MessageStore(str(tmp_path / "s"), segment_bytes=SEG, cq_entries_per_file=4,
                     index_slots=50, index_entries=20, flush_interval_ms=3_600_000,
                     file_reserved_hours=72, delete_when_hours=(99,))  # never the hour
    s.disk.usage = Disk()
    s.open()
    yield s
    s.close()


def fill(store, n=40):
    props = [format_properties({"KEYS": f"k{i}"}) for i in range(n)]
    bodies = [bytes(100) for _ in range(n)]
    return store.put_batch("T", 0, bodies, props, [0] * n, 0, 1, HOST)


def age(store, count, hours=100):
    """Make the oldest `count` segments look `hours` old."""
    old = time.time() - hours * 3600
    for seg in store.commit_log.segments[:count]:
        os.utime(seg.path, (old, old))


def now_ms():
    return int(time.time() * 1000)


def test_expired_segments_deleted_only_when_allowed(store):
    res = fill(store)
    n_segs = len(store.commit_log.segments)
    assert n_segs >= 5
    age(store, 3)
    assert store.clean_expired(now_ms()) == 0  # not the delete hour, disk fine
    assert store.clean_expired(now_ms(), force=True) == 3  # stops at the first fresh one
    assert len(store.commit_log.segments) == n_segs - 3
    assert store.min_phys_offset == 3 * SEG
    assert store.lookup(res.phys_offsets[0]) is None
    lo = store.min_offset("T", 0)
    assert lo > 0 and store.get_messages("T", 0, lo).status is GetStatus.FOUND
    first = record.decode_many(store.get_messages("T", 0, lo).data)[0]
    assert first.phys_offset >= 3 * SEG
    g = store.get_messages("T", 0, 0)
    assert (g.status, g.next_offset) == (GetStatus.OFFSET_TOO_SMALL, lo)
    cq_files = store.cqs[("T", 0)].files
    assert cq_files[0].start // 20 <= lo < cq_files[0].start // 20 + 4  # stale files gone
    assert store.query_by_key("T", "k0") == []
    assert len(store.query_by_key("T", f"k{first.queue_offset}")) == 1
    assert all(f.end_phy >= store.min_phys_offset for f in store.index.files)


def test_delete_hour_allows_expired(store):
    fill(store)
    age(store, 2)
    store.delete_when_hours = (time.localtime().tm_hour,)
    assert store.clean_expired(now_ms()) == 2


def test_never_deletes_the_current_segment(store):
    fill(store)
    age(store, 100)
    store.clean_expired(now_ms(), force=True)
    assert len(store.commit_log.segments) == 1
    assert store.get_messages("T", 0, store.min_offset("T", 0)).status is GetStatus.FOUND


def test_above_max_used_ratio_deletes_expired_outside_the_hour(store):
    fill(store)
    age(store, 2)
    store.disk.usage.ratio = 0.8
    assert store.clean_expired(now_ms()) == 2
    assert not store.disk_full


def test_clean_forcibly_deletes_fresh_segments_until_ratio_drops(store):
    fill(store)
    disk = store.disk.usage
    disk.ratio = 0.875
    before = len(store.commit_log.segments)
    real_delete = store.commit_log.delete_oldest

    def delete_and_free():
        disk.ratio -= 0.01
        return real_delete()

    store.commit_log.delete_oldest = delete_and_free
    assert store.clean_expired(now_ms()) == 3  # 0.875 -> 0.845, none expired
    assert len(store.commit_log.segments) == before - 3


def test_disk_full_refuses_puts_until_usage_drops(store):
    fill(store, 5)
    end = store.max_phys_offset
    assert len(store.commit_log.segments) == 1  # nothing deletable: the ratio stays up
    store.disk.usage.ratio = 0.95
    assert store.clean_expired(now_ms()) == 0
    assert store.disk_full and store.stats()["disk_full"]
    r = fill(store, 3)
    assert r.status is PutStatus.DISK_FULL and r.phys_offsets == []
    assert store.max_phys_offset == end and store.max_offset("T", 0) == 5
    store.disk.usage.ratio = 0.5
    store.clean_expired(now_ms())
    assert not store.disk_full
    assert fill(store, 3).status is PutStatus.PUT_OK
    assert store.max_offset("T", 0) == 8
