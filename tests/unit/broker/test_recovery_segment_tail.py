"""Recovery's scan across segment boundaries: damage at the end of a finished segment (one a later
segment follows) is skipped to that segment's end and the walk goes on; only the tail of the last
segment is cut like a torn write. Queues go on past damage whose header cannot be read."""

import os

import pytest

from quiver.wire import record
from quiver.wire.property_string import format_properties
from quiver_broker import recovery
from quiver_broker.store import GetStatus, MessageStore

HOST = b"\x7f\0\0\x01\0\0\x27\x10"
SEG = 1024  # four ~220-byte records and a BLANK per segment


def make(d, **kw):
    kw.setdefault("flush_interval_ms", 3_600_000)
    kw.setdefault("segment_bytes", SEG)
    s = MessageStore(str(d), **kw)
    s.open()
    return s


def put(store, n, qid=0, start=0):
    """n records, one put each (so each may roll a segment), keyed key-<start + i>."""
    bodies, phys = [], []
    for i in range(n):
        body = f"b{start + i}-".encode() + os.urandom(90)
        props = [format_properties({"TAGS": "a", "KEYS": f"key-{start + i}"})]
        r = store.put_batch("T", qid, [body], props, [0], 0, 1, HOST)
        bodies.append(body)
        phys.append(r.phys_offsets[0])
    return bodies, phys


def crash(store):
    """Like kill -9: data in the page cache, nothing closed, the checkpoint left where it was
    (at 0 here, so recovery walks the whole log)."""
    store.commit_log.flush()
    store.flusher.stop()


def pull(store, qid=0):
    g = store.get_messages("T", qid, 0, max_msgs=1000)
    return record.decode_many(g.data) if g.status is GetStatus.FOUND else []


def seg_path(d, phys):
    return os.path.join(d, "commitlog", f"{phys - phys % SEG:020d}")


def flip(d, phys, xor=0x40):
    with open(seg_path(d, phys), "r+b") as f:
        f.seek(phys % SEG)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ xor]))


