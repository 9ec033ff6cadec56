"""The PySpark data source "quiver": stored topics as DataFrames, batch and Structured Streaming.

    import quiver.spark
    quiver.spark.register(spark)
    df = (spark.read.format("quiver").option("namesrv", "127.0.0.1:9876").option("topic", "Orders")
          .option("startingOffsets", "earliest").load())

Owns option parsing (named like Spark's Kafka source), planning offset ranges
per (topic, broker, queue) on the driver, the stream reader's offsets and
rate limits, record -> Arrow conversion on executors, and the `quiver ingest`
job. Does not own the pull loop (range_reader.py): executors pull their own
ranges straight from the brokers; nothing funnels through the driver.

Offsets, in options and in the checkpoint, are Kafka-source style JSON:
{"topic": {"broker": {"queueId": offset}}}, -2 = earliest, -1 = latest.
Rate limits: on PySpark >= 4.2 `maxOffsetsPerTrigger` is the default read limit
(ReadMaxRows) and Spark passes (start, limit) to latestOffset; on 4.0/4.1
latestOffset() gets no arguments and the reader caps from the last offset it
planned (Spark replays the checkpointed offset through partitions(x, x) on
restart, so the cap survives restarts). Import this module only where Spark is
installed (`pip install quiver[spark]`); the rest of the SDK never imports it.
"""

import json
import logging
import math
import os
import re
import signal
import sys
import time
from dataclasses import dataclass, replace

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition

from quiver.client import filter_route
from quiver.wire import record
from quiver.wire import requests as rq
from quiver.client.admin import Admin
from quiver.wire.codes import ResponseCode
from quiver.errors import ClientError, error_for
from quiver.client.message import KEYS, TAGS, UNIQ_KEY, MessageSelector, offset_msg_id
from quiver.client.range_reader import DataLossError, QueueRange, RangeStats, read_range
from quiver.wire.transport import Transport

try:  # PySpark >= 4.2: admission control and Trigger.AvailableNow for Python sources
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow
    HAS_READ_LIMITS = True
except ImportError:  # 4.0 / 4.1
    ReadAllAvailable = ReadMaxRows = None
    SupportsTriggerAvailableNow = object
    HAS_READ_LIMITS = False

log = logging.getLogger(__name__)

__all__ = ["QuiverDataSource", "register", "DataLossError", "HAS_READ_LIMITS", "run_ingest"]

SCHEMA = ("topic string, broker string, queue_id int, queue_offset bigint, msg_id string, tags string, "
          "keys array<string>, properties map<string,string>, body binary, born_timestamp timestamp, "
          "store_timestamp timestamp")
_TS = pa.timestamp("us", tz="UTC")
ARROW_SCHEMA = pa.schema([("topic", pa.string()), ("broker", pa.string()), ("queue_id", pa.int32()),
                          ("queue_offset", pa.int64()), ("msg_id", pa.string()), ("tags", pa.string()),
                          ("keys", pa.list_(pa.string())), ("properties", pa.map_(pa.string(), pa.string())),
                          ("body", pa.binary()), ("born_timestamp", _TS), ("store_timestamp", _TS)])
ROWS_PER_BATCH = 4096
EARLIEST, LATEST = -2, -1
_SYSTEM_TOPIC = re.compile(r"^(%RETRY%|%DLQ%|RMQ_SYS_|SCHEDULE_TOPIC_XXXX|TBW102|SELF_TEST_TOPIC)")


def register(spark) -> None:
    """Make `spark.read.format("quiver")` and `spark.readStream.format("quiver")` available (per session)."""
    spark.dataSource.register(QuiverDataSource)


def session(master: str = "local[*]", app_name: str = "quiver", **conf):
    """A SparkSession whose Python workers run this interpreter (so they can import quiver), with "quiver" registered."""
    import os
    import sys

    from pyspark.sql import SparkSession
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in conf.items():
        builder = builder.config(key.replace("__", "."), value)
    spark = builder.getOrCreate()
    register(spark)
    return spark


# ---- options ------------------------------------------------------------------------------

def _bool(v, default: bool) -> bool:
    if v is None:
        return default
    s = str(v).strip().lower()
    if s not in ("true", "false"):
        raise ClientError(f"expected true or false, got {v!r}")
    return s == "true"


def _int(v, name: str):
    if v is None or v == "":
        return None
    try:
        return int(v)
    except ValueError:
        raise ClientError(f"option {name} must be an integer, got {v!r}") from None


