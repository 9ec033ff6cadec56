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
from dataclasses import dataclass

from pyspark import TaskContext
from pyspark.sql.datasource import WriterCommitMessage

from quiver.client.producer import Producer
from quiver.errors import ClientError
from quiver.spark.sink_rows import SinkOptions, Written, check_schema, messages, send_all

try:  # writers that take Arrow batches (else Rows, turned into columns here)
    from pyspark.sql.datasource import DataSourceArrowWriter as _BatchWriter
    BATCH_ARROW = True
except ImportError:
    from pyspark.sql.datasource import DataSourceWriter as _BatchWriter
    BATCH_ARROW = False
try:
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamWriter
    STREAM_ARROW = True
except ImportError:
    from pyspark.sql.datasource import DataSourceStreamWriter as _StreamWriter
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


def _arrow_columns(batches):
    for batch in batches:
        yield {name: batch.column(i).to_pylist() for i, name in enumerate(batch.schema.names)}, batch.num_rows


def _row_columns(rows):
    chunk: list = []
    for row in rows:
        chunk.append(row.asDict())
        if len(chunk) == ROWS_PER_CHUNK:
            yield {k: [r[k] for r in chunk] for k in chunk[0]}, len(chunk)
            chunk = []
    if chunk:
        yield {k: [r[k] for r in chunk] for k in chunk[0]}, len(chunk)


def write_partition(opts: SinkOptions, chunks, prefix: str, partition: int) -> Written:
    """Send one partition's rows (chunks of columns) through a Producer; return once all are acked."""
    def msgs():
        row = 0
        for cols, n in chunks:
            yield from messages(cols, n, opts, f"{prefix}:{partition}", row)
            row += n

    with Producer("quiver-spark-sink", namesrv=opts.namesrv, credentials=opts.credentials,
                  send_timeout=opts.send_timeout_ms / 1000) as producer:
        # the producer retries and fails each send within its timeouts; this bound only catches a hang
        return send_all(producer.send_async, msgs(), opts.max_in_flight, 4 * opts.send_timeout_ms / 1000 + 30)


def _types(schema) -> dict[str, str]:
    return {f.name: f.dataType.simpleString() for f in schema.fields}


class QuiverBatchWriter(_BatchWriter):
    """df.write.format("quiver"): keys `<writeId>:<partition>:<row>` (writeId: the option, or one per save())."""

    def __init__(self, opts: SinkOptions, schema):
        check_schema(opts, _types(schema))
        self.opts = opts
        self.write_id = opts.write_id or uuid.uuid4().hex

    def write(self, iterator):
        partition = TaskContext.get().partitionId()
        chunks = _arrow_columns(iterator) if BATCH_ARROW else _row_columns(iterator)
        done = write_partition(self.opts, chunks, self.write_id, partition)
        return SinkCommit(partition, done.rows, done.not_ok)

    def commit(self, messages) -> None:
        _log_commit("write " + self.write_id, messages)

    def abort(self, messages) -> None:
        log.warning("quiver sink: write %s failed; partitions sent before the failure stay sent", self.write_id)


class QuiverStreamWriter(_StreamWriter):
    """writeStream.format("quiver"): keys `<query id>:<batch id>:<partition>:<row>`."""

    def __init__(self, opts: SinkOptions, schema):
        check_schema(opts, _types(schema))
        self.opts = opts

    def write(self, iterator):
        ctx = TaskContext.get()
        query, batch = ctx.getLocalProperty(QUERY_ID_PROPERTY), ctx.getLocalProperty(BATCH_ID_PROPERTY)
        if not query or batch is None:   # keys would not be stable across a restart: refuse
            raise ClientError("the quiver stream sink found no streaming query / batch id on its task")
        chunks = _arrow_columns(iterator) if STREAM_ARROW else _row_columns(iterator)
        done = write_partition(self.opts, chunks, f"{query}:{batch}", ctx.partitionId())
        return SinkCommit(ctx.partitionId(), done.rows, done.not_ok, int(batch))

    def commit(self, messages, batchId) -> None:
        _log_commit(f"batch {batchId}", messages)

    def abort(self, messages, batchId) -> None:
        log.warning("quiver sink: batch %s failed; it runs again (same keys) when the query restarts", batchId)


def _log_commit(what: str, messages) -> None:
    done = [m for m in messages if m is not None]
    not_ok = sum(m.not_ok for m in done)
    log.info("quiver sink: %s: %d rows from %d partitions acknowledged", what, sum(m.rows for m in done), len(done))
    if not_ok:
        log.warning("quiver sink: %s: %d messages stored without SEND_OK (flush or slave not confirmed)", what,
                    not_ok)
