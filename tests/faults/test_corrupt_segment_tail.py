"""Damage at the end of a full, non-last CommitLog segment (a flipped size field in its last record, a
broken BLANK filler, both): a restarted broker serves every other acked message byte for byte, skips
and counts the damage, keeps every later segment and keeps taking writes. Recovery cuts only the tail
of the last segment; a finished one is skipped to its end (issue 15).

The broker runs with small segments and a checkpoint that stays where the broker started, so its
recovery walks the damaged segment as it does after any crash that follows a segment's completion
within one checkpoint period; after a clean stop the checkpoint is removed for the same reason (a lost
or torn checkpoint means a scan of the whole log).
"""

import os

import pytest

from quiver import Admin, Message, Producer, SendStatus
from quiver.wire import record
from quiver.wire.transport import Transport
from quiver.wire.properties import UNIQ_KEY
from quiver.wire.property_string import get_property

from faults.store_checks import read_topic, status

pytestmark = [pytest.mark.slow, pytest.mark.faults]

TOPIC = "SegTails"
QUEUES = 2
N = 600
SEGMENT = 64 * 1024  # 600 records of ~400 bytes: 4 segments
ARGS = ("--segment-bytes", str(SEGMENT), "--logic-flush-interval-ms", "600000")


def send(namesrv, n: int, tag: str) -> dict:
    """n acked messages with a key each: msg id -> (body, queue, queue offset)."""
    acked = {}
    with Producer(f"pg-{tag}", namesrv=namesrv, retries=0) as p:
        futs = [(b, p.send_async(Message(TOPIC, b, keys=[f"{tag}{i}"])))
                for i, b in enumerate(f"{tag}{i}-".encode() + os.urandom(180 + i % 97) for i in range(n))]
        for body, f in futs:
            r = f.result(10)
            assert r.status is SendStatus.SEND_OK
            acked[r.msg_id] = (body, r.queue_id, r.queue_offset)
    return acked


def segment_tail(store_dir: str, k: int) -> tuple[str, int, int, str]:
    """(path of segment k, position of its last record, position of its BLANK, that record's msg id)."""
    path = os.path.join(store_dir, "commitlog", sorted(os.listdir(os.path.join(store_dir, "commitlog")))[k])
    data = open(path, "rb").read()
    pos = last = 0
    while True:
        size, blank = record.check_head(data, pos)
        if blank:
            assert pos + size == len(data) == SEGMENT, "not a full segment"
            rec = record.decode_at(data, last)
            return path, last, pos, get_property(rec.props, UNIQ_KEY)
        last, pos = pos, pos + size


def flip(path: str, at: int, xor: int = 0x40) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ xor]))


def damage(path: str, last: int, blank: int, kind: str) -> None:
    if "size" in kind:
        flip(path, last + 2)          # TOTALSIZE: far past the segment
    if "magic" in kind:
        flip(path, last + 5)          # the record's MAGICCODE: no header left to read
    if "blank" in kind:
        flip(path, blank + 4)         # the BLANK's magic: nothing intact after the record in its segment


def lose_queue_tail(store_dir: str, queue_id: int, queue_offset: int) -> None:
    """Entries from `queue_offset` on gone (unsynced at a power cut): recovery rebuilds them from the log."""
    qdir = os.path.join(store_dir, "consumequeue", TOPIC, str(queue_id))
    name = sorted(os.listdir(qdir))[-1]
    with open(os.path.join(qdir, name), "r+b") as f:
        f.truncate(queue_offset * 20 - int(name))


def setup(make_cluster):
    c = make_cluster(broker_args=ARGS)
    broker = next(s for s in c.services if s.role == "broker")
    Admin(namesrv=c.namesrv).create_topic(TOPIC, queues=QUEUES)
    store_dir = os.path.join(c.data_dir, "broker", "broker-a")
    acked = send(c.namesrv, N, "m")
    segs = sorted(os.listdir(os.path.join(store_dir, "commitlog")))
    assert len(segs) >= 3
    return c, broker, store_dir, acked, segs


