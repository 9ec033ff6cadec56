"""Automatic failover benchmark: python -m bench.failover [--cycles N] [--messages N] [--size B]

1. failover time: a group of 3 with --auto-failover (SYNC flush, SYNC acks) under 3
   controllers, 2 producers sending; kill -9 the master N times (restarting it each
   time): seconds from the kill to the first SEND_OK stored on the new master, p50 and
   max (goal p50 <= 3 s, max <= 6 s), and whether every acknowledged message is on the
   last master byte for byte;
2. SYNC produce throughput, same run, same load (send_async, N messages of B bytes,
   flush sync): a SYNC_MASTER with one slave vs an --auto-failover group of 2 (master +
   one in-sync replica): msg/s and the ratio (goal >= 0.9).
Real processes on loopback; prints one JSON object. The harness is tests/support/failover.py,
shared with tests/faults/test_failover.py.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

from quiver import Admin  # noqa: E402
from quiver.tools.local import LocalCluster  # noqa: E402
from quiver.wire.transport import Transport  # noqa: E402
from support.failover import Load, Rig, kill_cycle  # noqa: E402

from bench.ha import timed_sends, wait_slave  # noqa: E402


def failover_times(cycles: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        rig = Rig(tmp)
        try:
            rig.wait_group(3)
            Admin(namesrv=rig.c.namesrv).create_topic("FoBench", queues=4)
            load = Load(rig.c.namesrv, "FoBench").start()
            took = []
            try:
                for _ in range(cycles):
                    t, stuck = kill_cycle(rig, load)
                    took.append(t)
                    if stuck:
                        print(f"stopped after {len(took)} cycles: {stuck}")
                        break
            finally:
                load.stop()
            from faults.store_checks import read_topic
            g = rig.wait_group(1)
            served = read_topic(rig.t, g["master"], "FoBench", 4)
            lost = sum(1 for m in load.acked if m not in served)
            differ = sum(1 for m, a in load.acked.items() if m in served and
                         (served[m].body, served[m].queue_id, served[m].queue_offset) != a[:3])
            return {"cycles": cycles, "seconds": [round(t, 2) for t in took],
                    "p50_s": round(statistics.median(took), 2), "max_s": round(max(took), 2),
                    "acked": len(load.acked), "acked_lost": lost, "acked_different": differ, "epoch": g["epoch"]}
        finally:
            rig.stop()


def _sync_master(tmp):
    c = LocalCluster(tmp)
    c.add_namesrv()
    c.wait()
    m = c.add_master(None, "bk", "SYNC_MASTER", "--flush", "sync")
    c.add_slave(m, "--flush", "sync")
    c.wait()
    c.wait_registered(2)
    t = Transport("bench")
    try:
        wait_slave(t, m.addr)
    finally:
        t.close()
    return c, c.stop


def _auto(tmp):
    rig = Rig(tmp, members=2)
    rig.wait_group(2)
    return rig.c, rig.stop


def throughput(kind: str, n: int, size: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        c, stop = (_sync_master if kind == "SYNC_MASTER" else _auto)(tmp)
        try:
            Admin(namesrv=c.namesrv).create_topic("FoThroughput", queues=4)
            return {"mode": kind, **timed_sends(c.namesrv, "FoThroughput", n, size)}
        finally:
            stop()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cycles", type=int, default=10)
    ap.add_argument("--messages", type=int, default=20_000)
    ap.add_argument("--size", type=int, default=1024)
    a = ap.parse_args(argv)
    sync = throughput("SYNC_MASTER", a.messages, a.size)
    auto = throughput("AUTO", a.messages, a.size)
    out = {"failover": failover_times(a.cycles),
           "throughput": {"sync_master": sync, "auto_failover": auto,
                          "auto_over_sync_master": round(auto["msg_per_s"] / sync["msg_per_s"], 2)}}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
