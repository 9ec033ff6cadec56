"""`quiver ingest --stream` progress lines from Spark's progress events, without Spark running.

The events are shaped like those a real query reported (tests/integration/test_spark_progress.py
runs one): an idle trigger reports the id of the batch it has not run yet, with 0 rows and no
"addBatch" duration, and that batch later reports under the same id.
"""

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from quiver.spark import StreamProgress  # noqa: E402

RAN = {"addBatch": 5, "getBatch": 1, "latestOffset": 1, "triggerExecution": 9, "walCommit": 1}
IDLE = {"latestOffset": 1, "triggerExecution": 1}


def _event(batch: int, rows: int, second: int, ran: bool = True, rate: float = 50.0) -> dict:
    return {"batchId": batch, "numInputRows": rows, "timestamp": f"2026-01-01T00:00:{second:02d}.000Z",
            "durationMs": dict(RAN if ran else IDLE), "processedRowsPerSecond": rate if ran else 0.0}


def test_an_idle_event_under_the_next_id_neither_prints_nor_hides_that_batch():
    p = StreamProgress()
    events = [_event(0, 300, 1)]
    assert p.lines(events) == ["batch 0: 300 rows so far (+300), 50 rows/s"]
    events.append(_event(1, 0, 12, ran=False))            # idle: batch 1 has not run
    assert p.lines(events) == [] and p.total == 300
    events.append(_event(1, 200, 15))                     # batch 1 runs, same id
    events.append(_event(2, 0, 26, ran=False))
    assert p.lines(events) == ["batch 1: 500 rows so far (+200), 50 rows/s"]
    assert p.lines(events) == [] and p.total == 500      # polled again: nothing new


def test_several_batches_between_polls_each_get_a_line_and_the_ring_may_drop_old_events():
    p = StreamProgress()
    assert p.lines([_event(0, 100, 1), _event(1, 100, 2), _event(2, 50, 3, rate=12.4)]) == [
        "batch 0: 100 rows so far (+100), 50 rows/s", "batch 1: 200 rows so far (+100), 50 rows/s",
        "batch 2: 250 rows so far (+50), 12 rows/s"]
    # Spark keeps the last N events: older ones fall out of the list, nothing counts twice
    assert p.lines([_event(2, 50, 3), _event(3, 10, 4)]) == ["batch 3: 260 rows so far (+10), 50 rows/s"]
    assert p.lines([]) == [] and p.total == 260


def test_a_batch_that_ran_with_no_rows_still_reports_and_missing_fields_read_as_zero():
    p = StreamProgress()
    event = _event(0, 0, 1)
    event["processedRowsPerSecond"] = None
    assert p.lines([event]) == ["batch 0: 0 rows so far (+0), 0 rows/s"]