@dataclass(frozen=True)
class Options:
    namesrv: str
    topics: tuple[str, ...] = ()
    topic_pattern: str | None = None
    starting: str | None = None
    ending: str | None = None
    starting_ts: int | None = None
    ending_ts: int | None = None
    max_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    subscription: str = "*"
    sql: str | None = None
    pull_batch_size: int = 1024
    min_partitions: int | None = None
    credentials: str | None = None   # auth on: a key file path every executor can read

    @classmethod
    def parse(cls, options) -> "Options":
        o = {str(k).lower(): v for k, v in dict(options).items()}
        topics = tuple(t.strip() for t in (o.get("topic") or o.get("subscribe") or "").split(",") if t.strip())
        pattern = o.get("topicpattern") or o.get("subscribepattern")
        if bool(topics) == bool(pattern):
            raise ClientError("give exactly one of the options 'topic' (comma list) and 'topicPattern' (regex)")
        sub = (o.get("subscription") or "*").strip()
        sql = sub[4:].strip() if sub.lower().startswith("sql:") else None
        mpt = _int(o.get("maxoffsetspertrigger"), "maxOffsetsPerTrigger")
        if mpt is not None and mpt <= 0:
            raise ClientError("maxOffsetsPerTrigger must be positive")
        return cls(namesrv=o.get("namesrv") or o.get("nameserver") or "127.0.0.1:9876", topics=topics,
                   topic_pattern=pattern, starting=o.get("startingoffsets"), ending=o.get("endingoffsets"),
                   starting_ts=_int(o.get("startingtimestamp"), "startingTimestamp"),
                   ending_ts=_int(o.get("endingtimestamp"), "endingTimestamp"), max_per_trigger=mpt,
                   fail_on_data_loss=_bool(o.get("failondataloss"), True),
                   subscription="*" if sql is not None else sub, sql=sql,
                   pull_batch_size=_int(o.get("pullbatchsize"), "pullBatchSize") or 1024,
                   min_partitions=_int(o.get("minpartitions"), "minPartitions"),
                   credentials=o.get("credentials") or os.environ.get("QUIVER_CREDENTIALS") or None)


def _offset_spec(spec: str | None, default: str) -> str | dict:
    """"earliest" / "latest" / parsed JSON {"topic": {"broker": {"queueId": offset}}}."""
    spec = (spec or default).strip()
    if spec.lower() in ("earliest", "latest"):
        return spec.lower()
    try:
        parsed = json.loads(spec)
    except ValueError:
        raise ClientError(f"offsets must be 'earliest', 'latest' or JSON like "
                          f'{{"topic": {{"broker-a": {{"0": 42}}}}}}, got {spec!r}') from None
    if not isinstance(parsed, dict) or not all(isinstance(b, dict) and all(isinstance(q, dict) for q in b.values())
                                               for b in parsed.values()):
        raise ClientError(f"offsets JSON must be {{topic: {{broker: {{queueId: offset}}}}}}, got {spec!r}")
    return parsed


# ---- planning (driver) ------------------------------------------------------------------------

def _get(offsets: dict, topic: str, broker: str, queue_id: int):
    return offsets.get(topic, {}).get(broker, {}).get(str(queue_id))


def _put(offsets: dict, topic: str, broker: str, queue_id: int, value: int) -> None:
    offsets.setdefault(topic, {}).setdefault(broker, {})[str(queue_id)] = int(value)


def _flatten(offsets: dict):
    for topic, brokers in offsets.items():
        for broker, queues in brokers.items():
            for qid, off in queues.items():
                yield (topic, broker, int(qid)), int(off)


