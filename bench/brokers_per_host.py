"""More cores for producers: one broker process per host, or several behind one cluster name.

    python -m bench.brokers_per_host                       # 16 producer processes, 1 vs 2 brokers, 5 rounds
    python -m bench.brokers_per_host --brokers 1,2,3 --procs 16 --rounds 3 --messages 80000

A broker serves requests on one thread, so one broker uses about one core however many
producers send to it. RocketMQ's answer is several broker processes per host, each its own
broker name (and store) in the same cluster: a topic gets queues on each, and producers
spread their sends over every queue of the route. Here: one name server, N brokers
(ASYNC flush) on loopback, a fresh topic with --queues queues in all (split between the
brokers), and --procs producer processes (bench.peers.worker, the `python -m bench` procs
workload's) sending --messages 1 KiB messages in all, pipelined (window 1000); the layouts
alternate round by round and the report gives each one's median and the per-round ratios
to one broker. Writes bench/results/brokers-per-host-<date>.json.
"""

import argparse
import datetime
import json
import os
import statistics
import tempfile
import time

from quiver import Admin

from bench.peers import base
from bench.peers.quiver_system import QuiverAsync

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


class Brokers(QuiverAsync):
    """quiver-async with `count` brokers in one cluster; a topic's queues split between them."""

    def __init__(self, count: int, queues: int):
        self.count, self.queues = count, queues

    def __enter__(self):
        from quiver.tools.local import LocalCluster
        self.dir = tempfile.TemporaryDirectory(prefix=f"quiver-bench-brokers{self.count}-")
        self.creds = None
        self.cluster = LocalCluster(self.dir.name)
        try:
            self.cluster.add_namesrv()
            self.cluster.wait()
            for _ in range(self.count):
                self.cluster.add_broker(None, None, "--flush", "async")
            self.cluster.wait()
            self.cluster.wait_registered(self.count)
            self.admin = Admin(namesrv=self.cluster.namesrv)
        except BaseException:
            self.__exit__()
            raise
        return self

    def new_topic(self) -> str:
        topic = base.unique("T")
        self.admin.create_topic(topic, queues=max(1, self.queues // self.count))
        return topic


def one_round(count: int, queues: int, procs: int, messages: int) -> float:
    with Brokers(count, queues) as system:
        return base.concurrent_produce("quiver-async", system, procs, messages, 1024, timeout_s=300.0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--brokers", default="1,2", help="broker counts to compare, comma-separated (default 1,2)")
    ap.add_argument("--procs", type=int, default=16, help="producer processes (default 16)")
    ap.add_argument("--messages", type=int, default=80_000, help="1 KiB messages in all per run (default 80000)")
    ap.add_argument("--queues", type=int, default=8, help="queues of the topic in all (default 8)")
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds (default 5)")
    ap.add_argument("--out", default=RESULTS, help="directory for the JSON (default bench/results)")
    a = ap.parse_args(argv)
    counts = [int(c) for c in a.brokers.split(",")]
    load0 = os.getloadavg()
    rates: dict[int, list[float]] = {c: [] for c in counts}
    for r in range(a.rounds):
        order = counts if r % 2 == 0 else counts[::-1]
        for c in order:
            rates[c].append(one_round(c, a.queues, a.procs, a.messages))
            print(f"round {r + 1}: {c} broker(s) {rates[c][-1]:,.0f} msg/s", flush=True)
    base_c = counts[0]
    summary = {}
    for c in counts:
        ratios = [x / y for x, y in zip(rates[c], rates[base_c])]
        summary[c] = {"median_msgs_s": statistics.median(rates[c]), "rounds": rates[c],
                      "ratio_median": statistics.median(ratios), "ratio_range": [min(ratios), max(ratios)]}
    print(f"\n{a.procs} producer processes, {a.messages:,} x 1 KiB per run, {a.queues} queues, {a.rounds} rounds "
          f"(load average at start {load0[0]:.1f})\n")
    print(f"| brokers | median msg/s | / {base_c} broker(s), median (range) |\n|---:|---:|---|")
    for c, s in summary.items():
        lo, hi = s["ratio_range"]
        print(f"| {c} | {s['median_msgs_s']:,.0f} | {s['ratio_median']:.2f} ({lo:.2f}-{hi:.2f}) |")
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, f"brokers-per-host-{datetime.datetime.now():%Y-%m-%d-%H%M}.json")
    with open(path, "w") as f:
        json.dump({"args": vars(a), "load_at_start": load0, "cores": os.cpu_count(), "time": time.time(),
                   "brokers": summary}, f, indent=1)
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
