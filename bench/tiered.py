"""Reading messages that live only in the tiered store against reading them from local disk, same run.

    python -m bench.tiered                          # 1M messages of 200 bytes, a file:// store
    python -m bench.tiered --messages 200000 --s3   # a moto S3 server process on loopback

One broker store in this process (no network between consumer and store: the figure is the
store's read path). Messages are put over 4 queues in 64 MiB segments, every queue is read from
offset 0 with 32-message pulls (the local pass), the sealed segments are uploaded, verified and
deleted locally, and the same pulls run again (the remote pass, cold cache of 64 MiB). Prints
msg/s of both passes and their ratio; --out writes them as JSON.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from quiver.tools.local import free_port
from quiver.wire.property_string import format_properties
from quiver_broker.store import GetStatus, MessageStore
from quiver_broker.tiered import Tiered
from quiver_broker.tiered_store import FileStore, S3Store

HOST = b"\x7f\0\0\x01\0\0\x27\x10"
QUEUES = 4
BATCH = 32


def fill(store, messages: int, body_bytes: int) -> int:
    body = os.urandom(body_bytes)
    props = [format_properties({"KEYS": "k"})] * BATCH
    done = 0
    while done < messages:
        n = min(BATCH, messages - done)
        store.put_batch("Bench", (done // BATCH) % QUEUES, [body] * n, props[:n], [0] * n, 0, 1, HOST)
        done += n
    store.flush_step(force=True)
    return done


def read_all(store) -> tuple[int, float]:
    t0 = time.perf_counter()
    total = 0
    for q in range(QUEUES):
        off = 0
        while True:
            g = store.get_messages("Bench", q, off, max_msgs=BATCH)
            if g.status is not GetStatus.FOUND:
                break
            total += g.count
            off = g.next_offset
    return total, time.perf_counter() - t0


def moto_server():
    port = free_port()
    for k, v in {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
                 "AWS_DEFAULT_REGION": "us-east-1"}.items():
        os.environ.setdefault(k, v)
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    objects = S3Store("bench", "tiered", f"http://127.0.0.1:{port}")
    deadline = time.monotonic() + 30
    while True:
        try:
            objects.client.create_bucket(Bucket="bench")
            return proc, objects
        except Exception:
            if time.monotonic() > deadline:
                proc.kill()
                raise
            time.sleep(0.2)


def run(messages: int, body_bytes: int, s3: bool, segment_bytes: int, cache_bytes: int) -> dict:
    work = tempfile.mkdtemp(prefix="bench-tiered-")
    proc = None
    try:
        if s3:
            proc, objects = moto_server()
        else:
            objects = FileStore(os.path.join(work, "bucket"))
        store = MessageStore(os.path.join(work, "broker"), segment_bytes=segment_bytes)
        tiered = Tiered(objects, os.path.join(work, "broker"), local_retention_bytes=0, cache_bytes=cache_bytes,
                        background=False)
        store.attach_tiered(tiered)
        store.open()
        t0 = time.perf_counter()
        fill(store, messages, body_bytes)
        put_s = time.perf_counter() - t0
        n_local, local_s = read_all(store)
        t0 = time.perf_counter()
        while tiered.step():
            pass
        upload_s = time.perf_counter() - t0
        store.clean_expired()
        remote_share = store.commit_log.min_offset / max(1, store.commit_log.write_end)
        n_remote, remote_s = read_all(store)
        stats = store.stats()["tiered"]
        store.close()
        assert n_local == n_remote == messages, (n_local, n_remote, messages)
        return {"messages": messages, "body_bytes": body_bytes, "store": "s3 (moto)" if s3 else "file",
                "put_msg_s": round(messages / put_s), "upload_mb_s": round(stats["uploaded_bytes"] / upload_s / 1e6, 1),
                "remote_share": round(remote_share, 3),
                "local_msg_s": round(n_local / local_s), "remote_msg_s": round(n_remote / remote_s),
                "ratio": round(local_s / remote_s, 2), "cache_misses": stats["cache_misses"],
                "cache_bytes": stats["cache_bytes"]}
    finally:
        if proc is not None:
            proc.kill()
            proc.wait(10)
        shutil.rmtree(work, ignore_errors=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--body-bytes", type=int, default=200)
    ap.add_argument("--segment-bytes", type=int, default=64 << 20)
    ap.add_argument("--cache-bytes", type=int, default=64 << 20)
    ap.add_argument("--s3", action="store_true", help="a moto S3 server process instead of a file:// store")
    ap.add_argument("--out", help="write the figures as JSON to this file")
    a = ap.parse_args(argv)
    res = run(a.messages, a.body_bytes, a.s3, a.segment_bytes, a.cache_bytes)
    print(f"{res['messages']} x {res['body_bytes']} B, {res['store']} store, {res['remote_share']:.0%} of the log "
          f"remote: local {res['local_msg_s']} msg/s, remote {res['remote_msg_s']} msg/s "
          f"(remote/local {res['ratio']}x); upload {res['upload_mb_s']} MB/s")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
