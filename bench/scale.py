"""Scale: a broker holding millions of messages — its memory, cold reads from the head, and
recovery after kill -9.

    python -m bench.scale                          # 10M messages of 100 bytes (~2.5 GB of CommitLog)
    python -m bench.scale --messages 1000000       # a quicker look
    python -m bench.scale --drop-caches            # root: empty the page cache before the cold read

One name server and one broker (`--flush async`) on 127.0.0.1, data in a temp dir (or
`--data-dir`), stopped by PID. Steps:
1. store `--messages` on an 8-queue topic with `send_batch_async` (batches of `--batch`,
   `--window` in flight); every message carries a key (IndexFile entries for all of them);
2. broker RSS (VmRSS and RssAnon) right after, and after `--settle-s` (flush and index work done);
3. cold read: a PullConsumer reads `--read` messages from the head of every queue (the oldest
   data, long out of the page cache's recent pages; with `--drop-caches`, out of it for sure);
4. kill -9 of the broker, started again on the same data: seconds from its start to its first
   answer (recovery runs before it binds), then until every queue's max offset is back and the
   oldest and newest messages read back; RSS after recovery.
Goals (issue 18): broker RSS <= 250 MB with 10M stored, recovery <= 10 s.
Writes bench/results/scale-<date>.json.
"""

import argparse
import datetime
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time

from quiver import Admin, Message, Producer, PullConsumer
from quiver.client.base import MessageQueue
from quiver.errors import QuiverError
from quiver.tools.local import LocalCluster, wait_healthy

from bench.soak import read_rss_kb

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
TOPIC = "Scale"
QUEUES = 8
RSS_GOAL_MB = 250
RECOVERY_GOAL_S = 10.0


def _rss_mb(pid: int) -> dict:
    kb = read_rss_kb(pid)
    return {"rss_mb": round(kb.get("VmRSS", 0) / 1024, 1), "anon_mb": round(kb.get("RssAnon", 0) / 1024, 1)}


def store(namesrv: str, n: int, body_bytes: int, batch: int, window: int) -> dict:
    """`n` messages (a key each) in batches, `window` batches in flight; msg/s."""
    body = b"x" * body_bytes
    sem = threading.Semaphore(window)
    failed: list[BaseException] = []

    def done(f):
        sem.release()
        if f.exception() is not None:
            failed.append(f.exception())
    t0 = time.perf_counter()
    with Producer("scale", namesrv=namesrv) as p:
        sent = 0
        while sent < n and not failed:
            k = min(batch, n - sent)
            msgs = [Message(TOPIC, body, keys=[f"k{sent + i}"]) for i in range(k)]
            sem.acquire()
            p.send_batch_async(msgs).add_done_callback(done)
            sent += k
        for _ in range(window):   # every batch answered
            sem.acquire()
    if failed:
        raise RuntimeError(f"a batch failed: {failed[0]}")
    secs = time.perf_counter() - t0
    return {"messages": n, "seconds": round(secs, 1), "msgs_per_s": round(n / secs)}


def max_offsets(admin: Admin) -> dict[int, int]:
    return {q: admin.max_offset(MessageQueue(TOPIC, "broker-a", q)) for q in range(QUEUES)}


def cold_read(namesrv: str, n: int) -> dict:
    """Read `n` messages from the head of every queue; msg/s."""
    got = 0
    with PullConsumer(f"scale-read-{time.time_ns()}", namesrv=namesrv, consume_from="first",
                      pull_batch_size=256, auto_commit=False) as c:
        c.subscribe(TOPIC)
        t0 = time.perf_counter()
        deadline = t0 + 300
        while got < n and time.perf_counter() < deadline:
            got += len(c.poll(0.5))
        secs = time.perf_counter() - t0
    return {"messages": got, "seconds": round(secs, 1), "msgs_per_s": round(got / secs)}


