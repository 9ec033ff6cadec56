"""`python -m bench --only quiver,floor --repeat 1 --smoke` runs end to end and writes sane outputs.

Quiver (both flush modes) and the floor (bare pyzmq): no peer server is installed or started.
"""

import json
import math
import os
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
@pytest.mark.bench
def test_bench_smoke_quiver_only(tmp_path):
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "bench", "--only", "quiver,floor", "--repeat", "1", "--smoke",
                           "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert elapsed < 90, f"smoke run took {elapsed:.0f} s"

    [js] = list(tmp_path.glob("*.json"))
    doc = json.loads(js.read_text())
    assert set(doc["results"]) == {"quiver-async", "quiver-sync", "floor"}
    for name, entry in doc["results"].items():
        assert entry["errors"] == {}, (name, entry["errors"])
        assert entry["metrics"], name
        for metric, m in entry["metrics"].items():
            # /proc counts another process's CPU in 10 ms ticks: a smoke run's 300 16 KiB messages
            # can cost the broker less than one, so a CPU figure may read 0, never below
            positive = m["median"] >= 0 if metric.endswith("_cpu_us") else m["median"] > 0
            assert positive and m["min"] <= m["median"] <= m["max"], (name, metric, m)
    a = doc["results"]["quiver-async"]["metrics"]
    for metric in ("produce_msgs_s", "batch_msgs_s", "consume_msgs_s", "sync_p50_us", "e2e_p99_us",
                   "produce_64b_msgs_s", "produce_16k_msgs_s", "procs1_msgs_s", "procs4_msgs_s",
                   "produce_client_cpu_us"):
        assert metric in a, metric
    assert a["sync_p50_us"]["median"] <= a["sync_p99_us"]["median"] <= a["sync_max_us"]["median"]
    for rate in ("2k", "10k"):   # latency under load: every rate of the smoke counts
        p50, p99, p999 = (a[f"load{rate}_e2e_{q}_us"]["median"] for q in ("p50", "p99", "p999"))
        assert p50 <= p99 <= p999, (rate, p50, p99, p999)
        assert a[f"load{rate}_e2e_rate_msgs_s"]["median"] > 0
    assert "produce_msgs_s" in doc["results"]["quiver-sync"]["metrics"]
    # the floor's latencies, and every Quiver latency over them (printed, never asserted on)
    assert {"sync_p50_us", "sync_p99_us", "e2e_p50_us", "e2e_p99_us", "load10k_e2e_p99_us"} <= set(
        doc["results"]["floor"]["metrics"])
    ratios = doc["floor"]["quiver-async"]
    assert len(ratios) == 6 and all(math.isfinite(r) and r > 0 for r in ratios.values()), ratios
    assert set(doc["floor"]["quiver-sync"]) == {"sync send p50 / round trip p50", "sync send p99 / round trip p99"}

    md = js.with_suffix(".md").read_text()
    assert "| produce pipelined, window 1000 (msg/s) |" in md and "quiver-async" in md
    assert "## Latency under load" in md and "| e2e p99.9 at 10k msg/s (µs) |" in md
    assert "| client CPU per pipelined message, all threads (µs) |" in md
    assert "## Against the floor" in md and "| sync send p50 / round trip p50 | " in md
    assert "| sync send p50 <= 1.6x the bare pyzmq round trip (floor) |" in md
    try:
        import matplotlib  # noqa: F401  (the `bench` extra; the plot is skipped without it)
    except ImportError:
        return
    png = js.with_suffix(".png")
    assert png.stat().st_size > 10_000 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.bench
