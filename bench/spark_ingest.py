"""Spark batch ingest vs the SDK's plain pull-consume, same cluster, same run.

    python -m bench.spark_ingest [--messages 200000] [--body-bytes 1024] [--master local[2]] [--quick]

Loads N messages (1 KiB bodies) into one topic over 2 brokers x 4 queues, then
times (a) a PullConsumer draining the topic from the first offset and (b)
`spark.read.format("quiver")` of the same topic written to Parquet (rows
through Python workers, Arrow, the JVM and the Parquet writer). Reports rows/s
of both and their ratio (target >= 0.5), writes bench/results/spark-<date>.json.
The issue asks for 1M messages; the default here is 200k so one run fits a
shared 2-core machine (pass --messages 1000000 on a real one).
"""

import argparse
import datetime
import json
import os
import shutil
import sys
import tempfile
import time

from quiver import Admin, Message, Producer, PullConsumer
from quiver.tools.local import LocalCluster

TOPIC = "BenchSpark"


def load(namesrv: str, n: int, body: bytes) -> float:
    t0 = time.perf_counter()
    with Producer("bench-spark-pg", namesrv=namesrv) as p:
        for lo in range(0, n, 4096):
            futs = [p.send_async(Message(TOPIC, body)) for _ in range(min(4096, n - lo))]
            for f in futs:
                f.result(60)
    return n / (time.perf_counter() - t0)


def sdk_consume(namesrv: str, n: int) -> float:
    t0 = time.perf_counter()
    got = 0
    with PullConsumer("bench-spark-cg", namesrv=namesrv, consume_from="first", pull_batch_size=1024,
                      auto_commit=False, buffer_per_queue=8192) as c:
        c.subscribe(TOPIC)
        deadline = time.monotonic() + 600
        while got < n and time.monotonic() < deadline:
            got += len(c.poll(0.5))
    secs = time.perf_counter() - t0
    if got != n:
        raise SystemExit(f"SDK consumed {got} of {n}")
    return n / secs


def spark_ingest(namesrv: str, n: int, master: str, out: str) -> tuple[float, float]:
    import quiver.spark as qs
    spark = qs.session(master, "quiver-bench", **{"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2",
                                                  "spark.ui.showConsoleProgress": "false"})
    try:
        spark.sparkContext.setLogLevel("ERROR")
        spark.range(2).count()   # JVM and Python workers warm, not timed
        df = spark.read.format("quiver").option("namesrv", namesrv).option("topic", TOPIC).load()
        t0 = time.perf_counter()
        rows = df.selectExpr("count(*) c").collect()[0].c
        count_rate = rows / (time.perf_counter() - t0)
        if rows != n:
            raise SystemExit(f"Spark read {rows} of {n}")
        t0 = time.perf_counter()
        df.write.mode("overwrite").parquet(out)
        write_rate = n / (time.perf_counter() - t0)
        return count_rate, write_rate
    finally:
        spark.stop()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--body-bytes", type=int, default=1024)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--quick", action="store_true", help="20k messages (a smoke run)")
    args = ap.parse_args(argv)
    n = 20_000 if args.quick else args.messages
    tmp = tempfile.mkdtemp(prefix="quiver-bench-spark-")
    cluster = LocalCluster(os.path.join(tmp, "cluster"))
    try:
        cluster.add_namesrv()
        cluster.wait()
        cluster.add_broker()
        cluster.add_broker()
        cluster.wait()
        cluster.wait_registered(2)
        admin = Admin(namesrv=cluster.namesrv)
        admin.create_topic(TOPIC, queues=4)
        admin.shutdown()
        produce = load(cluster.namesrv, n, b"x" * args.body_bytes)
        sdk = sdk_consume(cluster.namesrv, n)
        count_rate, write_rate = spark_ingest(cluster.namesrv, n, args.master, os.path.join(tmp, "out"))
    finally:
        cluster.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    res = {"messages": n, "body_bytes": args.body_bytes, "master": args.master, "produce_per_s": round(produce),
           "sdk_pull_consume_per_s": round(sdk), "spark_read_count_per_s": round(count_rate),
           "spark_ingest_parquet_per_s": round(write_rate), "ratio_read": round(count_rate / sdk, 2),
           "ratio_ingest": round(write_rate / sdk, 2), "cpus": os.cpu_count()}
    print(f"{'messages':<28}{n} x {args.body_bytes} B, Spark {args.master}")
    print(f"{'produce (load)':<28}{produce:>12,.0f} msg/s")
    print(f"{'SDK pull-consume':<28}{sdk:>12,.0f} msg/s")
    print(f"{'Spark read (count)':<28}{count_rate:>12,.0f} rows/s  ({res['ratio_read']:.2f}x SDK)")
    print(f"{'Spark ingest -> Parquet':<28}{write_rate:>12,.0f} rows/s  ({res['ratio_ingest']:.2f}x SDK, target 0.5x)")
    os.makedirs("bench/results", exist_ok=True)
    path = f"bench/results/spark-{datetime.datetime.now():%Y-%m-%d-%H%M}.json"
    with open(path, "w") as f:
        json.dump(res, f, indent=2)
    print(f"written {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
