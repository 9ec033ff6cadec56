"""The PySpark data source "quiver": stored topics as DataFrames, batch and Structured Streaming.

    import quiver.spark
    quiver.spark.register(spark)
    df = (spark.read.format("quiver").option("namesrv", "127.0.0.1:9876").option("topic", "Orders")
          .option("startingOffsets", "earliest").load())
    df.write.format("quiver").option("namesrv", "127.0.0.1:9876").option("topic", "Copy").mode("append").save()

The driver plans (planner.py: options named like Spark's Kafka source, offset
ranges per (topic, broker, queue)); executors pull their own ranges straight
from the brokers and turn each pull answer into an Arrow batch column by
column (reader.py, columns.py): nothing funnels through the driver. source.py
is Spark's DataSource and its readers, ingest.py the `quiver ingest` job,
sink.py / sink_rows.py the writers (each task sends its rows with a pipelined
Producer; an idempotence key property per row, stable when a batch runs again).

Offsets, in options and in the checkpoint, are Kafka-source style JSON:
{"topic": {"broker": {"queueId": offset}}}, -2 = earliest, -1 = latest.
Import this package only where Spark is installed (`pip install quiver[spark]`);
the rest of the SDK never imports it.
"""

from quiver.client.range_reader import DataLossError
from quiver.spark.columns import ARROW_SCHEMA, SCHEMA, record_columns, to_arrow
from quiver.spark.ingest import StreamProgress, run_ingest
from quiver.spark.planner import Options, Planner, cap_offsets, plan_batch, split_ranges
from quiver.spark.reader import QuiverPartition, read_partition
from quiver.spark.sink import QuiverBatchWriter, QuiverStreamWriter
from quiver.spark.sink_rows import SinkOptions
from quiver.spark.source import (HAS_READ_LIMITS, QuiverBatchReader, QuiverDataSource, QuiverStreamReader, register,
                                 session)

__all__ = ["QuiverDataSource", "register", "session", "DataLossError", "HAS_READ_LIMITS", "run_ingest",
           "StreamProgress", "Options", "Planner", "QuiverBatchReader", "QuiverStreamReader", "QuiverPartition",
           "read_partition", "plan_batch", "split_ranges", "cap_offsets", "record_columns", "to_arrow", "SCHEMA",
           "ARROW_SCHEMA", "QuiverBatchWriter", "QuiverStreamWriter", "SinkOptions"]
