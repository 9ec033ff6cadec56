"""A full disk (a real 64 MiB tmpfs): puts are refused with a clear code, nothing acked is lost,
writes resume by themselves when space comes back, and a restart serves everything again."""

import os
import re
import time

import pytest

from quiver import Admin, Message, Producer, SendStatus
from quiver.wire.codes import ResponseCode
from quiver.errors import QuiverError
from quiver.wire.transport import Transport

from faults.store_checks import mount_tmpfs, read_topic, remount, send_ok, status, unmount, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.faults]

MIB = 1 << 20
TOPIC = "Full"
QUEUES = 2
@pytest.fixture
def tmpfs(tmp_path):
    """A real 64 MiB tmpfs for the broker's data dir, unmounted at the end, also on failure.
    Requested before make_cluster, so the broker is killed before the unmount."""
    d = tmp_path / "tmpfs"
    d.mkdir()
    mount_tmpfs(d, "64m")
    try:
        yield d
    finally:
        unmount(d)


SMALL_STORE = ("--flush", "sync", "--segment-bytes", str(4 * MIB), "--index-slots", "50000",
               "--index-entries", "200000", "--cq-entries-per-file", "20000")


def fill(p, tag: str, acked: dict, unknown: set, until_refused: bool, limit: int = 200_000) -> list[QuiverError]:
    """Pipelined sends of 1-16 KiB bodies until 30 in a row are refused (or `limit`); returns the refusals."""
    refused: list[QuiverError] = []
    streak = 0
    i = 0
    while i < limit and (not until_refused or streak < 30):
        msgs = [Message(TOPIC, f"{tag}-{i + j}-".encode() + os.urandom(1024 * (1 + (i + j) % 16)))
                for j in range(20)]
        for m, f in [(m, p.send_async(m)) for m in msgs]:
            try:
                r = f.result(10)
            except QuiverError as exc:
                if exc.code == ResponseCode.SERVICE_NOT_AVAILABLE:
                    refused.append(exc)
                    streak += 1
                else:
                    unknown.add(m.body)  # a timeout: stored or not, never acked
                continue
            assert r.status is SendStatus.SEND_OK
            acked[r.msg_id] = (m.body, r.queue_id, r.queue_offset)
            streak = 0
        i += 20
    return refused


def check_all(t, broker, acked: dict, unknown: set) -> None:
    """Every acked message is served byte for byte (and CRC-checked); nothing refused is."""
    served = read_topic(t, broker.addr, TOPIC, QUEUES)
    missing = [k for k in acked if k not in served]
    assert not missing, f"{len(missing)} of {len(acked)} acknowledged messages lost"
    for mid, (body, qid, qoff) in acked.items():
        rec = served[mid]
        assert (rec.body, rec.queue_id, rec.queue_offset) == (body, qid, qoff), "an acked message came back different"
    extra = [r for k, r in served.items() if k not in acked and r.body not in unknown]
    assert not extra, f"{len(extra)} refused messages were stored anyway"


def run_disk_full(tmpfs, make_cluster, extra_args, remark_re, expect_write_errors: bool, resume_s: float = 15):
    c = make_cluster(broker_args=(*SMALL_STORE, "--data-dir", str(tmpfs), *extra_args))
    broker = next(s for s in c.services if s.role == "broker")
    Admin(namesrv=c.namesrv).create_topic(TOPIC, queues=QUEUES)
    t = Transport("disk-full-test")
    acked, unknown = {}, set()
    try:
        with Producer("pg-full", namesrv=c.namesrv, retries=0, send_timeout=5.0) as p:
            refused = fill(p, "a", acked, unknown, until_refused=True)
            assert refused, "the disk never filled"
            remark = refused[-1].remark
            m = re.fullmatch(remark_re, remark)
            assert m, f"unexpected refusal remark: {remark!r}"
            st = status(t, broker)["store"]
            assert st["disk_full"] and st["max_phys_offset"] == st["flushed_offset"]
            if expect_write_errors:
                assert st["puts_rolled_back"] >= 1 and st["write_errors"] >= 1, st
            assert len(acked) > 1000
            check_all(t, broker, acked, unknown)          # a full disk: reads keep working
            remount(tmpfs, "256m")                          # space comes back, no restart
            wait_for(lambda: send_ok(p, Message(TOPIC, b"probe")), resume_s, "writes to resume")
            before = len(acked)
            assert not fill(p, "b", acked, unknown, until_refused=False, limit=2000)
            assert len(acked) == before + 2000
        unknown.add(b"probe")
        check_all(t, broker, acked, unknown)
        c.restart(broker)
        c.wait_registered(1)
        check_all(t, broker, acked, unknown)
        assert status(t, broker)["store"]["corrupt_records_skipped"] == 0
    finally:
        t.close()
        for svc in c.services:
            if svc.alive():
                svc.kill()


def test_disk_guard_refuses_before_writing_and_resumes_when_space_comes_back(tmpfs, make_cluster):
    t0 = time.monotonic()
    run_disk_full(tmpfs, make_cluster, ("--disk-min-free-bytes", str(MIB)),
                  r"writes refused: disk (\d+) % full on .*/tmpfs/broker-a( \(\d+ more bytes would pass 90 %\))?; "
                  r"writes resume below 85 %",
                  expect_write_errors=False)
    assert time.monotonic() - t0 < 90


def test_real_enospc_is_rolled_back_and_answered_with_the_same_code(tmpfs, make_cluster):
    # The guard let through (limits at 100 %, an unbounded budget, one statvfs at the first put and
    # the next 30 s later): the disk fills for real before that, index reservations and page
    # rounding hit ENOSPC, each put cut back. A check due during the fill could see the last few
    # KiB and refuse first, without a write error: with 2 s between checks a loaded machine did.
    t0 = time.monotonic()
    run_disk_full(tmpfs, make_cluster,
                  ("--disk-full-ratio", "1.0", "--disk-clean-forcibly-ratio", "1.0", "--disk-min-free-bytes", "0",
                   "--disk-check-bytes", str(1 << 40), "--disk-check-interval-ms", "30000"),
                  r"writes refused: (a put failed on .*/tmpfs/broker-a: No space left on device; nothing of "
                  r"this put was stored, writes resume when the disk has room|disk (\d+) % full on .*/tmpfs/"
                  r"broker-a( \(\d+ more bytes would pass 100 %\))?; writes resume below 100 %)",
                  expect_write_errors=True, resume_s=60)
    assert time.monotonic() - t0 < 150
