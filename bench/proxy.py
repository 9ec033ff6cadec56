"""RocketMQ 5 client through the gRPC proxy vs Quiver's own SDK, same run, same cluster.

    python -m bench.proxy [--messages 3000] [--threads 4] [--quick]

1. Produce: synchronous sends of 1 KiB bodies from `--threads` threads, Quiver's
   `Producer.send` straight to the broker vs rocketmq-python-client's `Producer.send`
   through the proxy. Target ratio (proxy / SDK) >= 0.6.
2. Receive + ack: every message of a fresh group, POP on both sides, batches of 32,
   each message acked one by one as the 5.x clients do: Quiver's `SimpleConsumer` vs the
   5.x `SimpleConsumer` through the proxy. Target ratio >= 0.5.
The two sides alternate (SDK, proxy, SDK, proxy) and the best of two is kept.
Writes bench/results/proxy-<date>.json. Everything runs on 127.0.0.1.
"""

import argparse
import datetime
import json
import logging
import os
import tempfile
import time

from rocketmq import ClientConfiguration, Credentials, FilterExpression
from rocketmq import Message as V5Message
from rocketmq import Producer as V5Producer
from rocketmq import SimpleConsumer as V5SimpleConsumer

from quiver import Admin, Message, Producer, SimpleConsumer
from quiver.tools.local import LocalCluster

from bench.transactions import BODY, _threads   # the same load shape as the transactions bench

TOPIC = "BenchProxy"


def _v5_msg() -> V5Message:
    m = V5Message()
    m.topic, m.body = TOPIC, BODY
    return m


def produce(namesrv: str, cfg, n: int, threads: int) -> tuple[float, float]:
    with Producer("bench-proxy", namesrv=namesrv, auto_batch=False) as p:
        p.send(Message(TOPIC, BODY))
        sdk = _threads(threads, n, lambda: p.send(Message(TOPIC, BODY)))
    v5 = V5Producer(cfg, (TOPIC,))
    v5.startup()
    try:
        v5.send(_v5_msg())
        proxied = _threads(threads, n, lambda: v5.send(_v5_msg()))
    finally:
        v5.shutdown()
    return sdk, proxied


def _drain(receive, ack, total: int) -> float:
    got, t0, idle = 0, time.monotonic(), 0
    while got < total and idle < 5:
        msgs = receive()
        idle = 0 if msgs else idle + 1
        for m in msgs:
            ack(m)
        got += len(msgs)
    return got / (time.monotonic() - t0)


def receive_ack(namesrv: str, cfg, total: int, run: int) -> tuple[float, float]:
    with SimpleConsumer(f"bench-sdk-{run}", namesrv=namesrv, consume_from="first", await_duration_s=1) as sc:
        sc.subscribe(TOPIC)
        sdk = _drain(lambda: sc.receive(32, 60), sc.ack, total)
    v5 = V5SimpleConsumer(cfg, f"bench-v5-{run}", {TOPIC: FilterExpression()}, await_duration=1)
    v5.startup()
    try:
        proxied = _drain(lambda: v5.receive(32, 60), v5.ack, total)
    finally:
        v5.shutdown()
    return sdk, proxied


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="gRPC proxy vs Quiver's SDK benchmark")
    ap.add_argument("--messages", type=int, default=3000)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--quick", action="store_true", help="small counts (smoke)")
    args = ap.parse_args(argv)
    if args.quick:
        args.messages = 600
    logging.getLogger("rocketmq-python-client").setLevel(logging.WARNING)
    c = LocalCluster(tempfile.mkdtemp(prefix="bench-proxy-"))
    try:
        c.add_core()
        Admin(namesrv=c.namesrv).create_topic(TOPIC, queues=4)
        proxy = c.add_proxy("--pop-consume-from", "first")
        c.wait()
        cfg = ClientConfiguration(proxy.url, Credentials())
        prod = [produce(c.namesrv, cfg, args.messages, args.threads) for _ in range(2)]
        total = 2 * (args.messages // args.threads * args.threads + 1)    # the SDK's and the 5.x client's
        cons = [receive_ack(c.namesrv, cfg, 2 * total, run) for run in range(2)]
    finally:
        c.stop()
    res = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "messages": args.messages,
           "threads": args.threads,
           "sdk_produce_msgs_s": round(max(p[0] for p in prod)), "proxy_produce_msgs_s": round(max(p[1] for p in prod)),
           "sdk_receive_ack_msgs_s": round(max(r[0] for r in cons)),
           "proxy_receive_ack_msgs_s": round(max(r[1] for r in cons))}
    res["produce_ratio"] = round(res["proxy_produce_msgs_s"] / res["sdk_produce_msgs_s"], 2)
    res["receive_ack_ratio"] = round(res["proxy_receive_ack_msgs_s"] / res["sdk_receive_ack_msgs_s"], 2)
    print(f"produce (sync, {args.threads} threads)   SDK {res['sdk_produce_msgs_s']:>7} msg/s   proxy "
          f"{res['proxy_produce_msgs_s']:>7} msg/s   ratio {res['produce_ratio']} (target >= 0.6)")
    print(f"receive + ack (POP, 32)   SDK {res['sdk_receive_ack_msgs_s']:>7} msg/s   proxy "
          f"{res['proxy_receive_ack_msgs_s']:>7} msg/s   ratio {res['receive_ack_ratio']} (target >= 0.5)")
    os.makedirs(os.path.join(os.path.dirname(__file__), "results"), exist_ok=True)
    path = os.path.join(os.path.dirname(__file__), "results", f"proxy-{datetime.datetime.now():%Y-%m-%d-%H%M}.json")
    with open(path, "w") as f:
        json.dump(res, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
