"""kill -9 during a CommitLog segment roll, an IndexFile rollover and a checkpoint write, 10 times
each: every acknowledged message survives intact and nothing corrupt is ever served.

Small segments / index files and a checkpoint after every flush pass make those moments frequent;
the test watches the store directory for the moment (a new segment, a new index file, the
checkpoint's temp file) and kills the broker at a random instant right after it appears.
"""

import os
import random
import sys
import threading
import time

import pytest

from quiver import Admin
from quiver.wire.transport import Transport

from faults.store_checks import check_served, produce

pytestmark = [pytest.mark.slow, pytest.mark.faults]

TOPIC = "Rolls"
QUEUES = 2
CYCLES = 10
BASE = ("--flush", "sync", "--cq-entries-per-file", "3000")


def new_entry(directory: str):
    """A trigger: true once `directory` has a file it did not have when this was called."""
    before = set(os.listdir(directory)) if os.path.isdir(directory) else set()
    return lambda: os.path.isdir(directory) and bool(set(os.listdir(directory)) - before)


def kill_cycles(make_cluster, broker_args, trigger_for, inside, window_s: float = 0.001) -> tuple[int, int, float]:
    """CYCLES times: load, wait for the trigger (polled without sleeping), kill -9 at a random instant
    within `window_s`, restart. Returns (cycles
    the trigger fired in, kills that left the moment unfinished on disk — `inside(store_dir)` —
    and seconds); asserts 0 acked lost / 0 corrupt served at the end."""
    rng = random.Random()
    t0 = time.monotonic()
    c = make_cluster(broker_args=(*BASE, *broker_args))
    broker = next(s for s in c.services if s.role == "broker")
    store_dir = os.path.join(c.data_dir, "broker", "broker-a")
    Admin(namesrv=c.namesrv).create_topic(TOPIC, queues=QUEUES)
    t = Transport("kill-at-roll")
    acked: dict = {}
    lock = threading.Lock()
    fired = landed = 0
    try:
        for cycle in range(CYCLES):
            stop = threading.Event()
            th = threading.Thread(target=produce, args=(c.namesrv, TOPIC, f"c{cycle}", stop, acked, lock))
            th.start()
            time.sleep(0.2)                       # under load before the moment
            trigger = trigger_for(store_dir)
            deadline = time.monotonic() + 8
            switch = sys.getswitchinterval()
            sys.setswitchinterval(1e-5)  # the producer thread must not hold the GIL for 5 ms while we watch
            try:
                while time.monotonic() < deadline:
                    if trigger():
                        fired += 1
                        break
                until = time.perf_counter() + rng.uniform(0, window_s)
                while time.perf_counter() < until:  # a random instant within the window (no sleep: too coarse)
                    pass
                broker.kill()                       # SIGKILL
            finally:
                sys.setswitchinterval(switch)
            landed += bool(inside(store_dir))
            stop.set()
            th.join(30)
            c.restart(broker)
        c.wait_registered(1)
        check_served(t, broker, TOPIC, QUEUES, acked)
        log = open(broker.log_path, errors="replace").read()
        assert "checkpoint None" not in log.split("recovery (abnormal)", 1)[-1], "a checkpoint was torn"
    finally:
        t.close()
        for svc in c.services:
            if svc.alive():
                svc.kill()
    assert len(acked) > CYCLES * 200
    print(f"trigger fired {fired}/{CYCLES}, {landed} kills left the moment unfinished, {len(acked)} acked")
    return fired, landed, time.monotonic() - t0


def newest(directory: str) -> str:
    return os.path.join(directory, max(os.listdir(directory)))


def fresh_segment(d: str) -> bool:
    """The newest segment holds less than one batch: the kill came right at its roll."""
    return os.path.getsize(newest(os.path.join(d, "commitlog"))) < 8 * 1024


def fresh_index(d: str) -> bool:
    """The newest index file has no entries in its header yet (count <= 1)."""
    with open(newest(os.path.join(d, "index")), "rb") as f:
        head = f.read(40)
    return len(head) < 40 or int.from_bytes(head[36:40], "big") <= 1


SEGMENT = 64 * 1024


def next_segment(d: str):
    """A trigger: the next segment's file exists (its name is predictable: one stat per poll)."""
    cl = os.path.join(d, "commitlog")
    names = [int(n) for n in os.listdir(cl)] if os.path.isdir(cl) else []
    path = os.path.join(cl, f"{(max(names) if names else -SEGMENT) + SEGMENT:020d}")
    return lambda: os.path.exists(path)


def test_kill_during_segment_roll(make_cluster):
    fired, landed, took = kill_cycles(make_cluster, ("--segment-bytes", str(SEGMENT)), next_segment,
                                      fresh_segment, window_s=0.0002)
    assert fired >= CYCLES - 1 and took < 90


def test_kill_during_index_file_rollover(make_cluster):
    # a rollover is ~0.1 ms (create, allocate the slots, first entries, header): a shorter window
    fired, landed, took = kill_cycles(make_cluster, ("--index-slots", "200000", "--index-entries", "1500"),
                                      lambda d: new_entry(os.path.join(d, "index")), fresh_index, window_s=0.0002)
    assert fired >= CYCLES - 1 and took < 90


def test_kill_during_checkpoint_write(make_cluster):
    fired, landed, took = kill_cycles(
        make_cluster, ("--logic-flush-interval-ms", "0"),
        lambda d: (lambda: os.path.exists(os.path.join(d, "checkpoint.tmp"))),
        lambda d: os.path.exists(os.path.join(d, "checkpoint.tmp")))
    assert fired >= CYCLES - 1 and took < 90
