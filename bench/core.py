"""Foundation benchmark: raw pyzmq ceilings vs Quiver produce/consume/latency, one run.

    python -m bench.core [--messages 50000] [--quick]

Prints a table with each figure's ratio to its ceiling and writes
bench/results/core-<date>.json. Everything runs on 127.0.0.1.
"""

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import zmq

from quiver import Admin, Message, Producer, PullConsumer
from quiver.tools.local import LocalCluster, free_port

BODY = b"x" * 1024


def _rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):  # heap, not the page cache of mmap'd index files
                return int(line.split()[1])
    return 0


# ---- raw ceilings ------------------------------------------------------------------

def raw_ceilings(n: int) -> dict:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "bench.raw_server", str(port)],
                            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(f"tcp://127.0.0.1:{port}")
    try:
        for _ in range(200):           # wait until the server answers
            sock.send(b"warm")
            if sock.poll(100):
                sock.recv()
                break
        while sock.poll(300):          # the acks of asks queued while it started: not a timed request's
            sock.recv()
        out = {}
        # 1 ack per 1 KiB message, window 1000
        t0, sent, acked = time.perf_counter(), 0, 0
        while acked < n:
            while sent < n and sent - acked < 1000:
                sock.send(BODY)
                sent += 1
            sock.recv()
            acked += 1
            while sock.poll(0):
                sock.recv()
                acked += 1
        out["raw_1ack_msgs"] = n / (time.perf_counter() - t0)
        # 100-frame batches, one ack each, window 10 batches
        batches = n // 100
        frames = [BODY] * 100
        t0, sent, acked = time.perf_counter(), 0, 0
        while acked < batches:
            while sent < batches and sent - acked < 10:
                sock.send_multipart(frames)
                sent += 1
            sock.recv()
            acked += 1
        out["raw_batch_msgs"] = batches * 100 / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        for _ in range(batches // 2):
            sock.send_multipart(frames)
            sock.recv()
        out["raw_batch_sync_msgs"] = (batches // 2) * 100 / (time.perf_counter() - t0)
        # sync round trip
        lat = []
        for _ in range(2000):
            t = time.perf_counter()
            sock.send(BODY)
            sock.recv()
            lat.append(time.perf_counter() - t)
        lat.sort()
        out["raw_rtt_p50_us"] = lat[len(lat) // 2] * 1e6
        sock.send(b"STOP")
        sock.poll(1000)
        return out
    finally:
        sock.close()
        proc.kill()
        proc.wait()


# ---- quiver ---------------------------------------------------------------------------

def pipelined(p: Producer, topic: str, n: int, window: int = 1000) -> float:
    sem = threading.Semaphore(window)
    done = threading.Event()
    count = [0]
    lock = threading.Lock()

    def cb(f):
        sem.release()
        f.result()
        with lock:
            count[0] += 1
            if count[0] == n:
                done.set()
    msg = Message(topic, BODY)
    t0 = time.perf_counter()
    for _ in range(n):
        sem.acquire()
        p.send_async(msg, cb)
    done.wait(120)
    return n / (time.perf_counter() - t0)


def pipelined_batches(p: Producer, batch: list, count: int, window: int) -> float:
    sem = threading.Semaphore(window)
    futs = []
    t0 = time.perf_counter()
    for _ in range(count):
        sem.acquire()
        f = p.send_batch_async(batch)
        f.add_done_callback(lambda _f: sem.release())
        futs.append(f)
    for f in futs:
        f.result(60)
    return count * len(batch) / (time.perf_counter() - t0)


def quiver_run(n: int, flush: str, data_dir: str) -> dict:
    out = {}
    c = LocalCluster(os.path.join(data_dir, flush))
    c.add_namesrv(); c.wait()
    broker = c.add_broker(None, None, "--flush", flush)
    c.wait(); c.wait_registered(1)
    try:
        admin = Admin(namesrv=c.namesrv)
        admin.create_topic("Bench", queues=4)
        admin.create_topic("Batch", queues=4)
        admin.create_topic("Lat", queues=4)
        rss0 = _rss_kb(broker.pid)
        with Producer("bench", namesrv=c.namesrv) as p:
            p.send(Message("Bench", BODY))
            out["pipelined_msgs"] = pipelined(p, "Bench", n)
            if flush == "sync":
                return out
            batch = [Message("Batch", BODY)] * 100
            t0 = time.perf_counter()
            for _ in range(n // 200):
                p.send_batch(batch)
            out["batch_sync_msgs"] = (n // 200) * 100 / (time.perf_counter() - t0)
            out["batch_msgs"] = pipelined_batches(p, batch, n // 100, window=10)
            lat = []
            for _ in range(2000):
                t = time.perf_counter()
                p.send(Message("Lat", BODY))
                lat.append(time.perf_counter() - t)
            lat.sort()
            out["sync_p50_us"] = lat[len(lat) // 2] * 1e6
            out["sync_p99_us"] = lat[int(len(lat) * 0.99)] * 1e6
        out["broker_rss_growth_mb"] = (_rss_kb(broker.pid) - rss0) / 1024
        total = n + 1
        with PullConsumer("bench-c", namesrv=c.namesrv, consume_from="first", pull_batch_size=256) as pc:
            pc.subscribe("Bench")
            got, t0 = 0, time.perf_counter()
            while got < total and time.perf_counter() - t0 < 120:
                got += len(pc.poll(0.5))
            out["consume_msgs"] = got / (time.perf_counter() - t0)
        out["e2e_p50_us"], out["e2e_p99_us"] = e2e(c.namesrv, rate=2000, seconds=5)
        admin.shutdown()
    finally:
        c.stop()
    return out


def e2e(namesrv: str, rate: int, seconds: float) -> tuple[float, float]:
    """Producer here at a fixed rate; the consumer is another process (bench.e2e_consumer)."""
    Admin(namesrv=namesrv).create_topic("E2E", queues=4)
    n = int(rate * seconds)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.Popen([sys.executable, "-m", "bench.e2e_consumer", namesrv, "E2E", str(n), str(seconds + 10)],
                            stdout=subprocess.PIPE, text=True, cwd=root)
    try:
        assert proc.stdout.readline().strip() == "ready"
        with Producer("e2e", namesrv=namesrv) as p:
            t0 = time.perf_counter()
            for i in range(n):
                delay = t0 + i / rate - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                p.send_async(Message("E2E", BODY, properties={"t": repr(time.time())}))
        out = json.loads(proc.stdout.readline())
    finally:
        proc.kill()
        proc.wait()
    return out["p50_us"], out["p99_us"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--messages", type=int, default=50_000)
    ap.add_argument("--quick", action="store_true", help="small counts (a smoke run)")
    args = ap.parse_args(argv)
    n = 5_000 if args.quick else args.messages
    res = {"raw": raw_ceilings(n)}
    with tempfile.TemporaryDirectory() as d:
        res["async"] = quiver_run(n, "async", d)
        res["sync"] = quiver_run(n, "sync", d)
    raw, a, s = res["raw"], res["async"], res["sync"]
    rows = [
        ("raw pyzmq 1-ack ceiling (msg/s)", raw["raw_1ack_msgs"], ""),
        ("raw pyzmq 100-frame batch ceiling (msg/s)", raw["raw_batch_msgs"], ""),
        ("raw round trip p50 (us)", raw["raw_rtt_p50_us"], ""),
        ("pipelined send_async, async flush (msg/s)", a["pipelined_msgs"], f"{a['pipelined_msgs'] / raw['raw_1ack_msgs']:.2f}x 1-ack ceiling (target >= 0.7)"),
        ("raw 100-frame batches, one at a time (msg/s)", raw["raw_batch_sync_msgs"], ""),
        ("send_batch_async of 100, 10 in flight (msg/s)", a["batch_msgs"], f"{a['batch_msgs'] / raw['raw_batch_msgs']:.2f}x batch ceiling (target >= 0.8)"),
        ("send_batch of 100, one at a time (msg/s)", a["batch_sync_msgs"], f"{a['batch_sync_msgs'] / raw['raw_batch_sync_msgs']:.2f}x same-shape ceiling"),
        ("SYNC-flush pipelined (msg/s)", s["pipelined_msgs"], "target >= 40k"),
        ("sync send p50 (us)", a["sync_p50_us"], f"{a['sync_p50_us'] / raw['raw_rtt_p50_us']:.2f}x raw round trip (target <= 1.5)"),
        ("sync send p99 (us)", a["sync_p99_us"], ""),
        ("pull consume (msg/s)", a["consume_msgs"], "target >= 100k"),
        ("e2e latency p50 at 2k msg/s (us)", a["e2e_p50_us"], ""),
        ("e2e latency p99 at 2k msg/s (us)", a["e2e_p99_us"], ""),
        ("broker anonymous RSS growth over the run (MB)", a["broker_rss_growth_mb"], "flat: index and queues on disk"),
    ]
    print(f"\n| measure (1 KiB bodies, n={n}) | value | ratio / target |\n|---|---:|---|")
    for name, value, note in rows:
        print(f"| {name} | {value:,.0f} | {note} |")
    stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M")
    os.makedirs(os.path.join(os.path.dirname(__file__), "results"), exist_ok=True)
    path = os.path.join(os.path.dirname(__file__), "results", f"core-{stamp}.json")
    with open(path, "w") as f:
        json.dump({"n": n, **res}, f, indent=2)
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
