"""kill -9 a compaction pass (and the retention step after it) at 10 points: the store reopens
with the old compacted log or the new one, never a mix, and every key's latest value is served."""

import os
import shutil
import signal
import time

import pytest

from quiver.wire import record
from quiver.wire.property_string import format_properties
from quiver_broker.store import GetStatus, MessageStore

pytestmark = [pytest.mark.faults]

HOST = b"\x7f\0\0\x01\0\0\x27\x10"
# (stage, how many times it is passed first): where the child kills itself
POINTS = [("scan", 0), ("chosen", 0), ("index written", 0), ("record", 0), ("record", 5), ("fsynced", 0),
          ("renamed", 0), ("directory fsynced", 0), ("installed", 0), ("retention done", 0)]


def open_store(d):
    s = MessageStore(d, segment_bytes=4096, flush_interval_ms=3_600_000, index_slots=512, index_entries=4096)
    s.compaction.is_compacted = lambda topic: topic == "C"
    s.open()
    return s


def put_versions(s, latest, versions, keys=20):
    for v in range(versions):
        for k in range(keys):
            body = b"" if (k % 7 == 0 and v == versions - 1) else f"k{k}-v{v}-{time.monotonic_ns()}".encode()
            res = s.put_batch("C", 0, [body], [format_properties({"KEYS": f"k{k}"})], [0], 0, 1, HOST)
            latest[f"k{k}"] = body
            assert res.first_queue_offset >= 0


def served(s) -> dict:
    out, off = {}, 0
    while True:
        g = s.get_messages("C", 0, off, max_msgs=16)
        if g.status not in (GetStatus.FOUND, GetStatus.NO_MATCHED_MESSAGE) or g.next_offset == off:
            return out
        for r in record.decode_many(g.data):
            out[r.properties()["KEYS"]] = r.body
        off = g.next_offset


def crash_child(d: str, stage: str, skip: int) -> int:
    """Fork a child that runs a pass then a retention step over `d`, SIGKILLing itself the
    (skip+1)-th time it reaches `stage`; returns its wait status."""
    pid = os.fork()
    if pid == 0:
        try:
            seen = {}

            def step(point):
                seen[point] = seen.get(point, 0) + 1
                if point == stage and seen[point] == skip + 1:
                    os.kill(os.getpid(), signal.SIGKILL)

            s = open_store(d)
            s.compaction.compact_queue("C", 0, step=step)
            s.clean_expired(now_ms=int(time.time() * 1000) + 10**12, force=True)
            step("retention done")
        finally:
            os._exit(3)   # not killed: the point was never reached
    return os.waitpid(pid, 0)[1]


def test_kill_at_ten_points_loses_no_latest_value(tmp_path):
    base = str(tmp_path / "base")
    s = open_store(base)
    latest: dict = {}
    put_versions(s, latest, 6)
    w_old = s.compaction.compact_queue("C", 0).watermark
    s.clean_expired(now_ms=int(time.time() * 1000) + 10**12, force=True)
    put_versions(s, latest, 8)
    s.flush_step(force=True)
    s.close()
    watermarks = set()
    for i, (stage, skip) in enumerate(POINTS):
        d = str(tmp_path / f"run{i}")
        shutil.copytree(base, d)
        status = crash_child(d, stage, skip)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (stage, skip, status)
        s = open_store(d)
        w = s.compaction.logs[("C", 0)].watermark
        assert w == w_old or w > w_old, stage
        watermarks.add(w)
        assert served(s) == latest, f"killed at {stage} #{skip + 1}"
        s.close()
    assert len(watermarks) == 2   # some kills left the old log, the others the new one


def _stat(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()   # state, ppid, ... (field 3 on)
    except FileNotFoundError:
        return ["X"]


def _alive(pid: int) -> bool:
    return _stat(pid)[0] not in ("Z", "X")   # a zombie has stopped too


def test_kill_of_the_broker_stops_a_pass_in_its_child_process(tmp_path):
    d = str(tmp_path / "store")
    s = open_store(d)
    latest: dict = {}
    put_versions(s, latest, 6)
    s.flush_step(force=True)
    s.close()
    pid_file = str(tmp_path / "child.pid")
    pid = os.fork()
    if pid == 0:
        try:
            s = open_store(d)
            s.compaction.bytes_per_s = 1   # a pass that would take days
            s.compaction.submit(["C"], lambda fn, *a: fn(*a))
            while s.compaction._child is None:
                time.sleep(0.01)
            with open(pid_file + ".tmp", "w") as f:
                f.write(str(s.compaction._child.pid))
            os.rename(pid_file + ".tmp", pid_file)
            time.sleep(60)
        finally:
            os._exit(3)
    deadline = time.monotonic() + 30
    while not os.path.exists(pid_file) and time.monotonic() < deadline:
        time.sleep(0.02)
    child = int(open(pid_file).read())
    deadline = time.monotonic() + 30   # it has its spec and runs the pass once it lowered its priority
    while _alive(child) and _stat(child)[16] != "10" and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _alive(child) and _stat(child)[16] == "10"
    os.kill(pid, signal.SIGKILL)   # the broker: its compaction process goes with it
    os.waitpid(pid, 0)
    deadline = time.monotonic() + 30
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _alive(child)
    s = open_store(d)
    assert served(s) == latest and ("C", 0) not in s.compaction.logs
    s.close()
