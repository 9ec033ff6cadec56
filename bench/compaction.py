"""Compaction of a compacted topic, in-process: how long a pass over N MB of a 10k-key queue takes.

    python -m bench.compaction                  # 1024 MB, 10 000 keys, 1 KiB bodies, no rate limit
    python -m bench.compaction --mb 200 --keys 10000 --rate-mb 0
    python -m bench.compaction --mb 1024 --rate-mb 64 --puts 5   # puts alone, then during the pass

A MessageStore in a temp dir (ASYNC flush, 64 MiB segments) is filled with --mb of messages
over --keys keys, one queue, then one pass (`Compactor.compact_queue`, at the broker's
BUSY_RATIO) is timed by the wall clock: read every record of the sealed range twice (choose, then copy the kept ones), write
and fsync the compacted log. Prints MB/s of input and the time; writes
bench/results/compaction-<date>.json. The temp dir is removed at the end.

With --puts S: puts of batches of 64 (--put-body bytes each) on the calling thread (the broker's service
thread) for S seconds alone, then for as long as a pass runs (rate limited by --rate-mb, as a
broker runs it: in a child process, or with --in-thread on the compaction thread itself), then
alone again for as long as the pass ran (each window from no dirty pages): the rate during the
pass over that rate alone is what a pass costs puts (the shared machine's load drifts: compare
A/B runs alternated, by their medians).
"""

import argparse
import datetime
import json
import os
import shutil
import tempfile
import time

from quiver.wire.property_string import format_properties
from quiver_broker.store import MessageStore

HOST = b"\x7f\0\0\x01\0\0\x27\x10"


def put_rates(s, a, batch: int) -> dict:
    """Messages/s put alone for a.puts seconds, then while a pass runs on the compaction thread."""
    import threading
    props = [format_properties({"KEYS": f"key-{j % a.keys}"}) for j in range(batch)]
    bodies = [b"v" * (a.put_body or a.body)] * batch

    def run(until) -> float:
        n, t0 = 0, time.monotonic()
        while not until(time.monotonic() - t0):
            s.put_batch("Other", 0, bodies, props, [0] * batch, 0, 1, HOST)
            n += batch
        return n / (time.monotonic() - t0)

    # each window starts with no dirty pages: a long one (GBs of puts) meets the kernel's
    # write-back throttling, which a short one does not, and which is not the pass's doing
    os.sync()
    before = run(lambda el: el >= a.puts)
    s.flush_step(force=True)
    os.sync()
    done, results = threading.Event(), []
    t0 = time.monotonic()
    s.compaction.submit(["Compacted"], lambda fn, *args: fn(*args),
                        lambda res, err: (results.extend(res), done.set()), force=True)
    during = run(lambda el: done.is_set())
    pass_s = time.monotonic() - t0
    os.sync()
    after = run(lambda el: el >= max(a.puts, pass_s))   # alone again, as long as the pass
    return {"puts_alone_msg_s": round(after), "puts_before_after_msg_s": [round(before), round(after)],
            "puts_during_pass_msg_s": round(during),
            "puts_ratio": round(during / after, 2), "pass_s": round(pass_s, 2),
            "records_read": results[0].read if results else 0, "kept": results[0].kept if results else 0}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=1024, help="MB of messages to compact")
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--body", type=int, default=1024, help="body bytes")
    ap.add_argument("--rate-mb", type=float, default=0, help="the pass's rate limit in MB/s (0: none)")
    ap.add_argument("--dir", default=None, help="where the temp store goes (default: the system temp dir)")
    ap.add_argument("--puts", type=float, default=0, help="seconds of puts alone, then puts during a pass")
    ap.add_argument("--put-body", type=int, default=0, help="with --puts: their body bytes (default: --body)")
    ap.add_argument("--nice", type=int, default=10, help="the child process's os.nice increment")
    ap.add_argument("--in-thread", action="store_true", help="with --puts: the pass on the compaction thread, "
                    "not in a child process")
    a = ap.parse_args(argv)
    d = tempfile.mkdtemp(prefix="quiver-compaction-", dir=a.dir)
    try:
        s = MessageStore(d, segment_bytes=64 << 20, flush_interval_ms=1000,
                         compaction_bytes_per_s=int(a.rate_mb * 1e6))
        s.compaction.is_compacted = lambda topic: True
        s.compaction.in_child = not a.in_thread
        s.compaction.child_nice = a.nice
        s.open()
        n = a.mb * 1_000_000 // (a.body + 150)
        batch = 64
        t0 = time.monotonic()
        for i in range(0, n, batch):
            props = [format_properties({"KEYS": f"key-{(i + j) % a.keys}"}) for j in range(batch)]
            bodies = [os.urandom(16) + b"v" * (a.body - 16) for _ in range(batch)]
            s.put_batch("Compacted", 0, bodies, props, [0] * batch, 0, 1, HOST)
        fill_s = time.monotonic() - t0
        s.flush_step(force=True)
        in_bytes = s.commit_log.segments[-1].start - s.commit_log.min_offset
        if a.puts:   # the pass on the compaction thread, puts on this one
            out = put_rates(s, a, batch)
        else:
            t0 = time.monotonic()
            res = s.compaction.compact_queue("Compacted", 0)
            out = {"pass_s": round(time.monotonic() - t0, 2), "records_read": res.read, "kept": res.kept}
        out.update({"mb": a.mb, "keys": a.keys, "body": a.body, "messages": n, "input_bytes": in_bytes,
                    "mb_per_s": round(in_bytes / 1e6 / out["pass_s"], 1), "fill_s": round(fill_s, 1),
                    "rate_limit_mb_s": a.rate_mb,
                    "pass_in": "thread" if a.in_thread or not a.puts else f"child nice {a.nice}"})
        s.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print(json.dumps(out, indent=1))
    os.makedirs("bench/results", exist_ok=True)
    with open(f"bench/results/compaction-{datetime.datetime.now():%Y%m%d-%H%M%S}.json", "w") as f:
        json.dump(out, f, indent=1)
    return out


if __name__ == "__main__":
    main()
