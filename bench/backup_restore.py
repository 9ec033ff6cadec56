"""Backup and restore figures: python -m bench.backup_restore [--messages N] [--segment-mb M] [--s3]

A broker (real processes on loopback, data in a temp dir) is filled with N keyed 1 KiB
messages; `quiver broker backup` snapshots it (its answer: files hard-linked, bytes copied,
the worker's time); `quiver broker restore` rebuilds a store from it; a broker is started on
that store (its first start: CRC checks and the re-index after the last full index file).
Prints one JSON object with the three times. With --s3 the backup goes to s3://, a moto server
on loopback (a Python process on the same cores: its figures are an upper bound on the
broker's and the restorer's own work, not an object store's speed), and comes back from there.
"""

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

from quiver import Admin, Message, Producer  # noqa: E402
from quiver.tools.local import LocalCluster  # noqa: E402
from support.moto_s3 import moto_server  # noqa: E402

QUIVER = os.path.join(os.path.dirname(sys.executable), "quiver")


def _json(*args) -> dict:
    return json.loads(subprocess.run([QUIVER, *args, "-o", "json"], capture_output=True, text=True,
                                     check=True).stdout)


def run(messages: int, segment_bytes: int, root: str, endpoint: str = "") -> dict:
    seg = ("--segment-bytes", str(segment_bytes))
    c = LocalCluster(os.path.join(root, "a"))
    c.add_namesrv()
    c.wait()
    b = c.add_broker(None, "broker-a", "--backup-dir", os.path.join(root, "backups"), *seg)
    c.wait()
    c.wait_registered(1)
    try:
        with Admin(namesrv=c.namesrv) as a:
            a.create_topic("BkBench", queues=8)
        body = os.urandom(1024)
        with Producer("bk-bench", namesrv=c.namesrv) as p:
            for f in [p.send_async(Message("BkBench", body, keys=[f"k{i}"])) for i in range(messages)]:
                f.result(120)
        t = time.monotonic()
        to = ("--to", "s3://bench-backups/bench", "--s3-endpoint", endpoint) if endpoint else ("--to", "bench")
        backup = _json("--namesrv", c.namesrv, "broker", "backup", "--broker", b.addr, *to)
        backup_s = time.monotonic() - t
    finally:
        c.stop()
    t = time.monotonic()
    s3 = ("--s3-endpoint", endpoint) if endpoint else ()
    restored = _json("broker", "restore", "--from", backup["path"], *s3, "--data-dir", os.path.join(root, "r", "broker"))
    restore_s = time.monotonic() - t
    r = LocalCluster(os.path.join(root, "r"))
    try:
        r.add_namesrv()
        r.wait()
        t = time.monotonic()
        r.add_broker(None, "broker-a", *seg)
        r.wait(timeout=600)
        first_start_s = time.monotonic() - t
    finally:
        r.stop()
    return {"messages": messages, "commitlog_bytes": backup["cut_offset"], "backup": backup,
            "backup_round_trip_s": round(backup_s, 2), "restore_s": round(restore_s, 2), "restored": restored,
            "first_start_s": round(first_start_s, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--segment-mb", type=int, default=32)
    ap.add_argument("--s3", action="store_true", help="back up to s3:// (a moto server on loopback) and restore from it")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="quiver-bk-bench-") as root, contextlib.ExitStack() as stack:
        endpoint = stack.enter_context(moto_server(os.environ.__setitem__, ["bench-backups"])) if args.s3 else ""
        print(json.dumps(run(args.messages, args.segment_mb << 20, root, endpoint), indent=2))


if __name__ == "__main__":
    main()
