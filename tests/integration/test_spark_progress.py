"""`quiver ingest --stream` reports the rows it really ingested, as a user runs it.

A real local Spark in its own process (the CLI), a real broker. Idle triggers make
Spark report progress under the id of the batch it has not run yet (0 rows); the
lines must neither print those nor lose the batch that later runs under that id.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

pytest.importorskip("pyspark")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("no Java for local Spark", allow_module_level=True)

from quiver import Admin, Message, Producer  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.spark]

LINE = re.compile(r"batch (\d+): (\d+) rows so far \(\+(\d+)\)")


def _send(namesrv: str, topic: str, start: int, count: int) -> None:
    with Producer("spark-progress-pg", namesrv=namesrv) as p:
        for f in [p.send_async(Message(topic, f"row-{i}".encode())) for i in range(start, start + count)]:
            f.result(30)


class _Lines:
    """The process's stdout, read on a thread; `wait_for(pred)` with a deadline."""

    def __init__(self, proc):
        self.lines: list[str] = []
        self._cv = threading.Condition()
        threading.Thread(target=self._read, args=(proc.stdout,), daemon=True).start()

    def _read(self, out) -> None:
        for line in out:
            with self._cv:
                self.lines.append(line.rstrip("\n"))
                self._cv.notify_all()
        with self._cv:
            self.lines.append(None)   # EOF
            self._cv.notify_all()

    def wait_for(self, pred, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        with self._cv:
            while True:
                hit = next((l for l in self.lines if l is not None and pred(l)), None)
                if hit is not None:
                    return hit
                left = deadline - time.monotonic()
                assert left > 0 and None not in self.lines, f"not seen; output so far: {self.lines[-20:]}"
                self._cv.wait(left)


def test_stream_ingest_progress_lines_count_every_batch(make_cluster, tmp_path):
    cluster = make_cluster()
    topic = "SparkProgress"
    with Admin(namesrv=cluster.namesrv) as admin:
        admin.create_topic(topic, queues=2)
    _send(cluster.namesrv, topic, 0, 200)
    # idle progress events every trigger (Spark's default is one per 10 s of idling)
    env = {**os.environ, "PYSPARK_SUBMIT_ARGS":
           "--conf spark.sql.streaming.noDataProgressEventInterval=100 --conf spark.ui.enabled=false pyspark-shell"}
    proc = subprocess.Popen([sys.executable, "-m", "quiver.tools.cli", "--namesrv", cluster.namesrv, "ingest",
                             "--topic", topic, "--to", str(tmp_path / "lake"), "--master", "local[1]", "--stream",
                             "--trigger-seconds", "0.5"],
                            stdout=subprocess.PIPE, stderr=open(tmp_path / "ingest.err", "w"), text=True,
                            env=env, start_new_session=True)
    try:
        out = _Lines(proc)
        out.wait_for(lambda l: l.startswith("batch 0: 200 rows so far (+200)"), timeout=120)
        time.sleep(2.0)   # several idle triggers: each reports batch 1 before batch 1 has run
        _send(cluster.namesrv, topic, 200, 100)
        out.wait_for(lambda l: "300 rows so far" in l, timeout=60)
        proc.send_signal(signal.SIGINT)   # Ctrl-C: the query stops, a summary line follows
        assert proc.wait(60) == 0, (tmp_path / "ingest.err").read_text()[-3000:]
        out.wait_for(lambda l: l.startswith("stopped:"), timeout=10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)   # the CLI and its JVM: the group we started
            proc.wait(10)
    batches = [tuple(map(int, m.groups())) for m in map(LINE.match, [l for l in out.lines if l]) if m]
    assert [b[0] for b in batches] == list(range(len(batches))), out.lines   # every batch once, in order
    assert all(rows > 0 for _, _, rows in batches), out.lines                 # no "0 rows" idle lines
    assert batches[-1][1] == 300 and sum(rows for _, _, rows in batches) == 300, out.lines
    assert "stopped: 300 rows ingested" in out.lines
