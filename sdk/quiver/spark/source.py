"""Spark's side of the "quiver" source: the DataSource and its batch and stream readers.

The readers glue Spark's calls to the planner (driver) and to read_partition
(executors). Rate limits: on PySpark >= 4.2 `maxOffsetsPerTrigger` is the
default read limit (ReadMaxRows) and Spark passes (start, limit) to
latestOffset; on 4.0/4.1 latestOffset() gets no arguments and the reader caps
from the last offset it planned (Spark replays the checkpointed offset through
partitions(x, x) on restart, so the cap survives restarts). Owns that glue and
the stream reader's driver state; does not own planning (planner.py) nor
reading (reader.py, columns.py).
"""

import json
import logging

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader

from quiver.errors import ClientError
from quiver.spark.columns import SCHEMA
from quiver.spark.planner import (EARLIEST, Options, Planner, cap_offsets, flatten_offsets, offset_spec, plan_batch,
                                  put_offset, split_ranges)
from quiver.spark.reader import QuiverPartition, read_partition
from quiver.spark.sink import QuiverBatchWriter, QuiverStreamWriter
from quiver.spark.sink_rows import SinkOptions
from quiver.wire import requests as rq

try:  # PySpark >= 4.2: admission control and Trigger.AvailableNow for Python sources
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow
    HAS_READ_LIMITS = True
except ImportError:  # 4.0 / 4.1
    ReadAllAvailable = ReadMaxRows = None
    SupportsTriggerAvailableNow = object
    HAS_READ_LIMITS = False

log = logging.getLogger(__name__)


def register(spark) -> None:
    """Make `spark.read` / `spark.readStream` / `df.write` / `df.writeStream` `.format("quiver")` available
    (per session)."""
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


class QuiverDataSource(DataSource):
    """spark.read / spark.readStream .format("quiver"); the options are planner.Options (README: Spark)."""

    @classmethod
    def name(cls) -> str:
        return "quiver"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema):
        return QuiverBatchReader(Options.parse(self.options))

    def streamReader(self, schema):
        return QuiverStreamReader(Options.parse(self.options))

    def writer(self, schema, overwrite):
        if overwrite:   # a topic's stored messages are never replaced: say so rather than append
            raise ClientError('the quiver sink appends to topics: write with .mode("append"), not "overwrite"')
        return QuiverBatchWriter(SinkOptions.parse(self.options), schema)

    def streamWriter(self, schema, overwrite):
        return QuiverStreamWriter(SinkOptions.parse(self.options), schema)


class QuiverBatchReader(DataSourceReader):
    def __init__(self, opts: Options):
        self.opts = opts

    def partitions(self):
        return [QuiverPartition(p) for p in plan_batch(self.opts)] or [QuiverPartition([])]

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
            starts = p.resolve(queues, offset_spec(o.starting, "latest"), o.starting_ts, lows, highs, EARLIEST)
            self._initial = {}
            for q, v in starts.items():
                put_offset(self._initial, *q, v)
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
            put_offset(self._reported, *q, v)
        if self._target is not None:
            latest = {q: min(v, self._target.get(q, v)) for q, v in latest.items()}
        if start is None:
            base_json = self._last if self._last is not None else self.initialOffset()
            cap = self.opts.max_per_trigger
        else:
            base_json = start
            cap = limit.max_rows if ReadMaxRows is not None and isinstance(limit, ReadMaxRows) else None
        base = dict(flatten_offsets(base_json))
        new = [q for q in latest if q not in base]
        if new:
            base.update(self.planner.ask(new, rq.GetMinOffset))
        end = cap_offsets(base, latest, cap)
        out = json.loads(json.dumps(base_json))   # queues that vanished keep their offset
        for q, v in end.items():
            put_offset(out, *q, v)
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
        starts, ends = dict(flatten_offsets(start)), dict(flatten_offsets(end))
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
