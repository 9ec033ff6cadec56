"""Replication past damaged records on the master, and a slave whose disk refuses writes.

The master's HA read (ReplicationMaster._read) and the slave's append (replica_append) are
driven in process, chunk by chunk, without sockets: the slave must end byte-identical to the
master, serve every record the master serves (at the same queue offsets) and never a bad one.
"""

import errno
import logging
import os
import types

import pytest

from quiver.wire import record
from quiver.wire.property_string import format_properties
from quiver_broker import ha_stream, replica_append
from quiver_broker.config import Config
from quiver_broker.disk_space import DiskSpace
from quiver_broker.ha_master import ReplicationMaster
from quiver_broker.ha_slave import RETRY_MAX_S, RETRY_MIN_S, ReplicationSlave
from quiver_broker.store import GetStatus, MessageStore

HOST = b"\x7f\0\0\x01\0\0\x27\x10"
SEG = 16384
QUEUES = 2


def open_store(path, prop_crc=False, disk=None) -> MessageStore:
    s = MessageStore(str(path), segment_bytes=SEG, cq_entries_per_file=64, index_slots=64, index_entries=256,
                     flush_interval_ms=3_600_000, prop_crc=prop_crc, disk=disk)
    s.open()
    return s


@pytest.fixture
def pair(tmp_path):
    made = []

    def make(prop_crc=False, slave_disk=None):
        m = open_store(tmp_path / "m", prop_crc)
        s = open_store(tmp_path / "s", prop_crc, slave_disk)
        cfg = Config(data_dir=str(tmp_path), broker_name="b", role="ASYNC_MASTER", ha_transfer_bytes=4096,
                     ha_window_bytes=4096, segment_bytes=SEG)
        made.extend([m, s])
        return m, s, ReplicationMaster(cfg, m, None, None, lambda *a: None)

    yield make
    for st in made:
        st.close()


def put(store, n, start=0):
    """n puts of one record each, alternating queues: {phys: (queue, queue offset, body)}."""
    out = {}
    for i in range(start, start + n):
        body = f"m{i}-".encode() + os.urandom(150 + i % 90)
        props = format_properties({"TAGS": "a", "KEYS": f"k{i}", "UNIQ_KEY": f"u{i}"})
        r = store.put_batch("T", i % QUEUES, [body], [props], [0], 0, 1, HOST)
        out[r.phys_offsets[0]] = (i % QUEUES, r.first_queue_offset, body)
    return out


def flip(store, phys, at, xor=0x20):
    seg = store.commit_log.segment_for(phys)
    pos = phys - seg.start + at
    b = os.pread(seg.fd, 1, pos)
    os.pwrite(seg.fd, bytes([b[0] ^ xor]), pos)


def replicate(master, slave, rm, state, offset=None) -> int:
    """Stream the master's whole puts to the slave as the HA thread would; returns the chunk count."""
    off = slave.commit_log.write_end if offset is None else offset
    end = master.max_phys_offset
    chunks = 0
    while off < end:
        data = rm._read(off, end)
        assert data, f"replication stalled at {off} (master end {end})"
        new_end, _ = replica_append.append(slave, off, data, state)
        assert new_end == off + len(data)
        off = new_end
        chunks += 1
    return chunks


def log_bytes(store) -> bytes:
    cl = store.commit_log
    return b"".join(os.pread(s.fd, s.size, 0) for s in cl.segments)


def served(store) -> dict:
    """(queue, queue offset) -> body of every record the store serves; each CRC-checked here."""
    out = {}
    for q in range(QUEUES):
        off = 0
        while True:
            g = store.get_messages("T", q, off, max_msgs=16)
            if g.status not in (GetStatus.FOUND, GetStatus.NO_MATCHED_MESSAGE):
                break
            pos = 0
            while pos < len(g.data):
                rec = record.decode_at(g.data, pos, check_crc=True)
                out[(q, rec.queue_offset)] = rec.body
                pos += rec.size
            off = g.next_offset
    return out


def assert_same(master, slave, sent, bad_phys):
    assert log_bytes(slave) == log_bytes(master)
    assert slave.commit_log.write_end == master.commit_log.write_end == slave.max_phys_offset
    for q in range(QUEUES):
        assert slave.max_offset("T", q) == master.max_offset("T", q)
    want = {(q, qoff): body for phys, (q, qoff, body) in sent.items() if phys not in bad_phys}
    assert served(master) == want
    assert served(slave) == want


