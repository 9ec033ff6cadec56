"""The Spark sink vs the SDK's pipelined producer, same cluster, same run.

    python -m bench.spark_sink [--messages 200000] [--body-bytes 1024] [--master local[2]]
                               [--partitions 2] [--repeat 3] [--quick]

One topic over 2 brokers x 4 queues. `--repeat` times, alternating: (a) a
Producer sending N messages with send_async (auto-batched, pipelined; at most
10,000 unanswered, the sink's default) and waiting for every ack, each message
with one property like the sink's idempotence key; (b) `df.write.format("quiver")`
of N rows of the same sizes, made and cached by Spark before the clock starts
(rows leave the JVM as Arrow batches, become Messages in the Python workers
and are sent by one Producer per task). Each run's messages are counted on the
brokers (queue max offsets) before its rate is taken. Reports the medians in
messages/s, the ratio (b)/(a), the load average, and writes the figures to
bench/results/spark-sink-<date>.json.
"""

import argparse
import datetime
import json
import os
import pathlib
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

from quiver import Admin, Message, Producer
from quiver.client.base import MessageQueue
from quiver.spark.sink_rows import send_all
from quiver.tools.local import LocalCluster

TOPIC = "BenchSink"


def stored(admin: Admin, route_queues: list[MessageQueue]) -> int:
    return sum(admin.max_offset(mq) for mq in route_queues)


def sdk_produce(namesrv: str, n: int, body: bytes) -> float:
    """The SDK alone: send_async of n messages (one property each), every ack awaited."""
    msgs = (Message(TOPIC, body, properties={"idempotence_key": f"bench:0:0:{i}"}) for i in range(n))
    with Producer("bench-sink-pg", namesrv=namesrv) as p:
        t0 = time.perf_counter()
        send_all(p.send_async, msgs, 10_000, 60)
        return n / (time.perf_counter() - t0)


def spark_sink(spark, namesrv: str, n: int, body_bytes: int, partitions: int) -> float:
    df = spark.range(0, n, 1, partitions).selectExpr(f"cast(repeat('x', {body_bytes}) as binary) body").cache()
    df.count()   # made and cached, not timed
    t0 = time.perf_counter()
    df.write.format("quiver").option("namesrv", namesrv).option("topic", TOPIC).mode("append").save()
    rate = n / (time.perf_counter() - t0)
    df.unpersist()
    return rate


def counted(admin: Admin, queues: list[MessageQueue], before: int, n: int, run: Callable[[], float]) -> float:
    rate = run()
    got = stored(admin, queues) - before
    if got != n:
        raise SystemExit(f"{n} sent, {got} stored")
    return rate


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--body-bytes", type=int, default=1024)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--partitions", type=int, default=2, help="Spark tasks writing at once (one Producer each)")
    ap.add_argument("--repeat", type=int, default=3, help="alternating runs of each measure (medians reported)")
    ap.add_argument("--quick", action="store_true", help="20k messages, one run (a smoke run)")
    args = ap.parse_args(argv)
    n = 20_000 if args.quick else args.messages
    repeat = 1 if args.quick else max(1, args.repeat)
    body = b"x" * args.body_bytes
    tmp = tempfile.mkdtemp(prefix="quiver-bench-sink-")
    cluster = LocalCluster(os.path.join(tmp, "cluster"))
    load_before = os.getloadavg()[0]
    runs: dict[str, list[float]] = {"sdk": [], "sink": []}
    spark = None
    try:
        cluster.add_namesrv()
        cluster.wait()
        cluster.add_broker()
        cluster.add_broker()
        cluster.wait()
        cluster.wait_registered(2)
        admin = Admin(namesrv=cluster.namesrv)
        admin.create_topic(TOPIC, queues=4)
        queues = admin.queues(TOPIC)
        import quiver.spark as qs
        spark = qs.session(args.master, "quiver-bench-sink", **{"spark.ui.enabled": "false",
                                                                "spark.ui.showConsoleProgress": "false"})
        spark.sparkContext.setLogLevel("ERROR")
        # Python workers and the producers' routes warm, not timed
        spark_sink(spark, cluster.namesrv, 1000, args.body_bytes, args.partitions)
        sdk_produce(cluster.namesrv, 1000, body)
        for i in range(repeat):
            before = stored(admin, queues)
            runs["sdk"].append(counted(admin, queues, before, n, lambda: sdk_produce(cluster.namesrv, n, body)))
            before = stored(admin, queues)
            runs["sink"].append(counted(admin, queues, before, n, lambda: spark_sink(
                spark, cluster.namesrv, n, args.body_bytes, args.partitions)))
            print(f"run {i + 1}/{repeat}: SDK {runs['sdk'][-1]:,.0f} msg/s, Spark sink {runs['sink'][-1]:,.0f} "
                  f"rows/s", flush=True)
        admin.shutdown()
    finally:
        if spark is not None:
            spark.stop()
        cluster.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in runs.items()}
    res = {"messages": n, "body_bytes": args.body_bytes, "master": args.master, "partitions": args.partitions,
           "repeat": repeat, "sdk_send_async_per_s": round(med["sdk"]), "spark_sink_per_s": round(med["sink"]),
           "ratio_sink_to_sdk": round(med["sink"] / med["sdk"], 2),
           "runs_per_s": {k: [round(x) for x in v] for k, v in runs.items()},
           "load_average_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)], "cpus": os.cpu_count()}
    lines = {"messages": f"{n} x {args.body_bytes} B, Spark {args.master}, {args.partitions} partitions, "
                         f"medians of {repeat}",
             "SDK send_async": f"{med['sdk']:>12,.0f} msg/s",
             "Spark sink": f"{med['sink']:>12,.0f} rows/s  ({res['ratio_sink_to_sdk']:.2f}x SDK)",
             "load average (1 min)": "{} before, {} after ({} cpus)".format(*res["load_average_1m"], res["cpus"])}
    for label, text in lines.items():
        print(f"{label:<26}{text}")
    out = pathlib.Path("bench/results") / f"spark-sink-{datetime.datetime.now():%Y-%m-%d-%H%M}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(res, indent=2))
    print(f"written {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
