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
from collections.abc import Iterator
from typing import TYPE_CHECKING, cast

import pyarrow as pa  # type: ignore[import-untyped]  # no type information in pyarrow: Any here
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from quiver.errors import ClientError
from quiver.spark.columns import SCHEMA
from quiver.spark.planner import (EARLIEST, Offsets, Options, Planner, Queue, cap_offsets, flatten_offsets,
                                  offset_spec, plan_batch, put_offset, split_ranges)
from quiver.spark.reader import QuiverPartition, read_partition
from quiver.spark.sink import QuiverBatchWriter, QuiverStreamWriter
from quiver.spark.sink_rows import SinkOptions
from quiver.wire import requests as rq

try:  # PySpark >= 4.2: admission control and Trigger.AvailableNow for Python sources
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow
    HAS_READ_LIMITS = True
except ImportError:  # 4.0 / 4.1: no read limits (mypy checks against a PySpark that has them)
    ReadAllAvailable = ReadMaxRows = None  # type: ignore[misc,assignment]
    SupportsTriggerAvailableNow = object  # type: ignore[misc,assignment]
    HAS_READ_LIMITS = False
if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.datasource import ReadLimit

log = logging.getLogger(__name__)


def register(spark: "SparkSession") -> None:
    """Make `spark.read` / `spark.readStream` / `df.write` / `df.writeStream` `.format("quiver")` available
    (per session)."""
    spark.dataSource.register(QuiverDataSource)


def session(master: str = "local[*]", app_name: str = "quiver", **conf: str | int | float | bool) -> "SparkSession":
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

    def reader(self, schema: StructType) -> "QuiverBatchReader":
        return QuiverBatchReader(Options.parse(self.options))

    def streamReader(self, schema: StructType) -> "QuiverStreamReader":
        return QuiverStreamReader(Options.parse(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> QuiverBatchWriter:
        if overwrite:   # a topic's stored messages are never replaced: say so rather than append
            raise ClientError('the quiver sink appends to topics: write with .mode("append"), not "overwrite"')
        return QuiverBatchWriter(SinkOptions.parse(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> QuiverStreamWriter:
        return QuiverStreamWriter(SinkOptions.parse(self.options), schema)


class QuiverBatchReader(DataSourceReader):
    def __init__(self, opts: Options) -> None:
        self.opts = opts

    def partitions(self) -> list[QuiverPartition]:
        return [QuiverPartition(p) for p in plan_batch(self.opts)] or [QuiverPartition([])]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.opts, partition)


def _read(opts: Options, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    # Spark hands back a partition these readers planned
    return read_partition(opts, cast(QuiverPartition, partition))


class QuiverStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets per (topic, broker, queue); new queues start at their earliest offset (like Kafka)."""

    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self._planner: Planner | None = None
        self._initial: Offsets | None = None
        self._last: Offsets | None = None          # 4.0/4.1: the end of the last batch planned (rate-limit base)
        self._target: dict[Queue, int] | None = None   # Trigger.AvailableNow: latest offsets when the query started
        self._reported: Offsets | None = None

    def __getstate__(self) -> dict[str, object]:        # executors get options only, never the driver's sockets
        return {"opts": self.opts, "_planner": None, "_initial": None, "_last": None, "_target": None,
                "_reported": None}

    @property
    def planner(self) -> Planner:
        if self._planner is None:
            self._planner = Planner(self.opts)
        return self._planner

    def initialOffset(self) -> Offsets:
        if self._initial is None:
            o, p = self.opts, self.planner
            queues = p.queues()
            lows, highs = p.bounds(queues)
            starts = p.resolve(queues, offset_spec(o.starting, "latest"), o.starting_ts, lows, highs, EARLIEST)
            initial: Offsets = {}
            for q, v in starts.items():
                put_offset(initial, *q, v)
            self._initial = initial
        return self._initial

    def _latest(self) -> dict[Queue, int]:
        p = self.planner
        queues = p.queues()
        return p.ask(queues, rq.GetMaxOffset)

    def latestOffset(self, start: Offsets | None = None, limit: "ReadLimit | None" = None) -> Offsets:
        """4.2+: Spark passes (start, limit). 4.0/4.1: no arguments, the cap uses the last planned end."""
        latest = self._latest()
        reported: Offsets = {}
        for q, v in latest.items():
            put_offset(reported, *q, v)
        self._reported = reported
        if (target := self._target) is not None:
            latest = {q: min(v, target.get(q, v)) for q, v in latest.items()}
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
        out: Offsets = json.loads(json.dumps(base_json))   # queues that vanished keep their offset
        for q, v in end.items():
            put_offset(out, *q, v)
        if start is None:
            self._last = out
        return out

    def getDefaultReadLimit(self) -> "ReadLimit":
        if self.opts.max_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.opts.max_per_trigger)

    def reportLatestOffset(self) -> Offsets | None:
        return self._reported

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest()

    def partitions(self, start: Offsets, end: Offsets) -> list[QuiverPartition]:
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

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.opts, partition)

    def commit(self, end: Offsets) -> None:
        log.debug("committed %s", end)

    def stop(self) -> None:
        if self._planner is not None:
            self._planner.close()
            self._planner = None