PLEN = -1   # marks "a byte inside the properties"


@pytest.mark.parametrize("at,xor,framed", [
    (record.FIXED_SIZE + 5, 0x20, True),   # body: framing intact, body CRC wrong
    (3, 0x01, False),                      # size field one off
    (2, 0x20, False),                      # size field far past the segment
    (1, 0x20, False),                      # size field negative-ish / huge
    (5, 0x20, False),                      # magic: the header cannot be salvaged (queue gap filled)
    (30, 0x20, False),                     # PHYSICALOFFSET
    (record.BODY_LEN_AT + 3, 0x04, False),  # BODYLEN
])
def test_a_damaged_record_is_copied_and_everything_after_it_replicated(pair, at, xor, framed):
    master, slave, rm = pair()
    sent = put(master, 120)
    victim = sorted(sent)[50]
    flip(master, victim, at, xor)
    state = replica_append.ReplicaState()
    replicate(master, slave, rm, state)
    more = put(master, 30, start=120)          # replication goes on past it
    replicate(master, slave, rm, state)
    assert_same(master, slave, {**sent, **more}, {victim})
    assert (state.corrupt_records, state.damaged_spans) == ((1, 0) if framed else (0, 1))
    assert slave.stats()["corrupt_records_skipped"] >= (1 if at != 5 else 0)


def test_property_flip_with_record_crc_is_a_framed_copy(pair):
    master, slave, rm = pair(prop_crc=True)
    sent = put(master, 60)
    victim = sorted(sent)[20]
    size = sorted(sent)[21] - victim
    flip(master, victim, size - record.CRC_PROP_BYTES - 4)   # inside UNIQ_KEY's value
    state = replica_append.ReplicaState()
    replicate(master, slave, rm, state)
    assert_same(master, slave, sent, {victim})
    assert state.corrupt_records == 1 and state.damaged_spans == 0


def test_two_adjacent_damaged_records_and_damage_at_the_tail(pair):
    master, slave, rm = pair()
    sent = put(master, 40)
    offs = sorted(sent)
    flip(master, offs[10], 2)                 # framing broken ...
    flip(master, offs[11], record.FIXED_SIZE + 1)   # ... then a CRC-bad record right after it
    flip(master, offs[-1], 3, 0x01)           # the last whole put: nothing intact after it yet
    state = replica_append.ReplicaState()
    with pytest.raises(AssertionError, match=f"replication stalled at {offs[-1]} "):
        replicate(master, slave, rm, state)
    # held back: the master's recovery would cut that tail after a restart, and the slave must not
    # be ahead of it then
    assert slave.commit_log.write_end == offs[-1]
    assert log_bytes(slave) == log_bytes(master)[:offs[-1]]
    more = put(master, 10, start=40)          # a put after the tail damage: it goes, with the span
    replicate(master, slave, rm, state)
    assert_same(master, slave, {**sent, **more}, {offs[10], offs[11], offs[-1]})
    assert state.damaged_spans == 2   # [10, 12) as one span (the CRC-bad one is not intact), the tail


def test_damage_next_to_segment_ends(pair, caplog):
    master, slave, rm = pair()
    sent = put(master, 200)                   # several 16 KiB segments, each ending in a BLANK
    segs = master.commit_log.segments
    assert len(segs) >= 3
    last0 = max(p for p in sent if p < segs[1].start)
    flip(master, last0, 2)                    # the record before the first BLANK: its size breaks
    last1 = max(p for p in sent if p < segs[2].start)
    blank1 = last1 + (record.peek(os.pread(segs[1].fd, 8, last1 - segs[1].start), 0)[0])
    assert blank1 < segs[1].end
    flip(master, blank1, 5)                   # the second segment's BLANK: its magic breaks
    state = replica_append.ReplicaState()
    with caplog.at_level(logging.ERROR, logger="quiver_broker.ha_master"):
        replicate(master, slave, rm, state)
    assert [s.start for s in slave.commit_log.segments] == [s.start for s in master.commit_log.segments]
    assert_same(master, slave, sent, {last0})
    spans = [r.getMessage().split(")")[0] for r in caplog.records if r.name == "quiver_broker.ha_master"]
    # the broken record runs to the intact BLANK after it; the broken BLANK to its segment's end
    assert spans[0].startswith(f"CommitLog bytes [{last0}, ") and int(spans[0].split(", ")[1]) < segs[0].end
    assert spans[1] == f"CommitLog bytes [{blank1}, {segs[1].end}"
    assert state.damaged_spans == 2


