"""Transactional messages benchmark: half + commit vs plain send, and check-back throughput.

    python -m bench.transactions [--messages 5000] [--threads 4] [--checks 20000] [--quick]

1. Send throughput, same run, same threads, 1 KiB bodies: plain `send()` vs
   `send_in_transaction()` (half message + local transaction returning COMMIT
   + END_TRANSACTION). Both are synchronous per message, as RocketMQ's
   sendMessageInTransaction is; target ratio >= 0.4. Plain `send_async`
   (auto-batched) is printed for context.
2. Checker throughput: N halves left UNKNOWN, then a txn-checker starts
   (timeout 0) and a producer whose checker answers COMMIT resolves them:
   resolved checks/s from the checker's start to the last commit (target >= 5k).
Writes bench/results/transactions-<date>.json. Everything runs on 127.0.0.1.
"""

import argparse
import datetime
import json
import os
import tempfile
import threading
import time

from quiver import Admin, Message, Producer, TransactionProducer, TransactionState
from quiver.client.access import broker_access
from quiver.wire import requests as rq
from quiver.tools.local import LocalCluster, wait_healthy

BODY = b"x" * 1024


def _threads(n_threads: int, n: int, fn) -> float:
    per = n // n_threads
    t0 = time.monotonic()
    ts = [threading.Thread(target=lambda: [fn() for _ in range(per)]) for _ in range(n_threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return per * n_threads / (time.monotonic() - t0)


def sends(namesrv: str, n: int, threads: int) -> dict:
    out = {}
    with Producer("bench-plain", namesrv=namesrv) as p:
        p.send(Message("BenchTx", BODY))
        out["plain_send_msgs_s"] = round(_threads(threads, n, lambda: p.send(Message("BenchTx", BODY))))
        t0 = time.monotonic()
        futs = [p.send_async(Message("BenchTx", BODY)) for _ in range(n)]
        for f in futs:
            f.result(60)
        out["plain_send_async_msgs_s"] = round(n / (time.monotonic() - t0))
    commit = lambda m, a: TransactionState.COMMIT  # noqa: E731
    with TransactionProducer("bench-tx", namesrv=namesrv, checker=lambda m: TransactionState.COMMIT) as tp:
        tp.send_in_transaction(Message("BenchTx", BODY), commit)
        out["tx_send_msgs_s"] = round(_threads(threads, n, lambda: tp.send_in_transaction(Message("BenchTx", BODY), commit)))
    out["tx_vs_plain_send"] = round(out["tx_send_msgs_s"] / out["plain_send_msgs_s"], 2)
    return out


def _broker_counter(admin: Admin, addr: str, name: str) -> int:
    return admin.status(addr).get("counters", {}).get(name, 0)


def checks(cluster: LocalCluster, n: int, threads: int) -> dict:
    broker = next(s for s in cluster.services if s.role == "broker").addr
    admin = Admin(namesrv=cluster.namesrv)
    unknown = lambda m, a: TransactionState.UNKNOWN  # noqa: E731
    with TransactionProducer("bench-check", namesrv=cluster.namesrv, checker=lambda m: TransactionState.COMMIT) as tp:
        _threads(threads, n, lambda: tp.send_in_transaction(Message("BenchTx", BODY), unknown))
        base = _broker_counter(admin, broker, "txn_commit")
        svc = cluster.add_service("txn-checker", "quiver_txn", "--check-interval-ms", "100",
                                  "--transaction-timeout-ms", "0", "--check-batch", "1024")
        t_start = time.monotonic()
        wait_healthy([svc])
        deadline = t_start + 300
        done, t0, first = 0, None, 0
        while time.monotonic() < deadline:
            done = _broker_counter(admin, broker, "txn_commit") - base
            if t0 is None and done > 0:
                t0, first = time.monotonic(), done  # from the first resolved check (process start excluded)
            if done >= n:
                break
            time.sleep(0.01)
        elapsed = time.monotonic() - (t0 or t_start)
        done_in_window = done - first
        left = rq.TransactionListReply.decode(broker_access(admin).call_broker(broker, rq.TransactionListOpen(limit=1)).ext).count
    admin.shutdown()
    return {"check_halves": n, "resolved": done, "still_open": left, "check_seconds": round(elapsed, 2),
            "check_seconds_incl_startup": round(time.monotonic() - t_start, 2),
            "resolved_checks_s": round(done_in_window / max(elapsed, 1e-6))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Quiver transactional messages benchmark")
    ap.add_argument("--messages", type=int, default=5000)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--checks", type=int, default=20000)
    ap.add_argument("--quick", action="store_true", help="small counts (smoke)")
    args = ap.parse_args(argv)
    if args.quick:
        args.messages, args.checks = 1000, 3000
    c = LocalCluster(tempfile.mkdtemp(prefix="bench-tx-"))
    try:
        c.add_core()
        Admin(namesrv=c.namesrv).create_topic("BenchTx", queues=4)
        res = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "messages": args.messages,
               "threads": args.threads, **sends(c.namesrv, args.messages, args.threads),
               **checks(c, args.checks, args.threads)}
    finally:
        c.stop()
    print(f"plain send (sync, {args.threads} threads)      {res['plain_send_msgs_s']:>8} msg/s")
    print(f"plain send_async (auto-batched)       {res['plain_send_async_msgs_s']:>8} msg/s   (context)")
    print(f"send_in_transaction (half + commit)   {res['tx_send_msgs_s']:>8} msg/s   "
          f"ratio {res['tx_vs_plain_send']} (target >= 0.4)")
    print(f"checker: {res['resolved']}/{res['check_halves']} resolved in {res['check_seconds']} s = "
          f"{res['resolved_checks_s']} checks/s (target >= 5000)")
    os.makedirs(os.path.join(os.path.dirname(__file__), "results"), exist_ok=True)
    path = os.path.join(os.path.dirname(__file__), "results",
                        f"transactions-{datetime.datetime.now():%Y-%m-%d-%H%M}.json")
    with open(path, "w") as f:
        json.dump(res, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
