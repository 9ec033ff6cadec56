"""A byte flipped in a stored record (body, properties, size field): the broker stays up, serves every
other acked message, never the bad one, and counts it in STATUS; recovery does not cut the log at it."""

import os
import time

import pytest

from quiver import Admin, Message, Producer, PullConsumer, SendStatus
from quiver.wire import record
from quiver.wire.transport import Transport
from quiver.wire.properties import UNIQ_KEY
from quiver.wire.property_string import get_property

from faults.store_checks import read_topic, status

pytestmark = [pytest.mark.slow, pytest.mark.faults]

TOPIC = "Flips"
QUEUES = 2
N = 300


def send_all(namesrv) -> dict:
    """N acked messages with a key each: msg id -> (body, queue, queue offset)."""
    acked = {}
    with Producer("pg-flip", namesrv=namesrv, retries=0) as p:
        futs = [(b, p.send_async(Message(TOPIC, b, keys=[f"k{i}"], tags="t")))
                for i, b in enumerate(f"m{i}-".encode() + os.urandom(200 + i) for i in range(N))]
        for body, f in futs:
            r = f.result(10)
            assert r.status is SendStatus.SEND_OK
            acked[r.msg_id] = (body, r.queue_id, r.queue_offset)
    return acked


def locate(store_dir: str, msg_id: str) -> tuple[str, int, int, int]:
    """(segment path, position in it, record size, properties length) of the stored record of `msg_id`."""
    seg_dir = os.path.join(store_dir, "commitlog")
    for name in sorted(os.listdir(seg_dir)):
        path = os.path.join(seg_dir, name)
        data = open(path, "rb").read()
        pos = 0
        while pos + 8 <= len(data):
            size, blank = record.check_head(data, pos)
            if blank:
                break
            rec = record.decode_at(data, pos)
            if get_property(rec.props, UNIQ_KEY) == msg_id:
                return path, pos, size, len(rec.props.encode())
            pos += size
    raise AssertionError(f"{msg_id} not found on disk")


def flip(path: str, at: int, xor: int = 0x20) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ xor]))


def assert_served_all_but(t, broker, acked: dict, bad: set) -> None:
    served = read_topic(t, broker.addr, TOPIC, QUEUES)   # every served record CRC-checked on arrival
    assert not bad & set(served), "a corrupt record was served"
    for mid, (body, qid, qoff) in acked.items():
        if mid not in bad:
            rec = served.get(mid)
            assert rec is not None, f"acked message {mid} (queue {qid}, offset {qoff}) not served"
            assert (rec.body, rec.queue_id, rec.queue_offset) == (body, qid, qoff)


def consume_all(namesrv, group: str) -> set:
    got = set()
    with PullConsumer(group, namesrv=namesrv, consume_from="first") as pc:
        pc.subscribe(TOPIC)
        deadline, idle = time.monotonic() + 30, 0
        while time.monotonic() < deadline and idle < 6:
            msgs = pc.poll(0.5)
            idle = 0 if msgs else idle + 1
            got.update(m.msg_id for m in msgs)
    return got


def setup(make_cluster, *broker_args):
    c = make_cluster(broker_args=broker_args)
    broker = next(s for s in c.services if s.role == "broker")
    Admin(namesrv=c.namesrv).create_topic(TOPIC, queues=QUEUES)
    return c, broker, os.path.join(c.data_dir, "broker", "broker-a"), send_all(c.namesrv)


def test_flipped_body_byte_live_then_after_a_kill(make_cluster):
    c, broker, store_dir, acked = setup(make_cluster)
    victim = list(acked)[N // 2]
    path, pos, size, _ = locate(store_dir, victim)
    flip(path, pos + record.FIXED_SIZE + 7)              # live, under the running broker
    t = Transport("flip-test")
    try:
        assert_served_all_but(t, broker, acked, {victim})
        assert consume_all(c.namesrv, "g-body") == set(acked) - {victim}   # the consumer never stalls
        st = status(t, broker)["store"]
        assert st["corrupt_records_skipped"] >= 1 and broker.alive()
        broker.kill()                                     # recovery meets it in the middle of the log
        c.restart(broker)
        c.wait_registered(1)
        assert_served_all_but(t, broker, acked, {victim})
        st = status(t, broker)["store"]
        assert st["recovery_damaged_records"] == 1 and st["corrupt_records_skipped"] >= 1
    finally:
        t.close()
    assert "corrupt record skipped: Flips/" in open(broker.log_path).read()


def test_flipped_property_byte_with_record_crc(make_cluster):
    c, broker, store_dir, acked = setup(make_cluster, "--append-prop-crc")
    victim = list(acked)[N // 3]
    path, pos, size, plen = locate(store_dir, victim)
    broker.stop()
    flip(path, pos + size - plen + 3)                     # inside the first property's name
    c.restart(broker)
    c.wait_registered(1)
    t = Transport("flip-test")
    try:
        assert_served_all_but(t, broker, acked, {victim})
        st = status(t, broker)["store"]
        assert st["corrupt_records_skipped"] >= 1 and st["recovery_damaged_records"] == 1
    finally:
        t.close()


def test_flipped_size_field_in_the_middle_and_at_the_tail(make_cluster):
    c, broker, store_dir, acked = setup(make_cluster)
    ids = list(acked)
    middle, last = ids[N // 2], max(ids, key=lambda k: locate(store_dir, k)[1])
    spots = [(locate(store_dir, middle), 0x40), (locate(store_dir, last), 0x01)]
    broker.stop()
    for (path, pos, _, _), xor in spots:
        flip(path, pos + 2, xor)                          # TOTALSIZE: far past the data / a bit off
    c.restart(broker)
    c.wait_registered(1)
    t = Transport("flip-test")
    try:
        # the middle one is skipped by recovery (the records after it kept), the tail one is cut
        # like a torn write; neither is served, every other acked message is
        assert_served_all_but(t, broker, acked, {middle, last})
        st = status(t, broker)["store"]
        assert st["recovery_damaged_records"] == 1 and st["corrupt_records_skipped"] >= 1
    finally:
        t.close()
    log = open(broker.log_path).read()
    assert "damaged CommitLog bytes" in log and "no intact record after it (a torn tail)" in log