def test_frame_prefix_never_lets_framing_damage_into_a_chunk():
    recs, phys = [], 0
    for i in range(5):
        r = record.encode(b"x" * 40, topic=b"T", queue_offset=i, phys_offset=phys, born_ts=1, born_host=HOST,
                          store_ts=2, store_host=HOST)
        recs.append(r)
        phys += len(r)
    size = len(recs[0])
    buf = bytearray(b"".join(recs))
    buf[size * 2 + record.FIXED_SIZE] ^= 1               # body of record 2: framing still intact
    assert ha_stream.frame_prefix(bytes(buf), 0, len(buf), 1 << 20) == len(buf)
    buf[size * 3 + 3] ^= 1                                 # size of record 3: broken
    assert ha_stream.frame_prefix(bytes(buf), 0, len(buf), 1 << 20) == size * 3
    assert ha_stream.frame_prefix(bytes(buf), 0, size * 2 + 5, 1 << 20) == size * 2   # the limit
    items = ha_stream.check_chunk(bytes(buf), 0, 1 << 20)
    kinds = [type(x).__name__ for x in items]
    assert kinds == ["Record", "Record", "Damage", "Damage", "Record"]
    assert items[2].framed and not items[3].framed and items[3].size == size
    assert items[3].head == ("T", 0, 3, 0)


def test_gap_with_no_damage_to_explain_it_is_not_filled(pair):
    master, slave, rm = pair()
    r0 = record.encode(b"a", topic=b"T", born_ts=1, born_host=HOST, store_ts=2, store_host=HOST)
    r1 = record.encode(b"b", topic=b"T", queue_offset=7, phys_offset=len(r0), born_ts=1, born_host=HOST, store_ts=3,
                       store_host=HOST)  # a corrupt QUEUEOFFSET
    state = replica_append.ReplicaState()
    replica_append.append(slave, 0, r0 + r1, state)
    assert slave.max_offset("T", 0) == 1 and state.gap_entries == 0


# ---- a slave whose disk refuses writes ---------------------------------------------------------

class Usage:
    """A fake statvfs: `full` says whether the partition is at 99 %."""

    def __init__(self):
        self.full = False

    def __call__(self, path):
        total = 1 << 30
        used = total * 99 // 100 if self.full else total // 10
        return total, used, total - used


def test_disk_refused_chunk_leaves_nothing_and_a_failed_write_is_rolled_back(pair, monkeypatch):
    usage = Usage()
    master, slave, rm = pair(slave_disk=DiskSpace("/x", min_free_bytes=0, check_interval_ms=0, usage=usage))
    put(master, 60)
    state = replica_append.ReplicaState()
    data = rm._read(0, master.max_phys_offset)
    usage.full = True
    with pytest.raises(replica_append.DiskRefused, match=r"disk \d+ % full on /x"):
        replica_append.append(slave, 0, data, state)
    assert slave.commit_log.write_end == 0 and slave.max_phys_offset == 0
    usage.full = False
    replica_append.append(slave, 0, data, state)
    end = slave.commit_log.write_end
    q0 = slave.max_offset("T", 0)
    cq_fds = set()
    real = os.pwrite

    def failing(fd, buf, pos):
        if fd in cq_fds:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, buf, pos)
    cq_fds.update(f.fd for cq in slave.cqs.values() for f in cq.files)
    monkeypatch.setattr(os, "pwrite", failing)
    nxt = rm._read(end, master.max_phys_offset)
    with pytest.raises(replica_append.DiskRefused, match="No space left"):
        replica_append.append(slave, end, nxt, state)
    monkeypatch.setattr(os, "pwrite", real)
    assert slave.commit_log.write_end == end == slave.max_phys_offset and slave.max_offset("T", 0) == q0
    assert slave.stats()["puts_rolled_back"] == 1
    slave.disk.check()
    replicate(master, slave, rm, state)
    assert log_bytes(slave) == log_bytes(master)


