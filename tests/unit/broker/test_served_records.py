"""The pull path checks every record it serves: a corrupt one is skipped, counted and logged."""

import logging
import os

import pytest

from quiver.wire import record
from quiver.wire.property_string import format_properties
from quiver.client.message import tag_hash
from quiver_broker.store import GetStatus, MessageStore

HOST = b"\x7f\0\0\x01\0\0\x27\x10"


@pytest.fixture
def store(tmp_path):
    s = MessageStore(str(tmp_path / "s"), segment_bytes=1 << 16, flush_interval_ms=3_600_000)
    s.open()
    yield s
    s.close()


def put(store, n, tags=None):
    bodies = [f"m{i}-".encode() + os.urandom(100) for i in range(n)]
    props = [format_properties({"TAGS": (tags[i] if tags else "a")}) for i in range(n)]
    return bodies, store.put_batch("T", 1, bodies, props, [0] * n, 0, 1, HOST)


def flip(store, phys, at):
    """XOR one byte of the stored record at CommitLog offset `phys`, in its segment file."""
    seg = store.commit_log.segment_for(phys)
    pos = phys - seg.start + at
    b = os.pread(seg.fd, 1, pos)
    os.pwrite(seg.fd, bytes([b[0] ^ 0x20]), pos)


PROPLEN_LOW = -1  # the low byte of PROPLEN, counted back from the properties


@pytest.mark.parametrize("at", [record.FIXED_SIZE + 5, 2, 5, PROPLEN_LOW])  # body, size field, magic, PROPLEN
def test_corrupt_record_is_skipped_counted_and_logged(store, at, caplog):
    bodies, res = put(store, 10)
    size = res.phys_offsets[4] - res.phys_offsets[3]
    plen = len(format_properties({"TAGS": "a"}).encode())
    flip(store, res.phys_offsets[3], at if at >= 0 else size - plen + at)
    with caplog.at_level(logging.ERROR, logger="quiver_broker.queue_reads"):
        g = store.get_messages("T", 1, 0, max_msgs=32)
        store.get_messages("T", 1, 0, max_msgs=32)   # served again: counted again, logged once
    assert g.status is GetStatus.FOUND and g.count == 9 and g.next_offset == 10
    assert [r.body for r in record.decode_many(g.data)] == bodies[:3] + bodies[4:]
    assert store.stats()["corrupt_records_skipped"] == 2
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and lines[0].startswith("corrupt record skipped: T/1 queue offset 3 ")


def test_a_pull_of_only_corrupt_records_moves_past_them(store):
    bodies, res = put(store, 4)
    flip(store, res.phys_offsets[1], record.FIXED_SIZE)
    g = store.get_messages("T", 1, 1, max_msgs=1)
    assert (g.status, g.next_offset, g.count) == (GetStatus.NO_MATCHED_MESSAGE, 2, 0)
    g = store.get_messages("T", 1, 2, max_msgs=8)
    assert [r.body for r in record.decode_many(g.data)] == bodies[2:]


def test_filtered_pull_with_gaps_skips_the_corrupt_match(store):
    bodies, res = put(store, 8, tags=["a", "b"] * 4)
    flip(store, res.phys_offsets[2], record.FIXED_SIZE + 1)
    g = store.get_messages("T", 1, 0, max_msgs=32, tag_hashes={tag_hash("a")})
    assert [r.body for r in record.decode_many(g.data)] == [bodies[0], bodies[4], bodies[6]]
    assert g.next_offset == 8 and store.stats()["corrupt_records_skipped"] == 1


def test_with_prop_crc_a_flipped_property_byte_is_skipped_too(tmp_path):
    s = MessageStore(str(tmp_path / "p"), segment_bytes=1 << 16, flush_interval_ms=3_600_000, prop_crc=True)
    s.open()
    try:
        bodies, res = put(s, 5)
        size = res.phys_offsets[1] - res.phys_offsets[0]
        flip(s, res.phys_offsets[2], size - record.CRC_PROP_BYTES - 3)   # the TAGS value
        g = s.get_messages("T", 1, 0)
        assert [r.body for r in record.decode_many(g.data)] == bodies[:2] + bodies[3:]
        assert s.stats()["corrupt_records_skipped"] == 1
        # a re-put of a stored record (schedule, transaction, retry) gets a fresh CRC, not two
        rec = s.lookup(res.phys_offsets[0])
        again = s.put_batch("T", 1, [rec.body], [rec.props], [0], rec.sys_flag, 1, HOST)
        back = s.lookup(again.phys_offsets[0])
        assert back.props.count("__CRC32#") == 1 and back.sys_flag & record.SYSFLAG_PROP_CRC
        assert s.get_messages("T", 1, 5).count == 1
    finally:
        s.close()


def test_a_producers_prop_crc_sysflag_is_ignored(store):
    store.put_batch("T", 1, [b"b"], [""], [0], record.SYSFLAG_PROP_CRC, 1, HOST)
    assert store.get_messages("T", 1, 0).count == 1 and store.stats()["corrupt_records_skipped"] == 0
