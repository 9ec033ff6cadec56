"""A byte flipped in a record on a SYNC_MASTER's disk (body, properties, size field): replication goes on
past it, the slave's CommitLog stays byte-identical to the master's, the slave serves every other message
byte for byte at the same queue offsets and never the bad one, and counts it in STATUS."""

import os

import pytest

from quiver import Admin, Message, Producer, SendStatus
from quiver.wire import record
from quiver.wire.transport import Transport

from faults.store_checks import read_topic, status, wait_for
from faults.test_corrupt_record import flip, locate
from support.ha import ha_cluster, wait_slave_connected  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.faults]

TOPIC = "HaFlips"
QUEUES = 2
FAST = ("--slave-timeout-ms", "500")


def send(p, tag: str, n: int) -> dict:
    """n messages with a key each: msg id -> (status, body, queue, queue offset)."""
    msgs = [Message(TOPIC, f"{tag}{i}-".encode() + os.urandom(150 + i % 200), keys=[f"{tag}{i}"]) for i in range(n)]
    futs = [(m, p.send_async(m)) for m in msgs]
    out = {}
    for m, f in futs:
        r = f.result(15)
        out[r.msg_id] = (r.status, m.body, r.queue_id, r.queue_offset)
    return out


def log_bytes(store_dir: str) -> bytes:
    d = os.path.join(store_dir, "commitlog")
    return b"".join(open(os.path.join(d, n), "rb").read() for n in sorted(os.listdir(d)))


def run(ha_cluster, where: str, *extra: str):
    c, master, slave = ha_cluster("SYNC_MASTER", master_args=(*FAST, *extra))
    base = os.path.join(c.data_dir, "broker")
    mdir, sdir = os.path.join(base, "bk"), os.path.join(base, "bk-1")
    t = Transport("ha-corrupt")
    try:
        Admin(namesrv=c.namesrv).create_topic(TOPIC, queues=QUEUES)
        wait_slave_connected(t, master)
        with Producer("pg-haflip", namesrv=c.namesrv, retries=0, send_timeout=10.0) as p:
            stored = send(p, "a", 200)
            assert {s for s, *_ in stored.values()} == {SendStatus.SEND_OK}
            slave.stop()                                   # the next records reach the slave only from disk
            later = send(p, "b", 300)                      # stored on the master (no slave ack: not SEND_OK)
            stored.update(later)
            victim = list(later)[150]
            path, pos, size, plen = locate(mdir, victim)
            if where == "body":
                flip(path, pos + record.FIXED_SIZE + 7)
            elif where == "props":
                flip(path, pos + size - plen + 3)          # inside the first property's name
            else:
                flip(path, pos + 3, 0x01)                  # TOTALSIZE one off: the framing breaks
            slave.start()                                  # catches up through the flipped record
            c.wait()
            wait_for(lambda: status(t, slave)["store"]["max_phys_offset"]
                     == status(t, master)["store"]["max_phys_offset"], 30, "the slave to pass the flipped record")
            after = send(p, "c", 200)                      # SYNC_MASTER: SEND_OK only with the slave's ack
            assert {s for s, *_ in after.values()} == {SendStatus.SEND_OK}, "replication stalled at the bad record"
            stored.update(after)
        end = status(t, master)["store"]["max_phys_offset"]
        wait_for(lambda: status(t, slave)["store"]["max_phys_offset"] == end, 15, "the slave to converge")
        assert log_bytes(sdir) == log_bytes(mdir), "the slave's CommitLog differs from the master's"
        for broker in (master, slave):
            served = read_topic(t, broker.addr, TOPIC, QUEUES)   # each served record CRC-checked here
            assert victim not in served, f"the corrupt record was served by {broker.name}"
            for mid, (_, body, qid, qoff) in stored.items():
                if mid != victim:
                    rec = served.get(mid)
                    assert rec is not None, f"{mid} (queue {qid}, offset {qoff}) not served by {broker.name}"
                    assert (rec.body, rec.queue_id, rec.queue_offset) == (body, qid, qoff)
            assert status(t, broker)["store"]["corrupt_records_skipped"] >= 1 and broker.alive()
        ha = status(t, slave)["ha"]
        copied = (ha["corrupt_records_copied"], ha["damaged_spans_copied"])
        assert copied == ((0, 1) if where == "size" else (1, 0)), ha
        slave.stop()                                       # the slave's own recovery keeps it all
        slave.start()
        c.wait()
        served = read_topic(t, slave.addr, TOPIC, QUEUES)
        assert set(served) == set(stored) - {victim}
        assert status(t, slave)["store"]["max_phys_offset"] == end
    finally:
        t.close()
    word = "damaged span" if where == "size" else "corrupt record"
    assert f"replicated a {word} from the master as it is ({TOPIC}/" in open(slave.log_path).read()


def test_flipped_body_byte_is_copied_and_skipped_on_the_slave(ha_cluster):
    run(ha_cluster, "body")


def test_flipped_property_byte_with_record_crc(ha_cluster):
    run(ha_cluster, "props", "--append-prop-crc")


def test_flipped_size_field_keeps_offsets_equal_and_the_records_after_it(ha_cluster):
    run(ha_cluster, "size")
