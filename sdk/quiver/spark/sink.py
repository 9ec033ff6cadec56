"""Spark's side of the "quiver" sink: df.write.format("quiver") and writeStream.format("quiver").

The writer is made on the driver (schema checked there), pickled to the
executors, and each task writes its partition with a Producer of its own
(sink_rows.send_all), returning its counts as the commit message only after
every send was acknowledged. Spark records a streaming batch as done (its
commit log) only after every task committed, so a query stopped or killed
before that runs the batch again from its checkpoint: same offsets, same
partitions, same rows in the same order for a deterministic plan, hence the
same idempotence keys (`<query id>:<batch id>:<partition>:<row>`).
Owns the writer classes; not the rows -> Messages (sink_rows.py).
"""

import logging
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Optional

from pyspark import TaskContext
from pyspark.sql.datasource import WriterCommitMessage

from quiver.client.message import Message
from quiver.client.producer import Producer
from quiver.errors import ClientError
from quiver.spark.sink_rows import SinkOptions, Written, check_schema, messages, send_all

try:  # writers that take Arrow batches (else Rows, turned into columns here)
    from pyspark.sql.datasource import DataSourceArrowWriter as _BatchWriter
    BATCH_ARROW = True
except ImportError:
    from pyspark.sql.datasource import DataSourceWriter as _BatchWriter  # type: ignore[assignment]
    BATCH_ARROW = False
try:
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamWriter
    STREAM_ARROW = True
except ImportError:
    from pyspark.sql.datasource import DataSourceStreamWriter as _StreamWriter  # type: ignore[assignment]
    STREAM_ARROW = False

log = logging.getLogger(__name__)

# set by Spark on every task of a micro-batch (StreamExecution.QUERY_ID_KEY, MicroBatchExecution.BATCH_ID_KEY)
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"
ROWS_PER_CHUNK = 4096   # Rows (PySpark 4.0 streams) are turned into columns this many at a time


@dataclass
class SinkCommit(WriterCommitMessage):
    partition: int
    rows: int
    not_ok: int
    batch_id: int | None = None


Chunks = Iterator[tuple[dict[str, list[Any]], int]]   # a partition's rows: (columns, how many rows)
Commits = list[Optional[WriterCommitMessage]]


def _arrow_columns(batches: Iterable[Any]) -> Chunks:
    for batch in batches:
        yield {name: batch.column(i).to_pylist() for i, name in enumerate(batch.schema.names)}, batch.num_rows


def _row_columns(rows: Iterable[Any]) -> Chunks:
    chunk: list[dict[str, Any]] = []
    for row in rows:
        chunk.append(row.asDict())
        if len(chunk) == ROWS_PER_CHUNK:
            yield {k: [r[k] for r in chunk] for k in chunk[0]}, len(chunk)
            chunk = []
    if chunk:
        yield {k: [r[k] for r in chunk] for k in chunk[0]}, len(chunk)


def write_partition(opts: SinkOptions, chunks: Chunks, prefix: str, partition: int) -> Written:
    """Send one partition's rows (chunks of columns) through a Producer; return once all are acked."""
    def msgs() -> Iterator[Message]:
        row = 0
        for cols, n in chunks:
            yield from messages(cols, n, opts, f"{prefix}:{partition}", row)
            row += n

    with Producer("quiver-spark-sink", namesrv=opts.namesrv, credentials=opts.credentials,
                  send_timeout=opts.send_timeout_ms / 1000) as producer:
        # the producer retries and fails each send within its timeouts; this bound only catches a hang
        return send_all(producer.send_async, msgs(), opts.max_in_flight, 4 * opts.send_timeout_ms / 1000 + 30)


def _task() -> TaskContext:
    ctx = TaskContext.get()
    if ctx is None:
        raise ClientError("the quiver sink writes in Spark tasks only")
    return ctx


def _types(schema: Any) -> dict[str, str]:
    return {f.name: f.dataType.simpleString() for f in schema.fields}


class QuiverBatchWriter(_BatchWriter):
    """df.write.format("quiver"): keys `<writeId>:<partition>:<row>` (writeId: the option, or one per save())."""

    def __init__(self, opts: SinkOptions, schema: Any):
        check_schema(opts, _types(schema))
        self.opts = opts
        self.write_id = opts.write_id or uuid.uuid4().hex

    def write(self, iterator: Iterator[Any]) -> SinkCommit:
        partition = _task().partitionId()
        chunks = _arrow_columns(iterator) if BATCH_ARROW else _row_columns(iterator)
        done = write_partition(self.opts, chunks, self.write_id, partition)
        return SinkCommit(partition, done.rows, done.not_ok)

    def commit(self, messages: Commits) -> None:
        _log_commit("write " + self.write_id, messages)

    def abort(self, messages: Commits) -> None:
        log.warning("quiver sink: write %s failed; partitions sent before the failure stay sent", self.write_id)


class QuiverStreamWriter(_StreamWriter):
    """writeStream.format("quiver"): keys `<query id>:<batch id>:<partition>:<row>`."""

    def __init__(self, opts: SinkOptions, schema: Any):
        check_schema(opts, _types(schema))
        self.opts = opts

    def write(self, iterator: Iterator[Any]) -> SinkCommit:
        ctx = _task()
        query, batch = ctx.getLocalProperty(QUERY_ID_PROPERTY), ctx.getLocalProperty(BATCH_ID_PROPERTY)
        if not query or batch is None:   # keys would not be stable across a restart: refuse
            raise ClientError("the quiver stream sink found no streaming query / batch id on its task")
        chunks = _arrow_columns(iterator) if STREAM_ARROW else _row_columns(iterator)
        done = write_partition(self.opts, chunks, f"{query}:{batch}", ctx.partitionId())
        return SinkCommit(ctx.partitionId(), done.rows, done.not_ok, int(batch))

    def commit(self, messages: Commits, batchId: int) -> None:
        _log_commit(f"batch {batchId}", messages)

    def abort(self, messages: Commits, batchId: int) -> None:
        log.warning("quiver sink: batch %s failed; it runs again (same keys) when the query restarts", batchId)


def _log_commit(what: str, messages: Commits) -> None:
    done = [m for m in messages if isinstance(m, SinkCommit)]
    not_ok = sum(m.not_ok for m in done)
    log.info("quiver sink: %s: %d rows from %d partitions acknowledged", what, sum(m.rows for m in done), len(done))
    if not_ok:
        log.warning("quiver sink: %s: %d messages stored without SEND_OK (flush or slave not confirmed)", what,
                    not_ok)
