"""PullConsumer.poll() latency: IO-thread pulls vs direct_poll, both at once on the same messages.

    python -m bench.poll_latency [--rate 500] [--seconds 4] [--rounds 6]

Two bench.e2e_consumer processes (groups of their own, one with direct_poll=True) consume
the same 4-queue topic while a producer here sends 1 KiB messages at `rate` (send_async,
its send time in property "t"): each round both see the same messages under the same
machine load, which on a shared machine compares far better than runs one after the
other. Reports the medians over the rounds and each round's p50 ratio (direct / io).
Writes bench/results/poll-latency-<date>.json. Everything runs on 127.0.0.1.
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

from quiver import Admin, Message, Producer
from quiver.tools.local import LocalCluster
from bench.peers import base

VARIANTS = ("io", "direct")


def one_round(namesrv: str, admin: Admin, p: Producer, r: int, rate: int, seconds: float) -> dict:
    topic, n = f"PollLatency{r}", int(rate * seconds)
    admin.create_topic(topic, queues=4)
    order = VARIANTS if r % 2 == 0 else VARIANTS[::-1]   # neither always starts first
    procs = {v: subprocess.Popen([sys.executable, "-m", "bench.e2e_consumer", namesrv, topic, str(n),
                                  str(seconds + 15), v, f"poll-{v}-{r}"], stdout=subprocess.PIPE, text=True,
                                 cwd=base.ROOT, start_new_session=True) for v in order}
    try:
        for v, proc in procs.items():
            if proc.stdout.readline().strip() != "ready":
                raise RuntimeError(f"{v} consumer did not say ready")
        body = b"x" * 1024
        base.paced(rate, n, lambda i: p.send_async(Message(topic, body, properties={"t": repr(time.time())})))
        out = {v: json.loads(proc.stdout.readline()) for v, proc in procs.items()}
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)
            proc.stdout.close()
    for v, got in out.items():
        if got["count"] < n:
            raise RuntimeError(f"{v}: consumer saw {got['count']} of {n}")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=int, default=500)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--rounds", type=int, default=6)
    args = ap.parse_args(argv)
    rounds = []
    with tempfile.TemporaryDirectory() as tmp:
        c = LocalCluster(tmp)
        try:
            c.add_core()
            with Admin(namesrv=c.namesrv) as admin, Producer("poll-latency", namesrv=c.namesrv) as p:
                for r in range(args.rounds):
                    rounds.append(one_round(c.namesrv, admin, p, r, args.rate, args.seconds))
                    print(r, {v: (round(rounds[-1][v]["p50_us"]), round(rounds[-1][v]["p99_us"])) for v in VARIANTS},
                          flush=True)
        finally:
            c.stop()
    summary = {f"{v}_{q}": statistics.median(r[v][f"{q}_us"] for r in rounds) for v in VARIANTS
               for q in ("p50", "p99", "p999")}
    ratios = [r["direct"]["p50_us"] / r["io"]["p50_us"] for r in rounds]
    for q in ("p50", "p99", "p999"):
        print(f"e2e {q} at {args.rate} msg/s (us): io {summary[f'io_{q}']:,.0f}  direct {summary[f'direct_{q}']:,.0f}")
    print("p50 direct/io per round:", " ".join(f"{x:.2f}" for x in ratios))
    out = {"rate": args.rate, "seconds": args.seconds, "rounds": rounds, "summary": summary, "p50_ratios": ratios}
    os.makedirs(os.path.join(os.path.dirname(__file__), "results"), exist_ok=True)
    path = os.path.join(os.path.dirname(__file__), "results",
                        f"poll-latency-{datetime.datetime.now():%Y-%m-%d-%H%M}.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=2)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
