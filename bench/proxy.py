"""RocketMQ 5 client through the gRPC proxy vs Quiver's own SDK, same run, same cluster.

    python -m bench.proxy [--messages 3000] [--threads 4] [--quick] [--out DIR]

1. Produce: synchronous sends of 1 KiB bodies from `--threads` threads, Quiver's
   `Producer.send` straight to the broker vs rocketmq-python-client's `Producer.send`
   through the proxy. Target ratio (proxy / SDK) >= 0.6.
2. Receive + ack: every message of a fresh group, POP on both sides, batches of 32,
   each message acked one by one as the 5.x clients do: Quiver's `SimpleConsumer` vs the
   5.x `SimpleConsumer` through the proxy. Target ratio >= 0.5.
Each also runs the 5.x client against bench.proxy_ceiling, a MessagingService answering
at once with no broker: the most that client reaches on this machine, whatever serves it.
Per side it reports msg/s and the CPU time per message of each process (client, gRPC
server, broker), read from /proc: where the time goes when the ratio is short.
The sides alternate (SDK, proxy, ceiling, twice) and the best of two is kept.
Writes proxy-<date>.json into --out (default bench/results). Everything runs on 127.0.0.1.
"""

import argparse
import contextlib
import datetime
import json
import logging
import os
import subprocess
import sys
import tempfile
import time

from rocketmq import ClientConfiguration, Credentials, FilterExpression
from rocketmq import Message as V5Message
from rocketmq import Producer as V5Producer
from rocketmq import SimpleConsumer as V5SimpleConsumer

from quiver import Admin, Message, Producer, SimpleConsumer
from quiver.tools.local import LocalCluster, free_port

from bench.transactions import BODY, _threads   # the same load shape as the transactions bench

TOPIC = "BenchProxy"
_TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


class Side:
    """One way of reaching the topic: the processes whose CPU it spends, and its results."""

    def __init__(self, name: str, pids: dict[str, int]):
        self.name, self.pids = name, pids
        self.runs: dict[str, list[dict]] = {}

    def measure(self, workload: str, run) -> None:
        """run() -> (messages, seconds); records msg/s and CPU µs per message of each process."""
        before = {k: cpu_s(p) for k, p in self.pids.items()}
        n, seconds = run()
        cpu = {k: round((cpu_s(p) - before[k]) / max(1, n) * 1e6) for k, p in self.pids.items()}
        self.runs.setdefault(workload, []).append({"msgs_s": round(n / seconds), "cpu_us_per_msg": cpu})

    def best(self, workload: str) -> dict:
        return max(self.runs[workload], key=lambda r: r["msgs_s"])


def _v5_msg() -> V5Message:
    m = V5Message()
    m.topic, m.body = TOPIC, BODY
    return m


def _timed_threads(threads: int, n: int, fn) -> tuple[int, float]:
    rate = _threads(threads, n, fn)
    done = n // threads * threads
    return done, done / rate


def sdk_produce(namesrv: str, n: int, threads: int) -> tuple[int, float]:
    with Producer("bench-proxy", namesrv=namesrv, auto_batch=False) as p:
        p.send(Message(TOPIC, BODY))
        return _timed_threads(threads, n, lambda: p.send(Message(TOPIC, BODY)))


def v5_produce(endpoint: str, n: int, threads: int) -> tuple[int, float]:
    v5 = V5Producer(ClientConfiguration(endpoint, Credentials()), (TOPIC,))
    v5.startup()
    try:
        v5.send(_v5_msg())
        return _timed_threads(threads, n, lambda: v5.send(_v5_msg()))
    finally:
        v5.shutdown()


def _drain(receive, ack, total: int) -> tuple[int, float]:
    got, t0, idle = 0, time.monotonic(), 0
    while got < total and idle < 5:
        msgs = receive()
        idle = 0 if msgs else idle + 1
        for m in msgs:
            ack(m)
        got += len(msgs)
    return got, time.monotonic() - t0


def sdk_receive(namesrv: str, total: int, group: str) -> tuple[int, float]:
    with SimpleConsumer(group, namesrv=namesrv, consume_from="first", await_duration_s=1) as sc:
        sc.subscribe(TOPIC)
        return _drain(lambda: sc.receive(32, 60), sc.ack, total)