def tail_of(d, phys, seg_no):
    """(index of the last record of segment `seg_no`, CommitLog offset of its BLANK)."""
    i = max(k for k, p in enumerate(phys) if p // SEG == seg_no)
    with open(seg_path(d, phys[i]), "rb") as f:
        size = record.check_head(f.read(), phys[i] % SEG)[0]
    return i, phys[i] + size


@pytest.fixture
def d(tmp_path):
    return str(tmp_path / "s")


def segments(d):
    return sorted(os.listdir(os.path.join(d, "commitlog")))


def test_broken_blank_of_a_finished_segment_keeps_the_later_segments(d):
    s = make(d)
    bodies, phys = put(s, 20)
    end = s.max_phys_offset
    crash(s)
    before = segments(d)
    assert len(before) >= 4
    _, blank = tail_of(d, phys, 1)
    flip(d, blank + 4)                       # the BLANK's magic
    s = make(d)
    assert segments(d) == before and s.max_phys_offset == end
    assert [r.body for r in pull(s)] == bodies
    assert s.stats()["recovery_damaged_records"] == 1
    more, _ = put(s, 1, start=20)
    assert s.max_offset("T", 0) == 21 and [x.body for x in pull(s)][-1] == more[0]
    s.close()


@pytest.mark.parametrize("at,xor", [(2, 0x40), (3, 0x01), (4, 0x40)])  # size far off / a bit off / magic
def test_damaged_last_record_of_a_finished_segment_and_its_blank(d, at, xor):
    """Nothing intact after the damage in its segment: the record and the BLANK both broken."""
    s = make(d)
    bodies, phys = put(s, 20)
    end = s.max_phys_offset
    crash(s)
    before = segments(d)
    victim, blank = tail_of(d, phys, 1)
    flip(d, phys[victim] + at, xor)
    flip(d, blank + 4)
    s = make(d)
    assert segments(d) == before and s.max_phys_offset == end
    recs = pull(s)
    assert [r.body for r in recs] == bodies[:victim] + bodies[victim + 1:]
    assert [r.queue_offset for r in recs] == [q for q in range(20) if q != victim]
    st = s.stats()
    assert st["recovery_damaged_records"] == 1 and st["corrupt_records_skipped"] == 1
    assert s.lookup(phys[victim]) is None and s.lookup(phys[victim + 1]).body == bodies[victim + 1]
    assert [r.body for r in s.query_by_key("T", f"key-{victim + 1}")] == [bodies[victim + 1]]
    _, new = put(s, 1, start=20)
    assert s.lookup(new[0]).queue_offset == 20
    s.close()


@pytest.mark.parametrize("at", [2, 4, 28])  # size, magic, PHYSICALOFFSET: the last two leave no readable header
def test_queue_goes_on_past_damage_when_its_entries_are_rebuilt(d, at):
    """The ConsumeQueue lost its entries from the damaged record on (a power cut): recovery rebuilds
    them from each record's QUEUEOFFSET, and the damaged record's offset gets an entry pointing at the
    damage (salvaged header, or the slave's gap-fill rule), so the queue does not stop there."""
    s = make(d)
    bodies, phys = put(s, 20)
    others, _ = put(s, 3, qid=1, start=100)
    crash(s)
    victim, blank = tail_of(d, phys, 1)
    flip(d, phys[victim] + at, 0x40)
    flip(d, blank + 4)
    qdir = os.path.join(d, "consumequeue", "T", "0")
    with open(os.path.join(qdir, sorted(os.listdir(qdir))[-1]), "r+b") as f:
        f.truncate(victim * 20)
    s = make(d)
    assert s.max_offset("T", 0) == 20
    recs = pull(s)
    assert [r.queue_offset for r in recs] == [q for q in range(20) if q != victim]
    assert [r.body for r in recs] == bodies[:victim] + bodies[victim + 1:]
    assert [r.body for r in pull(s, 1)] == others
    _, new = put(s, 1, start=20)
    assert s.lookup(new[0]).queue_offset == 20
    s.close()
    s = make(d)  # recovering again adds nothing
    assert s.max_offset("T", 0) == 21 and len(pull(s)) == 20
    s.close()


def test_damage_at_the_tail_of_the_last_segment_is_still_cut(d):
    s = make(d)
    bodies, phys = put(s, 18)
    crash(s)
    before = segments(d)
    assert phys[-1] // SEG == len(before) - 1
    flip(d, phys[-1] + 3, 0x01)              # the last record of the log: a torn write
    s = make(d)
    assert segments(d) == before and s.max_phys_offset == phys[-1]
    assert [r.body for r in pull(s)] == bodies[:-1]
    assert s.stats()["recovery_damaged_records"] == 0
    _, new = put(s, 1, start=17)
    assert new == [phys[-1]] and s.lookup(new[0]).queue_offset == 17
    s.close()


def test_broken_blank_before_an_empty_last_segment(d):
    """A kill right after a roll leaves the new segment empty: the one before it is still finished."""
    s = make(d)
    bodies, phys = put(s, 4)
    end = s.max_phys_offset
    crash(s)
    assert end < SEG and len(segments(d)) == 1
    with open(seg_path(d, 0), "ab") as f:     # what a roll writes: a BLANK to the end, then a new file
        f.write(record.blank(SEG - end))
    open(os.path.join(d, "commitlog", f"{SEG:020d}"), "wb").close()
    flip(d, end + 4)
    s = make(d)
    assert segments(d) == [f"{0:020d}", f"{SEG:020d}"] and s.max_phys_offset == SEG
    assert [r.body for r in pull(s)] == bodies
    more, new = put(s, 1, start=4)
    assert new == [SEG] and [x.body for x in pull(s)] == bodies + more
    s.close()


def test_scan_reports_the_span_to_the_segment_end_and_goes_on(d):
    s = make(d)
    bodies, phys = put(s, 20)
    crash(s)
    victim, blank = tail_of(d, phys, 0)
    flip(d, blank + 4)
    flip(d, phys[victim] + 4)
    s = MessageStore(d, segment_bytes=SEG)
    s.commit_log.load()
    try:
        seen, damage = [], []
        end = recovery.scan(s.commit_log, 0, lambda rec: seen.append(rec.phys_offset),
                            lambda *a: damage.append(a))
        assert end == s.commit_log.write_end
        assert seen == phys[:victim] + phys[victim + 1:]
        assert damage == [(phys[victim], SEG, None, False)]
    finally:
        s.commit_log.close()
