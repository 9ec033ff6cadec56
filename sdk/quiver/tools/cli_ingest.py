"""`quiver ingest`: topics into a lake with Spark (quiver.spark runs the job), and its progress.

On a terminal a rich progress bar shows rows, rows/s and the ETA against the rows the topics
held when the job started (from the queues' min and max offsets); piped, the plain lines of
quiver.spark are all there is (scripts and tests read them)."""

import os

import click

from quiver.tools.cli_common import EXIT_USAGE, console, finish


class RowMeter:
    """Rows ingested so far against `expected` (None: unknown, no ETA); rich draws it."""

    def __init__(self, expected: int | None):
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn,
                                   TimeElapsedColumn, TimeRemainingColumn)

        class RowsPerSecond(ProgressColumn):
            def render(self, task):
                from rich.text import Text
                return Text(f"{task.speed or 0:,.0f} rows/s")

        self.expected = expected
        self.progress = Progress(TextColumn("ingest"), BarColumn(), MofNCompleteColumn(), TextColumn("rows"),
                                 RowsPerSecond(), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                                 console=console(stderr=True))
        self.task = self.progress.add_task("ingest", total=expected)

    def __enter__(self):
        self.progress.start()
        return self

    def __exit__(self, *exc):
        self.progress.stop()

    def tasks(self, done: int, total: int) -> None:
        """Batch: Spark tells tasks, not rows; rows are estimated as the done share of expected."""
        if self.expected and total:
            self.progress.update(self.task, completed=self.expected * done // total)

    def rows(self, total: int) -> None:
        if self.expected is not None and total > self.expected:   # a stream outgrows the start's backlog
            self.expected = total
            self.progress.update(self.task, total=total)
        self.progress.update(self.task, completed=total)


def expected_rows(obj, topics: str, starting_offsets: str) -> int | None:
    """The rows the topics hold now when reading from the earliest offset (None otherwise or on error)."""
    if starting_offsets != "earliest":
        return None
    from quiver.errors import QuiverError
    try:
        with obj.admin() as a:
            return sum(a.max_offset(mq) - a.min_offset(mq) for t in topics.split(",") if t for mq in a.queues(t))
    except QuiverError:
        return None


@click.command()
@click.option("--topic", required=True, help="topic, or comma list")
@click.option("--to", "to", required=True, help="output path (any Hadoop URI)")
@click.option("--format", "fmt", type=click.Choice(["parquet", "delta"]), default="parquet", show_default=True)
@click.option("--stream", is_flag=True, help="keep running (Structured Streaming) instead of one batch")
@click.option("--available-now", is_flag=True, help="with --stream: read what is there, then stop")
@click.option("--checkpoint", help="streaming checkpoint (default: <to>/_checkpoint)")
@click.option("--master", default=lambda: os.environ.get("QUIVER_SPARK_MASTER", "local[*]"),
              show_default="local[*] or QUIVER_SPARK_MASTER")
@click.option("--starting-offsets", default="earliest", show_default=True)
@click.option("--max-offsets-per-trigger", type=click.IntRange(1))
@click.option("--subscription", default="*", show_default=True, help="tag expression or sql:<SQL92>")
@click.option("--mode", type=click.Choice(["append", "overwrite"]), default="overwrite", show_default=True,
              help="batch save mode")
@click.option("--trigger-seconds", type=float, default=5.0, show_default=True)
@click.pass_obj
def ingest(obj, topic, to, fmt, stream, available_now, checkpoint, master, starting_offsets,
           max_offsets_per_trigger, subscription, mode, trigger_seconds):
    """Copy topics to Parquet or Delta with Spark, partitioned by topic and store date (batch, or
    --stream). Needs `pip install 'quiver[spark]'` and Java; shows rows, rows/s and ETA.

    \b
    Examples:
      quiver ingest --topic Orders --to /data/lake/orders
      quiver ingest --topic Orders,Payments --to s3a://lake/q --stream --trigger-seconds 10
      quiver ingest --topic Orders --to /data/lake/orders --format delta --stream --available-now
    """
    import argparse
    try:
        from quiver.spark import run_ingest
    except ImportError as exc:
        finish(EXIT_USAGE, f"error: quiver ingest needs PySpark (pip install 'quiver[spark]'): {exc}")
    args = argparse.Namespace(namesrv=obj.namesrv, topic=topic, to=to, format=fmt, stream=stream,
                              available_now=available_now, checkpoint=checkpoint, master=master,
                              starting_offsets=starting_offsets, max_offsets_per_trigger=max_offsets_per_trigger,
                              subscription=subscription, mode=mode, trigger_seconds=trigger_seconds)
    if not console(stderr=True).is_terminal:
        code = run_ingest(args)
    else:
        with RowMeter(expected_rows(obj, topic, starting_offsets)) as meter:
            code = run_ingest(args, meter)
    if code:
        finish(code)
