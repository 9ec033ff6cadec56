"""Spark batch ingest vs the SDK's plain pull-consume, same cluster, same run.

    python -m bench.spark_ingest [--messages 200000] [--body-bytes 1024] [--master local[2]]
                                 [--repeat 3] [--quick]

Loads N messages (1 KiB bodies) into one topic over 2 brokers x 4 queues, then
`--repeat` times, alternating: (a) a PullConsumer draining the topic from the
first offset, (b) `spark.read.format("quiver")` of the same topic counted and
(c) written to Parquet (rows through Python workers, Arrow, the JVM and the
Parquet writer), and (d) as many rows of the same schema and sizes made by
Spark itself (no source, no Python) written to Parquet: the ceiling any
source meets in this session. All in one SparkSession. Reports the medians in
rows/s, their ratios to (a) (target: ingest >= 0.6x) and (c) / (d), the load
average, and writes every figure to bench/results/spark-<date>.json. The issue asks for 1M
messages; the default here is 200k so one run fits a shared 2-core machine
(pass --messages 1000000 on a real one).
"""

import argparse
import datetime
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

from quiver import Admin, Message, Producer, PullConsumer
from quiver.tools.local import LocalCluster

TOPIC = "BenchSpark"
TARGET = 0.6   # Spark ingest to Parquet / SDK pull (issue 18)


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
                      auto_commit=False, cached_msgs_per_queue=8192) as c:
        c.subscribe(TOPIC)
        deadline = time.monotonic() + 600
        while got < n and time.monotonic() < deadline:
            got += len(c.poll(0.5))
    secs = time.perf_counter() - t0
    if got != n:
        raise SystemExit(f"SDK consumed {got} of {n}")
    return n / secs


def spark_session(master: str):
    import quiver.spark as qs
    spark = qs.session(master, "quiver-bench", **{"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2",
                                                  "spark.ui.showConsoleProgress": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    spark.range(2).count()   # JVM and Python workers warm, not timed
    return spark


def jvm_parquet(spark, n: int, body_bytes: int, out: str) -> float:
    """rows/s of n rows shaped like the source's (1 property map of 2, no keys), made by Spark, to Parquet."""
    df = spark.range(0, n, 1, 8).selectExpr(
        f"'{TOPIC}' topic", "concat('broker-', id % 2) broker", "cast(id % 4 as int) queue_id", "id queue_offset",
        "uuid() msg_id", "cast(null as string) tags", "cast(array() as array<string>) keys",
        "map('UNIQ_KEY', uuid(), 'WAIT', 'true') properties", f"cast(repeat('x', {body_bytes}) as binary) body",
        "current_timestamp() born_timestamp", "current_timestamp() store_timestamp")
    t0 = time.perf_counter()
    df.write.mode("overwrite").parquet(out)
    return n / (time.perf_counter() - t0)


def spark_ingest(spark, namesrv: str, n: int, out: str) -> tuple[float, float]:
    """(rows/s of a count, rows/s of the Parquet write) of the whole topic."""
    df = spark.read.format("quiver").option("namesrv", namesrv).option("topic", TOPIC).load()
    t0 = time.perf_counter()
    rows = df.selectExpr("count(*) c").collect()[0].c
    count_rate = rows / (time.perf_counter() - t0)
    if rows != n:
        raise SystemExit(f"Spark read {rows} of {n}")
    t0 = time.perf_counter()
    df.write.mode("overwrite").parquet(out)
    return count_rate, n / (time.perf_counter() - t0)


def run(namesrv: str, n: int, body_bytes: int, master: str, repeat: int, out: str) -> dict:
    """The four measures `repeat` times, alternating, in one SparkSession: every figure."""
    runs: dict[str, list[float]] = {"sdk": [], "count": [], "ingest": [], "jvm": []}
    spark = spark_session(master)
    try:
        # the source's Python workers (lookup, create, plan, read) started, not timed: an empty read
        spark.read.format("quiver").option("namesrv", namesrv).option("topic", TOPIC) \
            .option("startingOffsets", "latest").load().count()
        for i in range(repeat):
            runs["sdk"].append(sdk_consume(namesrv, n))
            count_rate, write_rate = spark_ingest(spark, namesrv, n, out)
            runs["count"].append(count_rate)
            runs["ingest"].append(write_rate)
            runs["jvm"].append(jvm_parquet(spark, n, body_bytes, out))
            print(f"run {i + 1}/{repeat}: SDK {runs['sdk'][-1]:,.0f}, Spark count {count_rate:,.0f}, "
                  f"ingest {write_rate:,.0f}, JVM-made rows {runs['jvm'][-1]:,.0f} rows/s", flush=True)
    finally:
        spark.stop()
    return runs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--body-bytes", type=int, default=1024)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--repeat", type=int, default=3, help="alternating runs of each measure (medians reported)")
    ap.add_argument("--quick", action="store_true", help="20k messages, one run (a smoke run)")
    args = ap.parse_args(argv)
    n = 20_000 if args.quick else args.messages
    repeat = 1 if args.quick else max(1, args.repeat)
    tmp = tempfile.mkdtemp(prefix="quiver-bench-spark-")
    cluster = LocalCluster(os.path.join(tmp, "cluster"))
    load_before = os.getloadavg()[0]
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
        runs = run(cluster.namesrv, n, args.body_bytes, args.master, repeat, os.path.join(tmp, "out"))
    finally:
        cluster.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in runs.items()}
    res = {"messages": n, "body_bytes": args.body_bytes, "master": args.master, "repeat": repeat,
           "produce_per_s": round(produce), "sdk_pull_consume_per_s": round(med["sdk"]),
           "spark_read_count_per_s": round(med["count"]), "spark_ingest_parquet_per_s": round(med["ingest"]),
           "jvm_rows_parquet_per_s": round(med["jvm"]), "ratio_read": round(med["count"] / med["sdk"], 2),
           "ratio_ingest": round(med["ingest"] / med["sdk"], 2),
           "ratio_ingest_to_jvm_rows": round(med["ingest"] / med["jvm"], 2),
           "ratio_jvm_rows_to_sdk": round(med["jvm"] / med["sdk"], 2),
           "runs_per_s": {k: [round(x) for x in v] for k, v in runs.items()},
           "load_average_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)], "cpus": os.cpu_count()}
    print(f"{'messages':<28}{n} x {args.body_bytes} B, Spark {args.master}, medians of {repeat}")
    print(f"{'produce (load)':<28}{produce:>12,.0f} msg/s")
    print(f"{'SDK pull-consume':<28}{med['sdk']:>12,.0f} msg/s")
    print(f"{'Spark read (count)':<28}{med['count']:>12,.0f} rows/s  ({res['ratio_read']:.2f}x SDK)")
    print(f"{'Spark ingest -> Parquet':<28}{med['ingest']:>12,.0f} rows/s  ({res['ratio_ingest']:.2f}x SDK, "
          f"target {TARGET}x)")
    print(f"{'JVM-made rows -> Parquet':<28}{med['jvm']:>12,.0f} rows/s  ({res['ratio_jvm_rows_to_sdk']:.2f}x SDK: "
          f"the ceiling; ingest is {res['ratio_ingest_to_jvm_rows']:.2f}x of it)")
    print(f"{'load average (1 min)':<28}{res['load_average_1m'][0]} before, {res['load_average_1m'][1]} after "
          f"({res['cpus']} cpus)")
    os.makedirs("bench/results", exist_ok=True)
    path = f"bench/results/spark-{datetime.datetime.now():%Y-%m-%d-%H%M}.json"
    with open(path, "w") as f:
        json.dump(res, f, indent=2)
    print(f"written {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
