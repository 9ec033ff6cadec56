"""A slave whose disk fills (a real small tmpfs for its data dir) while a SYNC_MASTER keeps taking sends:
the slave pauses without spinning or corrupting, the master answers FLUSH_SLAVE_TIMEOUT (never SEND_OK)
for what no slave acked, and when space comes back the slave resumes by itself (no restart) and ends
with every stored message byte for byte, its CommitLog identical to the master's."""

import os
import threading
import time

import pytest

from quiver import Admin, Message, Producer, SendStatus
from quiver.wire.transport import Transport

from faults.store_checks import mount_tmpfs, read_topic, status, unmount, wait_for
from support.ha import ha_cluster, wait_slave_connected  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.faults]

MIB = 1 << 20
TOPIC = "HaFull"
QUEUES = 2
STORE = ("--segment-bytes", str(MIB), "--index-slots", "20000", "--index-entries", "80000",
         "--cq-entries-per-file", "20000")
NOT_REPLICATED = {SendStatus.FLUSH_SLAVE_TIMEOUT, SendStatus.SLAVE_NOT_AVAILABLE}


@pytest.fixture
def tmpfs(tmp_path):
    """A real 24 MiB tmpfs for the slave's data dir, unmounted at the end (the cluster is killed first:
    this fixture is requested before ha_cluster)."""
    d = tmp_path / "slave-tmpfs"
    d.mkdir()
    mount_tmpfs(d, "24m")
    try:
        yield d
    finally:
        unmount(d)


def fill(d) -> str:
    """A ballast file taking every free byte of the tmpfs; returns its path."""
    path = os.path.join(d, "ballast")
    chunk = b"\0" * MIB
    with open(path, "wb", buffering=0) as f:
        try:
            while True:
                f.write(chunk)
        except OSError:
            pass
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError:
            pass
    return path


class Sender:
    """Pipelined sends in the background: msg id -> (status, body, queue, queue offset, sent at)."""

    def __init__(self, namesrv: str):
        self.p = Producer("pg-hafull", namesrv=namesrv, retries=0, send_timeout=10.0)
        self.p.start()
        self.out: dict = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.th = threading.Thread(target=self._run, daemon=True)
        self.n = 0

    def batch(self, tag: str, n: int) -> dict:
        msgs = [Message(TOPIC, f"{tag}{self.n + i}-".encode() + os.urandom(200 + (self.n + i) % 800))
                for i in range(n)]
        self.n += n
        at = time.monotonic()
        futs = [(m, self.p.send_async(m)) for m in msgs]
        got = {}
        for m, f in futs:
            r = f.result(15)
            got[r.msg_id] = (r.status, m.body, r.queue_id, r.queue_offset, at)
        with self.lock:
            self.out.update(got)
        return got

    def _run(self):
        while not self.stop.is_set():
            self.batch("bg", 50)

    def close(self):
        self.stop.set()
        if self.th.is_alive():
            self.th.join(30)
        self.p.shutdown()


def run(tmpfs, ha_cluster, slave_extra: tuple, expect_rollback: bool):
    c, master, slave = ha_cluster("SYNC_MASTER", master_args=(*STORE, "--slave-timeout-ms", "500"),
                                  slave_args=(*STORE, "--data-dir", str(tmpfs), "--clean-interval-ms", "3600000",
                                              *slave_extra))
    t = Transport("ha-disk-full")
    s = None
    try:
        Admin(namesrv=c.namesrv).create_topic(TOPIC, queues=QUEUES)
        wait_slave_connected(t, master)
        s = Sender(c.namesrv)
        first = s.batch("a", 1000)
        assert {v[0] for v in first.values()} == {SendStatus.SEND_OK}
        ballast = fill(tmpfs)
        s.th.start()                                       # keep sending while the slave's disk is full
        wait_for(lambda: status(t, slave)["ha"]["paused"], 20, "the slave to pause on its full disk")
        paused_at = time.monotonic()
        st = status(t, slave)
        assert st["ha"]["state"].startswith("paused (disk)") and st["ha"]["error"], st["ha"]
        assert st["store"]["max_phys_offset"] < status(t, master)["store"]["max_phys_offset"]
        time.sleep(3.0)                                    # a few retries (0.5, 1, 2 s) while still full
        late = {k: v for k, v in dict(s.out).items() if v[4] > paused_at + 0.2}
        assert late and {v[0] for v in late.values()} <= NOT_REPLICATED, \
            f"sends after the slave paused were answered {sorted({v[0].name for v in late.values()})}"
        st = status(t, slave)
        assert st["ha"]["paused"] and st["ha"]["disk_pauses"] == 1, st["ha"]
        if expect_rollback:
            assert st["store"]["puts_rolled_back"] >= 1 and st["store"]["write_errors"] >= 1, st["store"]
        assert slave.alive()
        os.unlink(ballast)                                 # space comes back; no restart
        end = None

        def caught_up():
            nonlocal end
            end = status(t, master)["store"]["max_phys_offset"]
            return not status(t, slave)["ha"]["paused"] and status(t, slave)["store"]["max_phys_offset"] >= end
        wait_for(caught_up, 30, "the slave to resume and catch up by itself")
        s.stop.set()
        s.th.join(30)
        after = s.batch("c", 500)                          # replicated again: SEND_OK
        assert {v[0] for v in after.values()} == {SendStatus.SEND_OK}
        end = status(t, master)["store"]["max_phys_offset"]
        wait_for(lambda: status(t, slave)["store"]["max_phys_offset"] == end, 15, "the slave to converge")
        stored = dict(s.out)
        for broker in (master, slave):                     # every message, whatever its status, byte for byte
            served = read_topic(t, broker.addr, TOPIC, QUEUES)
            missing = [k for k in stored if k not in served]
            assert not missing, f"{len(missing)} of {len(stored)} messages not served by {broker.name}"
            for mid, (_, body, qid, qoff, _) in stored.items():
                rec = served[mid]
                assert (rec.body, rec.queue_id, rec.queue_offset) == (body, qid, qoff), broker.name
            assert status(t, broker)["store"]["corrupt_records_skipped"] == 0
        mdir = os.path.join(c.data_dir, "broker", "bk", "commitlog")
        sdir = os.path.join(str(tmpfs), "bk-1", "commitlog")
        read = lambda d: b"".join(open(os.path.join(d, n), "rb").read() for n in sorted(os.listdir(d)))  # noqa: E731
        assert read(sdir) == read(mdir), "the slave's CommitLog differs from the master's"
    finally:
        if s is not None:
            s.close()
        t.close()
    text = open(slave.log_path).read()
    assert text.count("replication paused") == 1 and text.count("replication resumed") == 1, \
        "the pause and the resume are logged once each, not per retry"


def test_slave_disk_guard_pauses_replication_and_resumes_when_space_returns(tmpfs, ha_cluster):
    run(tmpfs, ha_cluster, ("--disk-min-free-bytes", str(2 * MIB)), expect_rollback=False)


def test_slave_real_enospc_is_rolled_back_and_resumes(tmpfs, ha_cluster):
    # the guard let through (limits at 100 %, no minimum, one check per 2 s): the slave's writes hit
    # ENOSPC for real and each chunk is cut back to the last whole record
    run(tmpfs, ha_cluster, ("--disk-full-ratio", "1.0", "--disk-clean-forcibly-ratio", "1.0",
                            "--disk-min-free-bytes", "0", "--disk-check-bytes", str(1 << 40),
                            "--disk-check-interval-ms", "2000"), expect_rollback=True)
