"""Executor side of the "quiver" source: pull a partition's ranges, yield Arrow batches.

Each executor task opens its own transport and pulls its queue ranges straight
from the brokers (range_reader.read_range); every pull answer becomes one
Arrow RecordBatch column by column (columns.py), which PySpark hands to the
JVM as is. Owns the partition (plain, picklable) and that loop; does not own
planning (planner.py), the pulls themselves (range_reader.py) nor the row
shape (columns.py).
"""

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pyarrow as pa  # type: ignore[import-untyped]  # no type information in pyarrow: Any here
import pyarrow.compute as pc  # type: ignore[import-untyped]
from pyspark.sql.datasource import InputPartition

from quiver.client.message import MessageSelector
from quiver.client.queue_puller import Pulled, wanted_tags
from quiver.client.range_reader import QueueRange, RangeStats, read_range
from quiver.spark import columns
from quiver.spark.planner import Options
from quiver.wire.transport import Transport

log = logging.getLogger(__name__)


@dataclass
class QuiverPartition(InputPartition):
    ranges: list[QueueRange]

    def __init__(self, ranges: list[QueueRange]) -> None:
        super().__init__(None)
        self.ranges = ranges


# read_range's decode: (the batch or None, its row count, its last queue offset or None)
Decoded = tuple[pa.RecordBatch | None, int, int | None]


def arrow_batches(broker: str) -> Callable[[Pulled, str | MessageSelector, int, int], Decoded]:
    """read_range's `decode` for `broker`'s queues: a FOUND answer as (RecordBatch of the rows
    in [lo, end) of the selector's tags, their count, the last one's queue offset)."""
    def decode(pulled: Pulled, selector: str | MessageSelector, lo: int, end: int) -> Decoded:
        cols = columns.record_columns(pulled.body)
        qoffs = cols[2]
        if not qoffs:
            return None, 0, None
        batch = columns.to_arrow(cols, broker)
        wanted = wanted_tags(selector)
        first, last = min(qoffs), max(qoffs)
        if wanted is None and lo <= first and last < end:   # the usual answer: exactly what was asked
            return batch, len(qoffs), last
        batch = columns.select(batch, lo, end, wanted)
        if batch.num_rows == 0:
            return None, 0, None
        return batch, batch.num_rows, pc.max(batch.column("queue_offset")).as_py()
    return decode


def read_partition(opts: Options, partition: QuiverPartition) -> Iterator[pa.RecordBatch]:
    """Pull each range of the partition from its broker, yield Arrow record batches."""
    transport = Transport("quiver-spark", credentials=opts.credentials)
    try:
        for rng in partition.ranges:
            stats = RangeStats()
            yield from read_range(transport, rng, opts.pull_batch_size, opts.subscription, opts.sql,
                                  opts.fail_on_data_loss, stats=stats, decode=arrow_batches(rng.broker))
            if stats.lost:
                log.warning("%s:%s:%d: %d messages lost to retention were skipped", rng.topic, rng.broker,
                            rng.queue_id, stats.lost)
    finally:
        transport.close()