def drop_caches() -> bool:
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def recovery(cluster: LocalCluster, broker, admin: Admin, before: dict[int, int]) -> dict:
    """kill -9, start again on the same data: seconds to the first answer and to every queue whole."""
    broker.kill(signal.SIGKILL)
    t0 = time.perf_counter()
    broker.start()
    wait_healthy([broker], timeout=600)
    answered = time.perf_counter() - t0
    deadline = time.monotonic() + 120
    while True:
        try:
            after = max_offsets(admin)
            if after == before:
                break
        except QuiverError:
            after = None
        if time.monotonic() > deadline:
            raise RuntimeError(f"queues not back after recovery: {after} != {before}")
        time.sleep(0.05)
    whole = time.perf_counter() - t0
    first = admin.message_at(MessageQueue(TOPIC, "broker-a", 0), 0)
    last = admin.message_at(MessageQueue(TOPIC, "broker-a", QUEUES - 1), before[QUEUES - 1] - 1)
    readable = first is not None and last is not None
    return {"to_first_answer_s": round(answered, 2), "to_queues_whole_s": round(whole, 2),
            "oldest_and_newest_read_back": readable, **_rss_mb(broker.pid)}


def run(n: int, body_bytes: int, batch: int, window: int, read: int, settle_s: float, data_dir: str,
        drop: bool) -> dict:
    c = LocalCluster(data_dir)
    doc: dict = {"messages": n, "body_bytes": body_bytes}
    try:
        c.add_namesrv()
        c.wait()
        broker = c.add_broker(None, None, "--flush", "async")
        c.wait()
        c.wait_registered(1)
        admin = Admin(namesrv=c.namesrv)
        admin.create_topic(TOPIC, queues=QUEUES)
        doc["rss_empty"] = _rss_mb(broker.pid)
        doc["store"] = store(c.namesrv, n, body_bytes, batch, window)
        doc["rss_stored"] = _rss_mb(broker.pid)
        time.sleep(settle_s)
        doc["rss_settled"] = _rss_mb(broker.pid)
        before = max_offsets(admin)
        doc["stored_per_queue"] = before
        doc["commitlog_bytes"] = _dir_bytes(os.path.join(c.data_dir, "broker"), "commitlog")
        doc["page_cache_dropped"] = drop_caches() if drop else False
        doc["cold_read"] = cold_read(c.namesrv, min(read, n))
        doc["rss_after_read"] = _rss_mb(broker.pid)
        doc["recovery"] = recovery(c, broker, admin, before)
        admin.shutdown()
    finally:
        c.stop()
    doc["goals"] = {
        "rss_le_250mb": doc["rss_settled"]["rss_mb"] <= RSS_GOAL_MB,
        "recovery_le_10s": doc["recovery"]["to_queues_whole_s"] <= RECOVERY_GOAL_S,
    }
    return doc


def _dir_bytes(root: str, part: str) -> int:
    total = 0
    for dirpath, _, files in os.walk(root):
        if part in dirpath.split(os.sep):
            total += sum(os.path.getsize(os.path.join(dirpath, f)) for f in files)
    return total


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=10_000_000)
    ap.add_argument("--body-bytes", type=int, default=100)
    ap.add_argument("--batch", type=int, default=256, help="messages per send_batch_async")
    ap.add_argument("--window", type=int, default=8, help="batches in flight")
    ap.add_argument("--read", type=int, default=1_000_000, help="messages the cold read takes from the head")
    ap.add_argument("--settle-s", type=float, default=5.0)
    ap.add_argument("--data-dir", help="where the broker's data goes (default: a temp dir, removed after)")
    ap.add_argument("--drop-caches", action="store_true", help="empty the page cache before the cold read (root)")
    ap.add_argument("--no-save", action="store_true")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    tmp = args.data_dir or tempfile.mkdtemp(prefix="quiver-scale-")
    try:
        doc = run(args.messages, args.body_bytes, args.batch, args.window, args.read, args.settle_s, tmp,
                  args.drop_caches)
    finally:
        if not args.data_dir:
            shutil.rmtree(tmp, ignore_errors=True)
    doc["date"] = datetime.datetime.now().isoformat(timespec="seconds")
    print(json.dumps(doc, indent=2))
    if not args.no_save:
        os.makedirs(RESULTS, exist_ok=True)
        path = os.path.join(RESULTS, f"scale-{datetime.datetime.now():%Y-%m-%d-%H%M}.json")
        with open(path, "w") as f:
            json.dump(doc, f, indent=2)
        print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
