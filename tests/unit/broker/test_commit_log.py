"""CommitLog segments: roll with a BLANK filler, reads across segments, truncation."""

import os

import pytest

from quiver.wire import record
from quiver.wire.property_string import format_properties
from quiver_broker.commit_log import CommitLog, segment_name
from quiver_broker.store import GetStatus, MessageStore

HOST = b"\x7f\0\0\x01\0\0\x27\x10"
SEG = 4096


@pytest.fixture
def store(tmp_path):
    s = MessageStore(str(tmp_path / "s"), segment_bytes=SEG, flush_interval_ms=3_600_000)
    s.open()
    yield s
    s.close()


def put(store, n, size=300, topic="T", qid=0):
    bodies = [os.urandom(size) for _ in range(n)]
    props = [format_properties({"TAGS": "a", "KEYS": f"k{i}"}) for i in range(n)]
    return bodies, store.put_batch(topic, qid, bodies, props, [0] * n, 0, 1, HOST)


def test_segments_roll_with_blank_filler_and_reads_span_them(store, tmp_path):
    bodies, res = put(store, 40)
    seg_dir = tmp_path / "s" / "commitlog"
    names = sorted(os.listdir(seg_dir))
    assert len(names) >= 3
    assert names == [segment_name(i * SEG) for i in range(len(names))]
    for name in names[:-1]:  # every full segment is exactly segment_bytes and ends in BLANK
        data = (seg_dir / name).read_bytes()
        assert len(data) == SEG
        pos = 0
        while True:
            size, magic = record.peek(data, pos)
            if magic == record.MAGIC_BLANK:
                assert pos + size == SEG
                break
            pos += size
    # a record never spans segments
    size = res.phys_offsets[1] - res.phys_offsets[0]
    for off in res.phys_offsets:
        assert off // SEG == (off + size - 1) // SEG
    got = store.get_messages("T", 0, 0, max_msgs=100)
    assert got.status is GetStatus.FOUND and got.count == 40
    recs = record.decode_many(got.data)
    assert [r.body for r in recs] == bodies
    assert [r.phys_offset for r in recs] == res.phys_offsets
    assert [r.queue_offset for r in recs] == list(range(40))
    assert store.lookup(res.phys_offsets[-1]).body == bodies[-1]
    assert res.end_offset == store.max_phys_offset


def test_one_write_per_batch_offsets_consecutive(store):
    _, a = put(store, 3, size=10)
    _, b = put(store, 2, size=10)
    assert a.first_queue_offset == 0 and b.first_queue_offset == 3
    assert b.phys_offsets[0] == a.end_offset
    assert a.store_ts > 0


def test_record_larger_than_a_segment_is_refused_without_writing(store):
    before = store.max_phys_offset
    with pytest.raises(ValueError):
        put(store, 2, size=SEG)
    assert store.max_phys_offset == before
    assert store.max_offset("T", 0) == 0


def test_lookup_rejects_non_record_offsets(store):
    _, res = put(store, 2)
    assert store.lookup(res.phys_offsets[0] + 1) is None
    assert store.lookup(10**9) is None


def test_commit_log_truncate_deletes_later_segments(tmp_path):
    cl = CommitLog(str(tmp_path / "cl"), 100)
    cl.load()
    for _ in range(3):
        cl.roll()
        cl.append(record.blank(100))
    assert cl.write_end == 300
    cl.truncate(150)
    assert cl.write_end == 150 and len(cl.segments) == 2
    assert sorted(os.listdir(tmp_path / "cl")) == [segment_name(0), segment_name(100)]
    assert os.path.getsize(tmp_path / "cl" / segment_name(100)) == 50
    cl.close()
