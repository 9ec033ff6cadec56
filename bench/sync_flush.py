"""SYNC-flush produce with the broker's code before and after a change, interleaved in one run.

    python -m bench.sync_flush --before HEAD~1             # the working tree vs its parent commit
    python -m bench.sync_flush --before abc123 --rounds 16 --messages 20000
    python -m bench.sync_flush --before abc123~1 --after abc123  # one commit alone (others' edits left out)

Two brokers (`--flush sync`, each with its own name server) run side by side: "after" runs the
working tree's services/broker-store (or revision `--after`), "before" the same directory at
git revision `--before`, exported to a temp dir as the quiver_broker package first on its PYTHONPATH. Each round
produces `--messages` 1 KiB messages pipelined (bench.peers.quiver_system.Client: send_async,
window 1000, as `python -m bench`'s produce) to a new topic on each broker, the order
alternating, then measures the disk ceiling (1 KiB appends, fdatasync per 64 KiB). On a shared
machine one run's figures swing by 2x and more, so the per-round ratio after/before (both
measured within seconds) is the figure to read. Also per variant: broker CPU per message
(/proc) and, from each broker's /metrics, the mean send latency (request received -> SEND_OK)
beside the mean CommitLog fsync time and the fsyncs per 1,000 messages; with --latency-s, blocking
send()s' latency too. Writes bench/results/sync-flush-<date>.json.
"""

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

from quiver import Admin, Message
from quiver.tools.local import LocalCluster, free_port

from bench.peers import base
from bench.peers.ceilings import disk_append
from bench.peers.base import cpu_s
from bench.peers.quiver_system import Client

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
METRICS = ("quiver_send_latency_seconds", "quiver_flush_latency_seconds")


