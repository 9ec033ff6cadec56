"""`python -m bench.sync_flush` runs end to end: two SYNC-flush brokers (a git revision's code and
the working tree's), interleaved rounds, and writes its figures."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
@pytest.mark.bench
def test_bench_sync_flush_smoke(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "bench.sync_flush", "--before", "HEAD", "--rounds", "2",
                           "--messages", "500", "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    [js] = list(tmp_path.glob("sync-flush-*.json"))
    doc = json.loads(js.read_text())
    assert len(doc["disk_fdatasync64k_recs_s"]) == 2 and min(doc["disk_fdatasync64k_recs_s"]) > 0
    assert len(doc["paired_after_over_before"]["rounds"]) == 2
    for name in ("before", "after"):
        v = doc[name]
        assert len(v["msgs_s"]) == 2 and min(v["msgs_s"]) > 0, name
        assert v["broker_cpu_us_per_msg"] >= 0 and v["send_latency_mean_ms"] > 0 and v["fsync_mean_ms"] > 0, v


def test_sync_flush_refuses_a_run_too_small_to_mean_anything(capsys):
    from bench import sync_flush
    with pytest.raises(SystemExit):
        sync_flush.main(["--before", "HEAD", "--rounds", "0"])
    assert "--rounds >= 1" in capsys.readouterr().err
