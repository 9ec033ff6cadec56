"""`quiver ingest`: topics into Parquet or Delta with Spark, batch or streaming, and its progress.

Owns the job (a session, the "quiver" read, the partitioned write or stream)
and its progress lines; the CLI (quiver.tools.cli_ingest) parses arguments and
calls run_ingest. Does not own the source (source.py).
"""

import argparse
import signal
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from quiver.spark.source import session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class Meter(Protocol):
    """What run_ingest tells of its progress (quiver.tools.cli_ingest.RowMeter on a terminal)."""

    def tasks(self, done: int, total: int) -> None: ...

    def rows(self, total: int) -> None: ...


def _progress_bar(done: int, total: int, width: int = 30) -> str:
    filled = width * done // total if total else width
    return f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total}"


def _watch_tasks(spark: "SparkSession", stop: threading.Event, meter: Meter | None = None) -> None:
    """Progress of the running stages (tasks done / tasks) until `stop` is set: plain-text lines,
    or told to `meter.tasks(done, total)` (the CLI's progress bar on a terminal)."""
    tracker = spark.sparkContext.statusTracker()
    last = ""
    while not stop.wait(1.0):
        done = total = 0
        for sid in tracker.getActiveStageIds():
            info = tracker.getStageInfo(sid)
            if info:
                done, total = done + info.numCompletedTasks, total + info.numTasks
        line = f"tasks {_progress_bar(done, total)}" if total else ""
        if line and line != last:
            if meter is not None:
                meter.tasks(done, total)
            else:
                print(line, flush=True)
            last = line


class StreamProgress:
    """The progress lines of `quiver ingest --stream`, from a query's `recentProgress` events.

    Spark reports one event per batch it ran, and while idle one every ~10 s carrying the id
    of the batch it has NOT run yet, with 0 rows; when that batch runs it reports under the same
    id. So an event is new by (timestamp, batchId), not by id, and only a batch that ran
    ("addBatch" in durationMs) makes a line; every event's rows count once in `total`."""

    def __init__(self) -> None:
        self.total, self._last = 0, ("", -1)

    # an event is Spark's progress JSON as a dict (StreamingQueryProgress): values of mixed types
    def lines(self, events: Iterable[Mapping[str, Any]]) -> list[str]:
        out: list[str] = []
        for e in events:
            key = (e["timestamp"], e["batchId"])
            if key <= self._last:   # seen at an earlier poll (ISO-8601 UTC timestamps sort as text)
                continue
            self._last = key
            rows = e["numInputRows"] or 0
            self.total += rows
            if "addBatch" in (e.get("durationMs") or {}):
                rate = e.get("processedRowsPerSecond") or 0
                out.append(f"batch {e['batchId']}: {self.total} rows so far (+{rows}), {rate:.0f} rows/s")
        return out


def run_ingest(args: argparse.Namespace, meter: Meter | None = None) -> int:
    """`quiver ingest`: topics -> Parquet/Delta partitioned by topic and store date, batch or streaming.

    `meter` (quiver.tools.cli_ingest.RowMeter, on a terminal) is told of tasks and rows as they go;
    the plain progress lines are printed either way, but for the tasks lines it replaces."""
    from pyspark.sql import functions as F

    conf = {"spark.sql.shuffle.partitions": "8", "spark.ui.showConsoleProgress": "false"}
    if args.format == "delta":
        conf.update({"spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
                     "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog"})
    spark = session(args.master, f"quiver-ingest-{args.topic}", **conf)
    try:
        reader = spark.readStream if args.stream else spark.read
        reader = (reader.format("quiver").option("namesrv", args.namesrv).option("topic", args.topic)
                  .option("startingOffsets", args.starting_offsets).option("subscription", args.subscription))
        if args.stream and args.max_offsets_per_trigger:
            reader = reader.option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
        df = reader.load().withColumn("dt", F.to_date("store_timestamp"))
        if not args.stream:
            stop = threading.Event()
            threading.Thread(target=_watch_tasks, args=(spark, stop, meter), daemon=True).start()
            t0 = time.monotonic()
            try:
                df.write.format(args.format).mode(args.mode).partitionBy("topic", "dt").save(args.to)
            finally:
                stop.set()
            rows = spark.read.format(args.format).load(args.to).count()
            secs = time.monotonic() - t0
            print(f"ingested {args.topic} -> {args.to} ({args.format}): {rows} rows in {secs:.1f} s", flush=True)
            return 0
        ckpt = args.checkpoint or args.to.rstrip("/") + "/_checkpoint"
        trigger = {"availableNow": True} if args.available_now else {"processingTime": f"{args.trigger_seconds} seconds"}
        query = (df.writeStream.format(args.format).option("checkpointLocation", ckpt).partitionBy("topic", "dt")
                 .trigger(**trigger).start(args.to))
        progress = StreamProgress()
        print(f"streaming {args.topic} -> {args.to} ({args.format}), checkpoint {ckpt}; Ctrl-C stops", flush=True)
        # Ctrl-C sets a flag: a KeyboardInterrupt raised inside a py4j call breaks the gateway
        stopping = threading.Event()
        previous = signal.signal(signal.SIGINT, lambda *_: stopping.set())
        try:
            while query.isActive and not stopping.is_set():
                # PySpark takes float seconds (int(timeout * 1000)) though its hint says int
                query.awaitTermination(0.5)  # type: ignore[arg-type]
                for line in progress.lines(query.recentProgress):
                    print(line, flush=True)
                if meter is not None:
                    meter.rows(progress.total)
            if stopping.is_set():
                query.stop()
        finally:
            signal.signal(signal.SIGINT, previous)
        for line in progress.lines(query.recentProgress):   # what ended the last wait (availableNow)
            print(line, flush=True)
        print(f"stopped: {progress.total} rows ingested", flush=True)
        if query.exception() is not None:
            print(f"ingest failed: {query.exception()}", file=sys.stderr)
            return 1
        return 0
    finally:
        spark.stop()