def check_after_restart(c, broker, store_dir, acked: dict, bad: set, segs: list, end: int, corrupt: bool) -> None:
    """Every acked message but `bad` served byte for byte at its queue offset (the queues go on past the
    damage), `bad` never; the damage counted; no segment cut; new writes taken and served."""
    t = Transport("seg-tail")
    try:
        served = read_topic(t, broker.addr, TOPIC, QUEUES)   # every served record CRC-checked on arrival
        assert not bad & set(served), "a damaged record was served"
        lost = [m for m in acked if m not in bad and m not in served]
        assert not lost, f"{len(lost)} acked messages lost (first: {acked[lost[0]][1:]})"
        for mid, (body, qid, qoff) in acked.items():
            if mid not in bad:
                rec = served[mid]
                assert (rec.body, rec.queue_id, rec.queue_offset) == (body, qid, qoff)
        st = status(t, broker)["store"]
        assert st["recovery_damaged_records"] == 1
        assert (st["corrupt_records_skipped"] >= 1) == corrupt
        assert st["max_phys_offset"] == end
        assert sorted(os.listdir(os.path.join(store_dir, "commitlog"))) == segs
        nxt = {q: 1 + max(o for _, qq, o in acked.values() if qq == q) for q in range(QUEUES)}
        more = send(c.namesrv, 40, "n")                       # the broker keeps taking writes
        for body, qid, qoff in more.values():
            assert qoff >= nxt[qid]
        served = read_topic(t, broker.addr, TOPIC, QUEUES)
        assert all(served[m].body == body for m, (body, _, _) in more.items())
    finally:
        t.close()


def test_flipped_size_field_of_the_last_record_of_a_full_segment(make_cluster):
    c, broker, store_dir, acked, segs = setup(make_cluster)
    path, last, blank, victim = segment_tail(store_dir, 1)
    broker.stop()
    end = os.path.getsize(os.path.join(store_dir, "commitlog", segs[-1])) + int(segs[-1])
    damage(path, last, blank, "size")
    os.unlink(os.path.join(store_dir, "checkpoint"))
    c.restart(broker)
    c.wait_registered(1)
    check_after_restart(c, broker, store_dir, acked, {victim}, segs, end, corrupt=True)
    assert "damaged CommitLog bytes" in open(broker.log_path).read()


def test_broken_blank_of_a_full_segment(make_cluster):
    c, broker, store_dir, acked, segs = setup(make_cluster)
    path, last, blank, _ = segment_tail(store_dir, 1)
    broker.stop()
    end = os.path.getsize(os.path.join(store_dir, "commitlog", segs[-1])) + int(segs[-1])
    damage(path, last, blank, "blank")
    os.unlink(os.path.join(store_dir, "checkpoint"))
    c.restart(broker)
    c.wait_registered(1)
    check_after_restart(c, broker, store_dir, acked, set(), segs, end, corrupt=False)
    log = open(broker.log_path).read()
    assert "at the end of a finished segment skipped" in log and "CommitLog cut" not in log


@pytest.mark.parametrize("kind", ["size", "blank", "size+blank", "magic+blank"])
def test_damaged_segment_tail_then_kill_9(make_cluster, kind):
    """Damage under the running broker, kill -9 right after; the damaged record's queue also lost its
    entries from that record on, so recovery rebuilds them from each record's QUEUEOFFSET and must not
    stop at the damage (a readable header keeps its offset; an unreadable one is gap-filled)."""
    c, broker, store_dir, acked, segs = setup(make_cluster)
    path, last, blank, victim = segment_tail(store_dir, 1)
    t = Transport("seg-tail")
    try:
        end = status(t, broker)["store"]["max_phys_offset"]
    finally:
        t.close()
    damage(path, last, blank, kind)
    broker.kill()                                             # SIGKILL right after
    _, qid, qoff = acked[victim]
    lose_queue_tail(store_dir, qid, qoff)
    c.restart(broker)
    c.wait_registered(1)
    record_hit = kind != "blank"
    check_after_restart(c, broker, store_dir, acked, {victim} if record_hit else set(), segs, end,
                        corrupt=record_hit)
    log = open(broker.log_path).read()
    assert "CommitLog cut" not in log
    if "+blank" in kind:
        assert "at the end of a finished segment skipped" in log
    if kind == "magic+blank":
        assert f"{TOPIC}/{qid}: queue offsets [{qoff}, {qoff + 1}) were in damaged CommitLog bytes" in log