def export_broker(rev: str, into: str) -> str:
    """services/broker-store at `rev` as `into`/quiver_broker; returns `into`."""
    archive = subprocess.run(["git", "-C", REPO, "archive", rev, "services/broker-store"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", into], input=archive, check=True)
    os.rename(os.path.join(into, "services", "broker-store"), os.path.join(into, "quiver_broker"))
    return into


def sums(metrics_addr: str) -> dict:
    """{name: (sum, count)} of the latency histograms in METRICS."""
    text = urllib.request.urlopen(f"http://{metrics_addr}/metrics", timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        for name in METRICS:
            for part in ("_sum", "_count"):
                if line.startswith(name + part + " "):
                    out.setdefault(name, {})[part] = float(line.split()[-1])
    return {k: (v.get("_sum", 0.0), v.get("_count", 0.0)) for k, v in out.items()}


class Broker:
    def __init__(self, name: str, pythonpath: str | None, tmp: str):
        self.name, self.metrics = name, f"127.0.0.1:{free_port()}"
        env_before = os.environ.get("PYTHONPATH")
        if pythonpath:
            os.environ["PYTHONPATH"] = pythonpath
        try:
            self.cluster = LocalCluster(os.path.join(tmp, name))
            self.cluster.add_namesrv()
            self.cluster.wait()
            self.proc = self.cluster.add_broker(None, None, "--flush", "sync", "--metrics-listen", self.metrics).proc
            self.cluster.wait()
            self.cluster.wait_registered(1)
        finally:
            os.environ.pop("PYTHONPATH", None) if env_before is None else os.environ.update(PYTHONPATH=env_before)
        self.admin = Admin(namesrv=self.cluster.namesrv)
        self.client = Client({"namesrv": self.cluster.namesrv})
        self.rates, self.cpu, self.msgs, self.lat = [], 0.0, 0, {m: [0.0, 0.0] for m in METRICS}
        self.sync_lat: list[float] = []

    def new_topic(self) -> str:
        topic = base.unique("T")
        self.admin.create_topic(topic, queues=4)
        return topic

    def round(self, n: int) -> None:
        topic = self.new_topic()
        self.client.produce(topic, 10, 1024)           # route lookup outside the timing
        before, c0, t0 = sums(self.metrics), cpu_s(self.proc.pid), time.perf_counter()
        acked = self.client.produce(topic, n, 1024)
        self.rates.append(acked / (time.perf_counter() - t0))
        self.cpu += cpu_s(self.proc.pid) - c0
        self.msgs += acked
        after = sums(self.metrics)
        for m in METRICS:
            self.lat[m][0] += after[m][0] - before[m][0]
            self.lat[m][1] += after[m][1] - before[m][1]

    def sync_sends(self, seconds: float) -> None:
        """Blocking send()s one after another for `seconds`: each one's latency kept."""
        msg = Message(self.new_topic(), b"x" * 1024)
        self.client.p.send(msg)
        end = time.perf_counter() + seconds
        while (t0 := time.perf_counter()) < end:
            self.client.p.send(msg)
            self.sync_lat.append(time.perf_counter() - t0)

    def close(self) -> None:
        self.client.close()
        self.admin.shutdown()
        self.cluster.stop()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", required=True, help="git revision of services/broker-store to compare with")
    ap.add_argument("--after", help="git revision to run as after (default: the working tree)")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--messages", type=int, default=20_000)
    ap.add_argument("--latency-s", type=float, default=0.0,
                    help="per round and broker, also blocking send()s for this long: their p50/p99/p99.9/max")
    ap.add_argument("--out", default=RESULTS)
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.messages < 100:
        ap.error("--rounds >= 1 and --messages >= 100")
    disk: list[float] = []
    with tempfile.TemporaryDirectory(prefix="quiver-bench-syncflush-") as tmp:
        code, after = os.path.join(tmp, "before-code"), os.path.join(tmp, "after-code")
        os.makedirs(code)
        os.makedirs(after)
        brokers = [Broker("before", export_broker(args.before, code), tmp),
                   Broker("after", export_broker(args.after, after) if args.after else None, tmp)]
        try:
            for b in brokers:       # connections, routes, first segment files: not timed
                b.client.produce(b.new_topic(), 1000, 1024)
            for r in range(args.rounds):
                for b in (brokers if r % 2 == 0 else brokers[::-1]):
                    b.round(args.messages)
                    if args.latency_s > 0:
                        b.sync_sends(args.latency_s)
                disk.append(disk_append(50_000, 64 * 1024))
                print(r, {b.name: round(b.rates[-1]) for b in brokers}, "disk", round(disk[-1]), file=sys.stderr)
        finally:
            for b in brokers:
                b.close()
    ceiling = statistics.median(disk)
    paired = [a / b for a, b in zip(brokers[1].rates, brokers[0].rates)]
    doc = {"command": "python -m bench.sync_flush " + " ".join(argv or sys.argv[1:]),
           "load_average": os.getloadavg(), "disk_fdatasync64k_recs_s": disk,
           "paired_after_over_before": {"median": statistics.median(paired),
                                        "geomean": statistics.geometric_mean(paired), "rounds": paired}}
    for b in brokers:
        send, fsync = b.lat["quiver_send_latency_seconds"], b.lat["quiver_flush_latency_seconds"]
        doc[b.name] = {"msgs_s": b.rates, "median_msgs_s": statistics.median(b.rates),
                       "ratio_to_disk_ceiling": statistics.median(b.rates) / ceiling,
                       "broker_cpu_us_per_msg": b.cpu / b.msgs * 1e6,
                       "send_latency_mean_ms": send[0] / send[1] * 1e3 if send[1] else None,
                       "fsync_mean_ms": fsync[0] / fsync[1] * 1e3 if fsync[1] else None,
                       "fsyncs_per_1k_msgs": fsync[1] / b.msgs * 1000 if b.msgs else None}
        if b.sync_lat:
            doc[b.name]["sync_send"] = {**base.percentiles(b.sync_lat), "max_us": max(b.sync_lat) * 1e6}
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"sync-flush-{datetime.datetime.now():%Y-%m-%d-%H%M}.json")
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
    summary = {k: v for k, v in doc.items() if k != "disk_fdatasync64k_recs_s"}
    print(json.dumps(summary, indent=1, default=str).replace("\n   ", " "))
    print("wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
