"""Consumer benchmark: pull vs push consume throughput and rebalance latency, one run.

    python -m bench.consumers [--messages 200000] [--cycles 10] [--repeat 1]

- pull: PullConsumer.poll() draining a pre-loaded 8-queue topic;
- push: PushConsumer with a no-op listener (batch_size 1, 20 threads) on the
  same data (target >= 0.8x pull);
- push inline: the same with consume_inline=True (the listener runs on the
  thread that received the pull's answer, no pool hand-off; target >= 0.9x pull);
  the three alternate `repeat` times, each a new group, medians reported;
- rebalance: a consumer joins and leaves a group `cycles` times; latency is
  from the NOTIFY_CONSUMER_IDS_CHANGED a member receives to its first pull of
  a newly owned queue (target p99 < 1 s).
Writes bench/results/consumers-<date>.json. Everything runs on 127.0.0.1.
"""

import argparse
import datetime
import itertools
import json
import os
import statistics
import tempfile
import time

from quiver import Admin, ConsumeResult, Message, Producer, PullConsumer, PushConsumer
from quiver.tools.local import LocalCluster

BODY = b"x" * 100
TOPIC = "BenchConsume"


def preload(namesrv: str, n: int) -> None:
    Admin(namesrv=namesrv).create_topic(TOPIC, queues=8)
    with Producer("bench-pg", namesrv=namesrv) as p:
        batch = [Message(TOPIC, BODY)] * 100
        futs = [p.send_batch_async(batch) for _ in range(n // 100)]
        for f in futs:
            f.result(60)


def pull_rate(namesrv: str, n: int, group: str = "bench-pull") -> float:
    t0 = time.perf_counter()  # both consumers are timed from before they subscribe: set-up counts alike
    with PullConsumer(group, namesrv=namesrv, consume_from="first") as c:
        c.subscribe(TOPIC)
        got = 0
        while got < n and time.perf_counter() - t0 < 120:
            got += len(c.poll(0.5))
        return got / (time.perf_counter() - t0)


def push_rate(namesrv: str, n: int, group: str = "bench-push", inline: bool = False) -> float:
    counter = itertools.count()
    done = [None]

    def fn(msgs):
        for _ in msgs:
            if next(counter) == n - 1:
                done[0] = time.perf_counter()
        return ConsumeResult.SUCCESS

    t0 = time.perf_counter()
    c = PushConsumer(group, namesrv=namesrv, consume_from="first", consume_inline=inline)
    c.subscribe(TOPIC)
    c.register(fn)
    c.start()
    while done[0] is None and time.perf_counter() - t0 < 120:
        time.sleep(0.01)
    c.shutdown()
    return n / ((done[0] or time.perf_counter()) - t0)


def rebalance_latency(namesrv: str, cycles: int) -> list[float]:
    def member():
        c = PushConsumer("bench-rb", namesrv=namesrv, consume_from="last")
        c.subscribe(TOPIC)
        c.register(lambda msgs: ConsumeResult.SUCCESS)
        return c.start()

    def wait_owned(consumers, total=8):
        deadline = time.monotonic() + 10
        while sum(len(c.assignment()) for c in consumers) != total or not all(c.assignment() for c in consumers):
            if time.monotonic() > deadline:
                raise RuntimeError("rebalance did not settle in 10 s")
            time.sleep(0.01)

    a = member()
    wait_owned([a])
    a._rebalance_latencies_ms.clear()
    lat = []
    for _ in range(cycles):
        b = member()
        wait_owned([a, b])
        b.shutdown()
        wait_owned([a])
        lat.extend(b._rebalance_latencies_ms)
    lat.extend(a._rebalance_latencies_ms)
    a.shutdown()
    return sorted(lat)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--cycles", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=1, help="alternating rounds of pull, push, push inline")
    args = ap.parse_args(argv)
    runs: dict[str, list[float]] = {"pull": [], "push": [], "inline": []}
    with tempfile.TemporaryDirectory() as tmp:
        c = LocalCluster(tmp)
        try:
            c.add_core()
            preload(c.namesrv, args.messages)
            for r in range(args.repeat):
                runs["pull"].append(pull_rate(c.namesrv, args.messages, f"bench-pull-{r}"))
                runs["push"].append(push_rate(c.namesrv, args.messages, f"bench-push-{r}"))
                runs["inline"].append(push_rate(c.namesrv, args.messages, f"bench-push-inline-{r}", inline=True))
            lat = rebalance_latency(c.namesrv, args.cycles)
        finally:
            c.stop()
    pull, push, inline = (statistics.median(v) for v in (runs["pull"], runs["push"], runs["inline"]))
    p50 = lat[len(lat) // 2] if lat else float("nan")
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] if lat else float("nan")
    rows = [
        ("pull consume, PullConsumer.poll (msg/s)", pull, ""),
        ("push consume, no-op listener (msg/s)", push, f"{push / pull:.2f}x pull (target >= 0.8)"),
        ("push consume, consume_inline=True (msg/s)", inline, f"{inline / pull:.2f}x pull (target >= 0.9)"),
        ("rebalance notify -> first pull p50 (ms)", p50, f"{len(lat)} queue moves"),
        ("rebalance notify -> first pull p99 (ms)", p99, "target < 1000"),
    ]
    for name, value, note in rows:
        print(f"{name:<44} {value:>12,.1f}  {note}")
    out = {"messages": args.messages, "pull_msgs": pull, "push_msgs": push, "push_over_pull": push / pull,
           "push_inline_msgs": inline, "push_inline_over_pull": inline / pull, "repeat": args.repeat, "runs": runs,
           "rebalance_p50_ms": p50, "rebalance_p99_ms": p99, "rebalance_samples": len(lat)}
    os.makedirs(os.path.join(os.path.dirname(__file__), "results"), exist_ok=True)
    path = os.path.join(os.path.dirname(__file__), "results",
                        f"consumers-{datetime.datetime.now():%Y-%m-%d-%H%M}.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=2)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
