"""Helpers of the store fault tests (disk full, corrupt records, kill -9 at a roll).

Reads go straight to the broker with PULL_MESSAGE and every served record is
decoded with its body CRC checked here, so "0 corrupt served" is measured on
the wire, independent of the consumer classes.
"""

import subprocess
import time

import pytest

from quiver.wire import record
from quiver.wire import requests as rq
from quiver.wire.codes import RequestCode, ResponseCode
from quiver.wire.properties import UNIQ_KEY
from quiver.wire.property_string import get_property
from quiver.errors import QuiverError

PULL_OK = (ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY,
           ResponseCode.PULL_OFFSET_MOVED)


def status(t, svc) -> dict:
    return t.call(svc.addr, RequestCode.STATUS, timeout=5.0).ext["status"]


def read_queue(t, addr: str, topic: str, queue_id: int, timeout: float = 5.0) -> dict[int, record.Record]:
    """Every record the broker serves from a queue, by queue offset. A served record that is not
    whole and intact (body CRC, lengths) fails the test: the broker must never serve one."""
    out: dict[int, record.Record] = {}
    offset = 0
    while True:
        env = t.call(addr, rq.PullMessage(topic=topic, queue_id=queue_id, offset=offset, max_msgs=256),
                     timeout=timeout, ok=PULL_OK)
        nxt = env.ext["next"]
        if env.code == ResponseCode.SUCCESS:
            data = env.bodies[0]
            pos = 0
            while pos < len(data):
                rec = record.decode_at(data, pos, check_crc=True)  # BadRecord: a corrupt record was served
                assert rec.queue_offset not in out, f"queue offset {rec.queue_offset} served twice"
                out[rec.queue_offset] = rec
                pos += rec.size
        elif env.code == ResponseCode.PULL_NOT_FOUND or nxt == offset:
            return out
        offset = nxt


def read_topic(t, addr: str, topic: str, queues: int) -> dict[str, record.Record]:
    """All records of a topic by UNIQ_KEY (the producer's msg id)."""
    out = {}
    for q in range(queues):
        for rec in read_queue(t, addr, topic, q).values():
            out[get_property(rec.props, UNIQ_KEY)] = rec
    return out


def wait_for(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def send_ok(producer, msg) -> bool:
    try:
        producer.send(msg)
        return True
    except QuiverError:
        return False


def mount_tmpfs(d, size: str = "64m") -> None:
    """Mount a real tmpfs of `size` at `d`; skips the test (with why) where mounting is not allowed."""
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(d)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN): {r.stderr.strip()}")


def unmount(d) -> None:
    """Unmount `d` (lazily if a process still holds it)."""
    if subprocess.run(["umount", str(d)], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", str(d)], capture_output=True)


def remount(d, size: str) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(d)], check=True)


def produce(namesrv: str, topic: str, tag: str, stop, acked: dict, lock, size_step: int = 97) -> None:
    """Pipelined sends with a key each until `stop`; SEND_OK ones go to `acked` (msg id -> body, queue, offset)."""
    from quiver import Message, Producer, SendStatus
    with Producer(f"pg-{tag}", namesrv=namesrv, retries=0, send_timeout=2.0) as p:
        i = 0
        while not stop.is_set():
            msgs = [Message(topic, f"{tag}-{i + j}-".encode() + bytes([(i + j) % 251]) * ((i + j) * size_step % 3000),
                            keys=[f"{tag}-{i + j}"]) for j in range(40)]
            futs = [(m, p.send_async(m)) for m in msgs]
            for m, f in futs:
                try:
                    r = f.result(5)
                except Exception:  # refused, timed out, broker killed: not acked
                    continue
                if r.status is SendStatus.SEND_OK:
                    with lock:
                        acked[r.msg_id] = (m.body, r.queue_id, r.queue_offset)
            i += 40


def check_served(t, broker, topic: str, queues: int, acked: dict) -> dict:
    """0 acked lost and each byte for byte at its queue offset; 0 corrupt served (read_queue checks)."""
    served = read_topic(t, broker.addr, topic, queues)
    missing = [k for k in acked if k not in served]
    assert not missing, f"{len(missing)} of {len(acked)} acknowledged messages lost"
    for mid, (body, qid, qoff) in acked.items():
        rec = served[mid]
        assert (rec.body, rec.queue_id, rec.queue_offset) == (body, qid, qoff), "an acked message came back different"
    assert status(t, broker)["store"]["corrupt_records_skipped"] == 0
    return served