def v5_receive(endpoint: str, total: int, group: str) -> tuple[int, float]:
    v5 = V5SimpleConsumer(ClientConfiguration(endpoint, Credentials()), group, {TOPIC: FilterExpression()},
                          await_duration=1)
    v5.startup()
    try:
        return _drain(lambda: v5.receive(32, 60), v5.ack, total)
    finally:
        v5.shutdown()


@contextlib.contextmanager
def ceiling_server():
    """bench.proxy_ceiling as a process of its own, like the proxy: (endpoint, pid)."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "bench.proxy_ceiling", "--port", str(port)],
                            stdout=subprocess.PIPE, text=True,
                            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"bench.proxy_ceiling exited with {proc.wait(5)}")
        yield f"127.0.0.1:{port}", proc.pid
    finally:
        proc.kill()
        proc.wait(10)
        proc.stdout.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="gRPC proxy vs Quiver's SDK benchmark")
    ap.add_argument("--messages", type=int, default=3000)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--quick", action="store_true", help="small counts (smoke)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"),
                    help="directory of the result file (default bench/results)")
    args = ap.parse_args(argv)
    if args.quick:
        args.messages = 600
    logging.getLogger("rocketmq-python-client").setLevel(logging.WARNING)
    n, me = args.messages, os.getpid()
    c = LocalCluster(tempfile.mkdtemp(prefix="bench-proxy-"))
    try:
        c.add_core()
        Admin(namesrv=c.namesrv).create_topic(TOPIC, queues=4)
        proxy = c.add_proxy("--pop-consume-from", "first")
        c.wait()
        broker = next(s for s in c.services if s.role == "broker").proc.pid
        with ceiling_server() as (null_ep, null_pid):
            sdk = Side("sdk", {"client": me, "broker": broker})
            via = Side("proxy", {"client": me, "proxy": proxy.proc.pid, "broker": broker})
            ceil = Side("ceiling", {"client": me, "server": null_pid})
            for _ in range(2):
                sdk.measure("produce", lambda: sdk_produce(c.namesrv, n, args.threads))
                via.measure("produce", lambda: v5_produce(proxy.url, n, args.threads))
                ceil.measure("produce", lambda: v5_produce(null_ep, n, args.threads))
            total = 2 * (n // args.threads * args.threads + 1)    # what each of the two producers stored
            for run in range(2):
                sdk.measure("receive_ack", lambda: sdk_receive(c.namesrv, 2 * total, f"bench-sdk-{run}"))
                via.measure("receive_ack", lambda: v5_receive(proxy.url, 2 * total, f"bench-v5-{run}"))
                ceil.measure("receive_ack", lambda: v5_receive(null_ep, 2 * total, f"bench-null-{run}"))
    finally:
        c.stop()
    res = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "messages": n, "threads": args.threads,
           "load_at_start": os.getloadavg()[0]}
    targets = {"produce": 0.6, "receive_ack": 0.5}
    for wl, target in targets.items():
        s, p, x = sdk.best(wl), via.best(wl), ceil.best(wl)
        res[wl] = {"sdk": s, "proxy": p, "ceiling": x, "target": target,
                   "ratio": round(p["msgs_s"] / s["msgs_s"], 2),
                   "ceiling_ratio": round(x["msgs_s"] / s["msgs_s"], 2),
                   "proxy_of_ceiling": round(p["msgs_s"] / x["msgs_s"], 2)}
        r = res[wl]
        print(f"{wl:<12} SDK {s['msgs_s']:>6} msg/s   proxy {p['msgs_s']:>6}   5.x client ceiling {x['msgs_s']:>6}   "
              f"proxy/SDK {r['ratio']} (target >= {target})   ceiling/SDK {r['ceiling_ratio']}   "
              f"proxy/ceiling {r['proxy_of_ceiling']}")
        for side in (s, p, x):
            print(f"{'':<14}CPU µs per message: {side['cpu_us_per_msg']}")
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"proxy-{datetime.datetime.now():%Y-%m-%d-%H%M}.json")
    with open(path, "w") as f:
        json.dump(res, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