class Planner:
    """Driver-side: which queues exist and their offsets. Holds an Admin; close() it."""

    def __init__(self, opts: Options):
        self.opts = opts
        self.admin = Admin(namesrv=opts.namesrv, credentials=opts.credentials)
        self.addrs: dict[str, str] = {}          # broker -> address
        self.filters: dict[str, tuple] = {}      # broker -> filter server addresses
        self._checked_sql: set[str] = set()

    def close(self) -> None:
        self.admin.shutdown()

    def topics(self) -> list[str]:
        if self.opts.topics:
            return list(self.opts.topics)
        rx = re.compile(self.opts.topic_pattern)
        return sorted(t for t in self.admin.topic_list() if rx.fullmatch(t) and not _SYSTEM_TOPIC.match(t))

    def queues(self) -> list[tuple[str, str, int]]:
        """Every readable (topic, broker, queue id), routes refreshed (new queues and brokers show up)."""
        out = []
        for topic in self.topics():
            route = self.admin.route(topic, refresh=True)
            for mq in route.read_queues:
                addr = route.addrs[mq.broker]
                self.addrs[mq.broker] = addr
                # any filter server of the cluster may serve this broker: its own first (filter_route tiers)
                self.filters[mq.broker] = tuple(a for tier in filter_route.candidates(route, addr) for a in tier)
                out.append((mq.topic, mq.broker, mq.queue_id))
            if self.opts.sql is not None and topic not in self._checked_sql:
                filter_route.check_subscription(self.admin, topic, MessageSelector.sql(self.opts.sql))
                self._checked_sql.add(topic)
        return out

    def ask(self, queues, kind: type[rq.Schema], **fields) -> dict:
        """One offset request per queue (`kind`: its schema), all in flight at once: {(topic, broker, qid): offset}."""
        t, timeout = self.admin.transport, self.admin.request_timeout
        futs = {q: t.call_future(self.addrs[q[1]], kind(topic=q[0], queue_id=q[2], **fields), timeout=timeout)
                for q in queues}
        out = {}
        for q, fut in futs.items():
            env = fut.result(timeout + 1)
            if env.code != ResponseCode.SUCCESS:
                raise error_for(env.code, f"{q}: {env.remark}")
            out[q] = rq.OffsetReply.decode(env.ext).offset
        return out

    def bounds(self, queues) -> tuple[dict, dict]:
        return self.ask(queues, rq.GetMinOffset), self.ask(queues, rq.GetMaxOffset)

    def resolve(self, queues, spec, ts, lows, highs, default_missing: int) -> dict:
        """Offsets per queue for a startingOffsets/endingOffsets spec or a timestamp."""
        if ts is not None:
            return self.ask(queues, rq.SearchOffsetByTimestamp, timestamp=int(ts))
        out = {}
        for q in queues:
            if spec == "earliest":
                v = EARLIEST
            elif spec == "latest":
                v = LATEST
            else:
                v = _get(spec, *q)
                v = default_missing if v is None else int(v)
            out[q] = lows[q] if v == EARLIEST else highs[q] if v == LATEST else v
        return out

    def check_loss(self, q, start: int, low: int) -> int:
        """The start to use when `start` may be below the min offset (retention)."""
        if start >= low:
            return start
        msg = (f"offsets {start}..{low - 1} of {q[0]} on {q[1]} queue {q[2]} were deleted by retention "
               f"before they were read (min offset is now {low})")
        if self.opts.fail_on_data_loss:
            raise DataLossError(msg + "; set failOnDataLoss=false to skip them")
        log.warning("%s; skipping them (failOnDataLoss=false)", msg)
        return low

    def ranges(self, starts: dict, ends: dict) -> list[QueueRange]:
        out = []
        for q, end in ends.items():
            start = starts.get(q)
            if start is None or end <= start or q[1] not in self.addrs:
                continue
            out.append(QueueRange(q[0], q[1], q[2], start, end, self.addrs[q[1]], self.filters.get(q[1], ())))
        return out


def split_ranges(ranges: list[QueueRange], min_partitions: int | None) -> list[list[QueueRange]]:
    """One partition per queue range; big ranges split so there are about min_partitions (Kafka's rule)."""
    ranges = [r for r in ranges if r.size > 0]
    total = sum(r.size for r in ranges)
    if not min_partitions or len(ranges) >= min_partitions or total == 0:
        return [[r] for r in ranges]
    out = []
    for r in ranges:
        parts = max(1, math.ceil(r.size * min_partitions / total))
        step = math.ceil(r.size / parts)
        out.extend([replace(r, start=lo, end=min(lo + step, r.end))] for lo in range(r.start, r.end, step))
    return out


