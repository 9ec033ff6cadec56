"""Scheduler benchmark: python -m bench.scheduler [--timers N] [--spread-s S] [--reput N] [--rss-timers N]

1. lateness: N timer messages due uniformly over S seconds; delivery time (the
   re-put's store timestamp) minus due time, p50/p99/max, and how many early.
   Meanwhile a probe, every 50 ms: a delayed send (its ack: the broker's
   request path) and a SCHEDULE_CANCEL of it straight to the scheduler (its
   answer waits for the tombstone's commit: the scheduler's request path),
   p50/p99/max in microseconds; and the scheduler's CPU seconds over the run,
   all of its threads and its service thread alone.
2. re-put throughput: N level-1 messages parked while no scheduler runs, then
   one scheduler starts: delivered messages per second.
3. RSS of the scheduler process holding N pending timers (due in a day).
Real processes on loopback (LocalCluster); prints one JSON object.
"""

import argparse
import json
import os
import tempfile
import threading
import time

from quiver import Admin, Message, Producer, PullConsumer
from quiver.client.access import broker_access
from quiver.tools.local import LocalCluster
from quiver.wire import requests as rq

LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"


def _cluster(tmp):
    c = LocalCluster(tmp)
    c.add_namesrv()
    c.wait()
    c.add_broker(None, None, "--delay-levels", LEVELS)
    c.wait()
    c.wait_registered(1)
    return c


def _send_all(p, msgs, window: int = 2000):
    """Pipelined with a window: delayed messages travel one per request, so an unbounded
    burst would keep the last ones queued past their send timeout."""
    sem = threading.Semaphore(window)
    futs = []
    for m in msgs:
        sem.acquire()
        f = p.send_async(m)
        f.add_done_callback(lambda _f: sem.release())
        futs.append(f)
    return [f.result(60) for f in futs]