class FakeService:
    def __init__(self):
        self.timers = []

    def call_later(self, delay, fn, *args):
        self.timers.append((delay, fn, args))

    def call_soon_threadsafe(self, fn, *args):
        fn(*args)

    def fire(self):
        delay, fn, args = self.timers.pop(0)
        fn(*args)
        return delay


def test_slave_pauses_backs_off_logs_once_and_resumes_without_restart(pair, tmp_path, caplog):
    usage = Usage()
    master, slave, rm = pair(slave_disk=DiskSpace("/x", min_free_bytes=0, check_interval_ms=0, usage=usage))
    put(master, 80)
    cfg = Config(data_dir=str(tmp_path), broker_name="b", broker_id=1, role="SLAVE", segment_bytes=SEG)
    svc = FakeService()
    rs = ReplicationSlave(cfg, slave, None, {"T"}, svc, None, {"replicated_bytes": 0}, lambda *a: None,
                          lambda: None)
    end = master.max_phys_offset
    first = rm._read(0, end)
    usage.full = True
    with caplog.at_level(logging.DEBUG, logger="quiver_broker.ha_slave"):
        rs.apply(0, first, SEG)
        assert rs.paused and rs.acked == 0 and not rs._reset
        assert rs.status()["paused"] and rs.status()["state"].startswith("paused (disk)")
        rs.apply(0, first, SEG)                       # in flight: dropped, no resend asked
        assert rs.dropped_chunks == 1 and not rs._reset
        delays = [svc.fire() for _ in range(7)]        # the disk stays full: checks back off
        assert delays == [RETRY_MIN_S, 1.0, 2.0, 4.0, 8.0, RETRY_MAX_S, RETRY_MAX_S]
        assert rs.paused and not rs._reset
        usage.full = False
        svc.fire()                                     # room: ask the master to resend from the ack
        assert not rs.paused and rs.resuming and rs._reset
        rs._reset = False
        off = 0
        while off < end:                               # the master resends from the ack
            data = rm._read(off, end)
            rs.apply(off, data, SEG)
            off += len(data)
        assert rs.acked == end and not rs.resuming and rs.status()["state"] != "paused"
        assert log_bytes(slave) == log_bytes(master)
    msgs = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len([m for m in msgs if m.startswith("replication paused")]) == 1
    assert len([m for m in msgs if m.startswith("replication resumed")]) == 1
    assert rs.status()["disk_pauses"] == 1


def test_a_failed_resume_backs_off_further_without_a_new_log_line(pair, tmp_path, caplog, monkeypatch):
    master, slave, rm = pair(slave_disk=DiskSpace("/x", min_free_bytes=0, check_interval_ms=0, usage=Usage()))
    put(master, 20)
    cfg = Config(data_dir=str(tmp_path), broker_name="b", broker_id=1, role="SLAVE", segment_bytes=SEG)
    svc = FakeService()
    rs = ReplicationSlave(cfg, slave, None, {"T"}, svc, None, {"replicated_bytes": 0}, lambda *a: None,
                          lambda: None)
    data = rm._read(0, master.max_phys_offset)
    real = os.pwrite
    monkeypatch.setattr(os, "pwrite", lambda fd, b, p: (_ for _ in ()).throw(OSError(errno.EIO, "I/O error")))
    with caplog.at_level(logging.WARNING, logger="quiver_broker.ha_slave"):
        rs.apply(0, data, SEG)                 # EIO: rolled back, paused
        assert rs.paused and slave.commit_log.write_end == 0
        svc.fire()                             # the guard sees room: resend asked
        assert rs.resuming
        rs.apply(0, data, SEG)                 # fails again: paused, longer wait, no new line
        assert rs.paused and rs.backoff_s == 2 * RETRY_MIN_S
        monkeypatch.setattr(os, "pwrite", real)
        svc.timers.clear()
        rs._retry()
        rs.apply(0, data, SEG)
    assert rs.acked == len(data) and not rs.paused
    msgs = [r.getMessage() for r in caplog.records]
    assert [m.split(" ")[1] for m in msgs if m.startswith("replication ")] == ["paused", "resumed"]
    assert types.SimpleNamespace(**rs.status()).disk_pauses == 1