def cap_offsets(base: dict, latest: dict, limit: int | None) -> dict:
    """End offsets that move at most `limit` messages past `base`, split by backlog (Kafka's rateLimit)."""
    backlog = {q: max(0, latest[q] - base.get(q, latest[q])) for q in latest}
    total = sum(backlog.values())
    if limit is None or total <= limit:
        return {q: max(latest[q], base.get(q, latest[q])) for q in latest}
    out = {q: base.get(q, latest[q]) + backlog[q] * limit // total for q in latest}
    moved = sum(out[q] - base.get(q, latest[q]) for q in latest)
    if moved == 0:  # many queues, small limit: still make progress on the biggest backlog
        big = max(backlog, key=backlog.get)
        out[big] += min(limit, backlog[big])
    return out


# ---- reading (executors) ------------------------------------------------------------------------

@dataclass
class QuiverPartition(InputPartition):
    ranges: list

    def __init__(self, ranges):
        super().__init__(None)
        self.ranges = ranges


def _arrow(recs, broker: str) -> pa.RecordBatch:
    """One pass over the records; map and list columns built from flat arrays (much cheaper than dicts)."""
    n = len(recs)
    msg_ids, tag_col, key_offsets, key_flat, prop_offsets, prop_keys, prop_values = [], [], [0], [], [0], [], []
    for r in recs:
        uniq = tag = keys = None
        for item in record.strip_prop_crc(r.props).split(record.PROP_SEP):
            if item:
                k, _, v = item.partition(record.NAME_SEP)
                prop_keys.append(k)
                prop_values.append(v)
                if k == UNIQ_KEY:
                    uniq = v
                elif k == TAGS:
                    tag = v
                elif k == KEYS:
                    keys = v
        prop_offsets.append(len(prop_keys))
        msg_ids.append(uniq or offset_msg_id(r.store_host, r.phys_offset))
        tag_col.append(tag)
        if keys:
            key_flat.extend(keys.split(" "))
        key_offsets.append(len(key_flat))
    cols = [
        pa.array([r.topic for r in recs], pa.string()),
        pa.array([broker] * n, pa.string()),
        pa.array([r.queue_id for r in recs], pa.int32()),
        pa.array([r.queue_offset for r in recs], pa.int64()),
        pa.array(msg_ids, pa.string()),
        pa.array(tag_col, pa.string()),
        pa.ListArray.from_arrays(pa.array(key_offsets, pa.int32()), pa.array(key_flat, pa.string())),
        pa.MapArray.from_arrays(pa.array(prop_offsets, pa.int32()), pa.array(prop_keys, pa.string()),
                                pa.array(prop_values, pa.string())),
        pa.array([r.body for r in recs], pa.binary()),
        pa.array([r.born_ts * 1000 for r in recs], _TS),
        pa.array([r.store_ts * 1000 for r in recs], _TS),
    ]
    return pa.RecordBatch.from_arrays(cols, schema=ARROW_SCHEMA)


def read_partition(opts: Options, partition: QuiverPartition):
    """Executor side: pull each range from its broker, yield Arrow record batches."""
    transport = Transport("quiver-spark", credentials=opts.credentials)
    try:
        for rng in partition.ranges:
            stats = RangeStats()
            buf = []
            for recs in read_range(transport, rng, opts.pull_batch_size, opts.subscription, opts.sql,
                                   opts.fail_on_data_loss, stats=stats):
                buf.extend(recs)
                if len(buf) >= ROWS_PER_BATCH:
                    yield _arrow(buf, rng.broker)
                    buf = []
            if buf:
                yield _arrow(buf, rng.broker)
            if stats.lost:
                log.warning("%s:%s:%d: %d messages lost to retention were skipped", rng.topic, rng.broker,
                            rng.queue_id, stats.lost)
    finally:
        transport.close()


# ---- the data source ----------------------------------------------------------------------------

class QuiverDataSource(DataSource):
    """spark.read / spark.readStream .format("quiver"); options are documented in the module docstring."""

    @classmethod
    def name(cls) -> str:
        return "quiver"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema):
        return QuiverBatchReader(Options.parse(self.options))

    def streamReader(self, schema):
        return QuiverStreamReader(Options.parse(self.options))


class QuiverBatchReader(DataSourceReader):
    def __init__(self, opts: Options):
        self.opts = opts

    def partitions(self):
        o = self.opts
        planner = Planner(o)
        try:
            queues = planner.queues()
            lows, highs = planner.bounds(queues)
            start_spec = _offset_spec(o.starting, "earliest")
            end_spec = _offset_spec(o.ending, "latest")
            if end_spec == "earliest":
                raise ClientError("endingOffsets cannot be 'earliest' in a batch query")
            starts = planner.resolve(queues, start_spec, o.starting_ts, lows, highs, EARLIEST)
            ends = planner.resolve(queues, end_spec, o.ending_ts, lows, highs, LATEST)
            for q in queues:
                if ends[q] > highs[q]:
                    log.warning("endingOffsets %d of %s is past its max offset %d: reading to the max",
                                ends[q], q, highs[q])
                    ends[q] = highs[q]
                if starts[q] < ends[q]:
                    starts[q] = planner.check_loss(q, starts[q], lows[q])
            parts = split_ranges(planner.ranges(starts, ends), o.min_partitions)
        finally:
            planner.close()
        return [QuiverPartition(p) for p in parts] or [QuiverPartition([])]

    def read(self, partition):
        return read_partition(self.opts, partition)


class QuiverStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets per (topic, broker, queue); new queues start at their earliest offset (like Kafka)."""

    def __init__(self, opts: Options):
        self.opts = opts
        self._planner = None
        self._initial = None
        self._last = None          # 4.0/4.1: the end of the last batch planned (rate-limit base)
        self._target = None        # Trigger.AvailableNow: latest offsets when the query started
        self._reported = None

    def __getstate__(self):        # executors get options only, never the driver's sockets
        return {"opts": self.opts, "_planner": None, "_initial": None, "_last": None, "_target": None,
                "_reported": None}

    @property
    def planner(self) -> Planner:
        if self._planner is None:
            self._planner = Planner(self.opts)
        return self._planner

    def initialOffset(self) -> dict:
        if self._initial is None:
            o, p = self.opts, self.planner
            queues = p.queues()
            lows, highs = p.bounds(queues)
            starts = p.resolve(queues, _offset_spec(o.starting, "latest"), o.starting_ts, lows, highs, EARLIEST)
            self._initial = {}
            for q, v in starts.items():
                _put(self._initial, *q, v)
        return self._initial

    def _latest(self) -> dict:
        p = self.planner
        queues = p.queues()
        return p.ask(queues, rq.GetMaxOffset)

    def latestOffset(self, start=None, limit=None) -> dict:
        """4.2+: Spark passes (start, limit). 4.0/4.1: no arguments, the cap uses the last planned end."""
        latest = self._latest()
        self._reported = {}
        for q, v in latest.items():
            _put(self._reported, *q, v)
        if self._target is not None:
            latest = {q: min(v, self._target.get(q, v)) for q, v in latest.items()}
        if start is None:
            base_json = self._last if self._last is not None else self.initialOffset()
            cap = self.opts.max_per_trigger
        else:
            base_json = start
            cap = limit.max_rows if ReadMaxRows is not None and isinstance(limit, ReadMaxRows) else None
        base = dict(_flatten(base_json))
        new = [q for q in latest if q not in base]
        if new:
            base.update(self.planner.ask(new, rq.GetMinOffset))
        end = cap_offsets(base, latest, cap)
        out = json.loads(json.dumps(base_json))   # queues that vanished keep their offset
        for q, v in end.items():
            _put(out, *q, v)
        if start is None:
            self._last = out
        return out

    def getDefaultReadLimit(self):
        if self.opts.max_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.opts.max_per_trigger)

    def reportLatestOffset(self):
        return self._reported

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest()

    def partitions(self, start: dict, end: dict):
        self._last = end
        if start == end:
            return []
        p = self.planner
        starts, ends = dict(_flatten(start)), dict(_flatten(end))
        if not p.addrs:
            p.queues()
        live = [q for q in ends if q[1] in p.addrs]
        lows = p.ask(live, rq.GetMinOffset)
        for q in live:
            s = starts.get(q, lows[q])
            starts[q] = p.check_loss(q, s, lows[q]) if s < ends[q] else s
        return [QuiverPartition(r) for r in split_ranges(p.ranges(starts, ends), self.opts.min_partitions)]

    def read(self, partition):
        return read_partition(self.opts, partition)

    def commit(self, end: dict) -> None:
        log.debug("committed %s", end)

    def stop(self) -> None:
        if self._planner is not None:
            self._planner.close()
            self._planner = None


# ---- `quiver ingest` ------------------------------------------------------------------------------

def _progress_bar(done: int, total: int, width: int = 30) -> str:
    filled = width * done // total if total else width
    return f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total}"


def _watch_tasks(spark, stop, meter=None) -> None:
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

    def __init__(self):
        self.total, self._last = 0, ("", -1)

    def lines(self, events) -> list[str]:
        out = []
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


def run_ingest(args, meter=None) -> int:
    """`quiver ingest`: topics -> Parquet/Delta partitioned by topic and store date, batch or streaming.

    `meter` (quiver.tools.cli_ingest.RowMeter, on a terminal) is told of tasks and rows as they go;
    the plain progress lines are printed either way, but for the tasks lines it replaces."""
    import threading

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
                query.awaitTermination(0.5)
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