def _wait_status(admin, addr, pred, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = admin.status(addr)
        if pred(st):
            return st
        time.sleep(0.1)
    return admin.status(addr)


def _us_summary(xs: list[float]) -> dict:
    xs = sorted(xs)
    if not xs:
        return {"n": 0}
    pick = lambda q: round(xs[min(len(xs) - 1, int(q * len(xs)))] * 1e6)
    return {"n": len(xs), "p50_us": pick(0.5), "p99_us": pick(0.99), "max_us": round(xs[-1] * 1e6)}


def _cpu_s(pid: int) -> dict:
    """CPU seconds (user + system) of a process and of its main thread (a service's own loop)."""
    tick = os.sysconf("SC_CLK_TCK")

    def of(path):
        with open(path) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / tick
    return {"process": round(of(f"/proc/{pid}/stat"), 1), "service_thread": round(of(f"/proc/{pid}/task/{pid}/stat"), 1)}


def _probe(namesrv: str, sched_addr: str, topic: str, stop: threading.Event, out: dict) -> None:
    """Every 50 ms, until `stop`: a delayed send (due in an hour) and its cancel at the scheduler."""
    sends, cancels = out.setdefault("send", []), out.setdefault("cancel", [])
    with Producer("bench-probe", namesrv=namesrv, auto_batch=False) as p:
        while not stop.wait(0.05):
            t0 = time.perf_counter()
            r = p.send(Message(topic, b"probe", deliver_at=int(time.time() * 1000) + 3_600_000))
            t1 = time.perf_counter()
            broker_access(p).transport.call_future(sched_addr, rq.ScheduleCancel(msg_id=r.msg_id, topic=topic)).result(5)
            sends.append(t1 - t0)
            cancels.append(time.perf_counter() - t1)


def lateness(n: int, spread_s: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        c = _cluster(tmp)
        try:
            sched = c.add_service("scheduler", "quiver_scheduler")
            c.wait()
            admin = Admin(namesrv=c.namesrv)
            admin.create_topic("BenchLate", queues=4)
            _wait_status(admin, sched.addr, lambda s: len(s["owned"]) == 19, 20)
            lead_ms = 5_000 + n // 2   # room to send them all before the first is due
            start = int(time.time() * 1000) + lead_ms
            with Producer("bench", namesrv=c.namesrv, auto_batch=False) as p:
                t0 = time.perf_counter()
                _send_all(p, [Message("BenchLate", b"x" * 100, deliver_at=start + int(i * spread_s * 1000 / n))
                              for i in range(n)])
                send_s = time.perf_counter() - t0
            lates, probes, stop = [], {}, threading.Event()
            probe = threading.Thread(target=_probe, args=(c.namesrv, sched.addr, "BenchLate", stop, probes))
            probe.start()
            with PullConsumer("bench-late", namesrv=c.namesrv, consume_from="first") as pc:
                pc.subscribe("BenchLate")
                deadline = time.monotonic() + lead_ms / 1000 + spread_s + 60
                while len(lates) < n and time.monotonic() < deadline:
                    for m in pc.poll(0.5):
                        if m.body != b"probe":
                            lates.append(m.store_timestamp - int(m.properties["SCHEDULE_DUE_MS"]))
            stop.set()
            probe.join()
            lates.sort()
            st = admin.status(sched.addr)
            cpu = _cpu_s(sched.pid)
            pick = lambda q: lates[min(len(lates) - 1, int(q * len(lates)))] if lates else None
            return {"timers": n, "spread_s": spread_s, "send_s": round(send_s, 1), "delivered": len(lates),
                    "early": sum(1 for x in lates if x < 0), "late_p50_ms": pick(0.5), "late_p99_ms": pick(0.99),
                    "late_max_ms": lates[-1] if lates else None, "scheduler_lag": st["lag_ms"],
                    "scheduler_cpu_s": cpu,
                    "delayed_send_ack": _us_summary(probes.get("send", [])),
                    "cancel_answer": _us_summary(probes.get("cancel", []))}
        finally:
            c.stop()


def reput_throughput(n: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        c = _cluster(tmp)
        try:
            admin = Admin(namesrv=c.namesrv)
            admin.create_topic("BenchReput", queues=4)
            with Producer("bench", namesrv=c.namesrv, auto_batch=False) as p:
                _send_all(p, [Message("BenchReput", b"y" * 100, delay_level=1) for _ in range(n)])
            time.sleep(1.2)   # all due now
            sched = c.add_service("scheduler", "quiver_scheduler")
            c.wait()
            st = _wait_status(admin, sched.addr, lambda s: s["delivered"] > 0, 30)
            t0, d0 = time.perf_counter(), st["delivered"]
            st = _wait_status(admin, sched.addr, lambda s: s["delivered"] >= n, 120)
            secs = time.perf_counter() - t0
            return {"messages": n, "delivered": st["delivered"], "seconds": round(secs, 2),
                    "reputs_per_s": round((st["delivered"] - d0) / secs) if secs > 0 else None}
        finally:
            c.stop()


def rss(n: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        c = _cluster(tmp)
        try:
            sched = c.add_service("scheduler", "quiver_scheduler")
            c.wait()
            admin = Admin(namesrv=c.namesrv)
            admin.create_topic("BenchRss", queues=4)
            _wait_status(admin, sched.addr, lambda s: len(s["owned"]) == 19, 20)
            due = int(time.time() * 1000) + 86_400_000
            with Producer("bench", namesrv=c.namesrv, auto_batch=False) as p:
                for start in range(0, n, 20_000):
                    _send_all(p, [Message("BenchRss", b"z" * 100, deliver_at=due + i)
                                  for i in range(start, min(n, start + 20_000))])
            st = _wait_status(admin, sched.addr, lambda s: s["pending"]["timers"] >= n, 300)
            with open(f"/proc/{sched.pid}/status") as f:
                kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS"))
            db = os.path.join(tmp, "scheduler", "scheduler-0", "timers.db")
            return {"pending_timers": st["pending"]["timers"], "rss_mb": round(kb / 1024, 1),
                    "in_memory": st["timers_in_memory"], "db_mb": round(os.path.getsize(db) / 2**20, 1)}
        finally:
            c.stop()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="bench.scheduler")
    ap.add_argument("--timers", type=int, default=100_000)
    ap.add_argument("--spread-s", type=float, default=60.0)
    ap.add_argument("--reput", type=int, default=100_000)
    ap.add_argument("--rss-timers", type=int, default=1_000_000)
    ap.add_argument("--only", choices=["lateness", "reput", "rss"])
    args = ap.parse_args(argv)
    out = {}
    if args.only in (None, "reput"):
        out["reput"] = reput_throughput(args.reput)
        print(json.dumps(out["reput"]), flush=True)
    if args.only in (None, "lateness"):
        out["lateness"] = lateness(args.timers, args.spread_s)
        print(json.dumps(out["lateness"]), flush=True)
    if args.only in (None, "rss"):
        out["rss"] = rss(args.rss_timers)
        print(json.dumps(out["rss"]), flush=True)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