def test_bench_floor_column(tmp_path):
    # bare pyzmq on the latency workloads at smoke size: seconds, no broker
    proc = subprocess.run([sys.executable, "-m", "bench", "--only", "floor", "--repeat", "1", "--smoke",
                           "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    [js] = list(tmp_path.glob("*.json"))
    doc = json.loads(js.read_text())
    entry = doc["results"]["floor"]
    assert entry["errors"] == {}, entry["errors"]
    m = {k: v["median"] for k, v in entry["metrics"].items()}
    for key in ("sync_p50_us", "sync_p99_us", "e2e_p50_us", "e2e_p99_us", "load2k_e2e_p99_us", "load10k_e2e_p99_us"):
        assert math.isfinite(m[key]) and m[key] > 0, (key, m)
    assert m["sync_p50_us"] <= m["sync_p99_us"] and m["e2e_p50_us"] <= m["e2e_p99_us"]
    assert m["e2e_rate_msgs_s"] > 0
    assert doc["floor"] == {}   # nothing to divide by it in this run
    md = js.with_suffix(".md").read_text()
    assert "| measure | floor |" in md and "## Throughput" not in md


@pytest.mark.slow
@pytest.mark.bench
def test_bench_scale_workload_smoke(tmp_path):
    # the opt-in 10M workload at smoke size: stores, reads from the head, kill -9, recovers
    proc = subprocess.run([sys.executable, "-m", "bench", "--only", "quiver-async", "--workloads", "scale", "--smoke",
                           "--repeat", "1", "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    [js] = list(tmp_path.glob("*.json"))
    entry = json.loads(js.read_text())["results"]["quiver-async"]
    assert entry["errors"] == {} and sorted(entry["metrics"]) == [
        "scale_cold_read_msgs_s", "scale_recovery_s", "scale_rss_mb", "scale_store_msgs_s"]
    assert all(m["median"] > 0 for m in entry["metrics"].values())
    assert "messages (`--workloads scale`)" in js.with_suffix(".md").read_text()


@pytest.mark.slow
@pytest.mark.bench
def test_bench_rocketmq5_proxy_column(tmp_path):
    # the RocketMQ 5 client through quiver_proxy as a system of its own, next to the peers
    proc = subprocess.run([sys.executable, "-m", "bench", "--only", "rocketmq5-proxy", "--workloads",
                           "produce,consume,sync", "--smoke", "--repeat", "1", "--out", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    [js] = list(tmp_path.glob("*.json"))
    entry = json.loads(js.read_text())["results"]["rocketmq5-proxy"]
    assert entry["errors"] == {}, entry["errors"]
    m = entry["metrics"]
    assert m["produce_msgs_s"]["median"] > 0 and m["consume_msgs_s"]["median"] > 0
    assert 0 < m["sync_p50_us"]["median"] <= m["sync_p99_us"]["median"]
    assert "rocketmq5-proxy" in js.with_suffix(".md").read_text()


@pytest.mark.slow
@pytest.mark.bench
@pytest.mark.kafka
def test_bench_kafka_gateway_column(tmp_path):
    # confluent-kafka through quiver_kafka as a system of its own: pipelined produce, a group's
    # consumer, sync produce and e2e, every workload measured (structure, not speed)
    proc = subprocess.run([sys.executable, "-m", "bench", "--only", "kafka", "--smoke", "--repeat", "1",
                           "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    [js] = list(tmp_path.glob("*.json"))
    entry = json.loads(js.read_text())["results"]["kafka-gateway"]
    assert entry["errors"] == {}, entry["errors"]
    m = entry["metrics"]
    for key in ("produce_msgs_s", "consume_msgs_s", "produce_64b_msgs_s", "produce_16k_msgs_s", "e2e_rate_msgs_s"):
        assert m[key]["median"] > 0, key
    assert 0 < m["sync_p50_us"]["median"] <= m["sync_p99_us"]["median"]
    assert 0 < m["e2e_p50_us"]["median"] <= m["e2e_p99_us"]["median"]
    assert "| kafka-gateway |" in js.with_suffix(".md").read_text()


@pytest.mark.slow
@pytest.mark.bench
def test_bench_proxy_reports_the_client_ceiling(tmp_path):
    # SDK, proxy and the 5.x client against a server answering at once, with CPU per message
    proc = subprocess.run([sys.executable, "-m", "bench.proxy", "--messages", "200", "--out", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    [js] = list(tmp_path.glob("proxy-*.json"))
    doc = json.loads(js.read_text())
    for wl in ("produce", "receive_ack"):
        r = doc[wl]
        assert r["sdk"]["msgs_s"] > 0 and r["proxy"]["msgs_s"] > 0 and r["ceiling"]["msgs_s"] > 0, r
        assert set(r["proxy"]["cpu_us_per_msg"]) == {"client", "proxy", "broker"}
        assert set(r["ceiling"]["cpu_us_per_msg"]) == {"client", "server"}
        assert r["ratio"] == round(r["proxy"]["msgs_s"] / r["sdk"]["msgs_s"], 2)


@pytest.mark.slow
@pytest.mark.bench
def test_bench_hops_timeline(tmp_path):
    # a message's per-hop timeline at smoke size: every hop's p50/p99, the slowest 1% and what made them slow
    proc = subprocess.run([sys.executable, "-m", "bench.hops", "--messages", "200", "--no-floor", "--probe-broker",
                           "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    [js] = list(tmp_path.glob("hops-*.json"))
    doc = json.loads(js.read_text())
    a, tasks = doc["analysis"], doc["broker_probe"]["tasks"]   # the broker's service thread, timed
    # a drain reads every request waiting: a sync send answered early in a drain can have its
    # successor read by the same drain (175 drains for 200 sends seen under CI's load)
    assert tasks["socket drain"]["count"] >= 50 and "every pop_revive" in tasks, tasks
    assert a["count"] == 200
    from bench.hops import HOPS, PULL_HOPS, SPLITS
    assert set(a["hops"]) == {name for name, _, _ in HOPS + PULL_HOPS}   # the push consumer's pulls are timed
    assert 180 <= a["pulls_matched"] <= 200
    for name, s in a["hops"].items():
        assert all(math.isfinite(s[q]) for q in ("p50_us", "p99_us", "p999_us")), (name, s)
        assert s["p50_us"] <= s["p99_us"] <= s["p999_us"], (name, s)
    for name in ("sync send: send -> replied", "e2e: send -> consumed"):   # exact hops: positive
        assert a["hops"][name]["p50_us"] > 0, name
    for key, (total, parts) in SPLITS.items():
        slow = a["slowest"][key]
        assert slow["messages"] == 2 and len(slow["timelines"]) == 2 and sum(slow["dominant"].values()) == 2
        assert set(slow["dominant"]) <= set(parts) and set(slow["parts_mean_us"]) == set(parts)
        assert 1 <= slow["bursts"] <= 2 and 0 <= slow["through_gc"] <= 2
        assert all(t["total_us"] >= a["hops"][total]["p99_us"] for t in slow["timelines"])
    assert 0 <= a["slowest"]["e2e"]["pull_sent_after_stored"] <= 2
    assert "| sync send: send -> replied |" in proc.stdout and "## The slowest 2 by e2e" in proc.stdout
    assert "- consumer process: " in proc.stdout and "involuntary context switches" in proc.stdout
    assert sum(v["count"] for v in a["pull_waiting"].values()) == a["pulls_matched"]
    gap = doc["pull_gaps"]   # a pull answered -> its queue's next pull sent, in the consumer
    assert gap["count"] >= 50 and 0 < gap["p50_us"] <= gap["p99_us"] and gap["negative"] == 0, gap
    assert doc["procs"]["consumer"]["rusage"]["cpu_s"] > 0 and "µs CPU a message" in proc.stdout
    from bench.hops_held import rounds   # a held pull's wake: answered with the put's reply, 3 rounds
    held = rounds(3)
    assert [len(v) for v in held.values()] == [3, 3, 3], held
    assert min(held["send() round trip"]) > 0 and min(held["pull answered, after send() was called"]) > 0, held
