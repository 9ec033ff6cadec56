"""Memory soak: a steady, rate-limited load on a whole local cluster; RSS of every service sampled.

    python -m bench.soak --minutes 10            # the README's figures
    python -m bench.soak --minutes 2 --rate 1500 # a quick look

One name server, one broker, a scheduler, a txn-checker and a filter server (real
processes on 127.0.0.1, data in a temp dir, stopped by PID, also on Ctrl-C or
SIGTERM). The load, fixed for the whole run (not flat out):
- 4 producer threads at `--rate` msg/s in total onto one 8-queue topic, 512-byte
  bodies, rotating tags, a key on every 4th message (IndexFile entries); 1 message
  in 200 is delayed (levels 1 and 2, and a few by deliver time: scheduler work);
  every producer sends one transaction every 2 s, a third of them left UNKNOWN so
  the txn-checker asks back, a sixth rolled back;
- 4 consumers in 3 groups: two PushConsumers sharing "soak-push", a PullConsumer
  "soak-pull", and a PullConsumer "soak-sql" with a SQL92 selector (through the
  filter server; ~20 % of the plain messages match).
Every `--sample-s` the VmRSS, RssAnon and RssFile of each service process come
from /proc/PID/status. After the warm-up (`--warmup`, a share of the run) each
service gets: RSS at warm-up end and at the end (medians of the first and last
tenth of the samples after warm-up), max, the least-squares slope in MB/min, and
whether the end is within +15 % of the warm-up end. Acked vs consumed per group
(by queue offset; delayed and transactional messages by key): nothing may be lost.
Prints a table and writes bench/results/soak-<date>.json.

tests/faults/test_soak.py runs the same load and analysis for 2 minutes in CI.
"""

import argparse
import datetime
import json
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass

from quiver import (Admin, ConsumeResult, Message, MessageSelector, PullConsumer, PushConsumer, SendStatus,
                    TransactionProducer, TransactionState)
from quiver.errors import QuiverError
from quiver.tools.local import LocalCluster, wait_healthy

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
TOPIC = "Soak"
QUEUES = 8
SQL = "n < 2"                        # plain messages carry n = i % 10: a fifth match
GROWTH_LIMIT = 0.15                  # RSS at the end may be at most 15 % above the warm-up end
BROKER_ARGS = ("--flush", "async")
TXN_ARGS = ("--check-interval-ms", "1000", "--transaction-timeout-ms", "2000")
FILTER_ARGS = ("--register-interval-ms", "1000")
STATUS_FIELDS = ("VmRSS", "RssAnon", "RssFile", "RssShmem")


@dataclass(frozen=True)
class Shape:
    """The load: fixed for a whole run."""
    rate_msgs_s: int = 2000
    producers: int = 4
    body_bytes: int = 512
    ticks_s: int = 50                # sends per producer thread are grouped in ticks (auto-batched)
    key_every: int = 4
    delay_every: int = 200
    txn_interval_s: float = 2.0      # per producer
    window: int = 4000               # sends in flight per producer before it waits


# ---- the cluster ----------------------------------------------------------------------------

def add_services(cluster: LocalCluster) -> None:
    """Scheduler, txn-checker and filter server next to a running name server and broker; the
    soak topic created and routed with its filter server."""
    cluster.add_service("scheduler", "quiver_scheduler")
    cluster.add_service("txn-checker", "quiver_txn", *TXN_ARGS)
    cluster.add_service("filter", "quiver_filter", *FILTER_ARGS, data=False)
    cluster.wait()
    admin = Admin(namesrv=cluster.namesrv)
    try:
        admin.create_topic(TOPIC, queues=QUEUES)
        deadline = time.monotonic() + 20
        while True:
            try:
                if admin.topic_route(TOPIC).get("filter_servers"):
                    break
            except QuiverError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"no filter server in the route of {TOPIC} after 20 s")
            time.sleep(0.1)
    finally:
        admin.shutdown()


def local_cluster(data_dir: str) -> LocalCluster:
    c = LocalCluster(data_dir)
    try:
        c.add_namesrv()
        c.wait()
        c.add_broker(None, None, *BROKER_ARGS)
        c.wait()
        c.wait_registered(1)
        add_services(c)
    except BaseException:
        c.stop()
        raise
    return c


# ---- RSS -------------------------------------------------------------------------------------

def read_rss_kb(pid: int) -> dict[str, int]:
    """VmRSS, RssAnon, RssFile, RssShmem of a process in KiB ({} once it is gone)."""
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                name, _, rest = line.partition(":")
                if name in STATUS_FIELDS:
                    out[name] = int(rest.split()[0])
    except OSError:
        return {}
    return out


class RssSampler(threading.Thread):
    """Samples every `period_s`: samples[name] = [(seconds since start, rss_kb, anon_kb, file_kb), ...]."""

    def __init__(self, pids: dict[str, int], period_s: float):
        super().__init__(name="rss-sampler", daemon=True)
        self.pids = pids
        self.period_s = period_s
        self.samples: dict[str, list[tuple]] = {name: [] for name in pids}
        self.t0 = time.monotonic()
        self._halt = threading.Event()

    def run(self) -> None:
        tick = self.t0
        while not self._halt.is_set():
            t = time.monotonic() - self.t0
            for name, pid in self.pids.items():
                s = read_rss_kb(pid)
                if s:
                    self.samples[name].append((round(t, 2), s["VmRSS"], s.get("RssAnon", 0), s.get("RssFile", 0)))
            tick += self.period_s
            self._halt.wait(max(0.0, tick - time.monotonic()))

    def stop(self) -> None:
        self._halt.set()
        self.join(5)


def slope_mb_min(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, KiB) points, in MB per minute."""
    if len(points) < 2:
        return 0.0
    mt = statistics.fmean(t for t, _ in points)
    mv = statistics.fmean(v for _, v in points)
    den = sum((t - mt) ** 2 for t, _ in points)
    if den == 0:
        return 0.0
    return sum((t - mt) * (v - mv) for t, v in points) / den * 60 / 1024


def trend(samples: list[tuple], warmup_s: float, column: int = 1) -> dict:
    """RSS after the warm-up of one service: `column` 1 = VmRSS, 2 = RssAnon, 3 = RssFile.

    start / end are the medians of the first and last tenth (at least 3 samples) after
    the warm-up; quarters the medians of the first and last quarter (the CI check)."""
    post = [(s[0], s[column]) for s in samples if s[0] >= warmup_s]
    if len(post) < 4:
        return {"samples": len(post)}
    tenth, quarter = max(3, len(post) // 10), max(1, len(post) // 4)
    mb = lambda kb: round(kb / 1024, 1)  # noqa: E731
    start = statistics.median(v for _, v in post[:tenth])
    end = statistics.median(v for _, v in post[-tenth:])
    q1 = statistics.median(v for _, v in post[:quarter])
    q4 = statistics.median(v for _, v in post[-quarter:])
    return {"samples": len(post), "first_mb": mb(samples[0][column]), "warm_mb": mb(start), "end_mb": mb(end),
            "max_mb": mb(max(v for _, v in post)), "first_quarter_mb": mb(q1), "last_quarter_mb": mb(q4),
            "growth_pct": round((end / start - 1) * 100, 1) if start else 0.0,
            "slope_mb_min": round(slope_mb_min(post), 3),
            "within_15pct": end <= start * (1 + GROWTH_LIMIT)}


def analyze(samples: dict[str, list[tuple]], warmup_s: float) -> dict:
    return {name: {"rss": trend(s, warmup_s, 1), "anon": trend(s, warmup_s, 2), "file": trend(s, warmup_s, 3)}
            for name, s in samples.items()}


# ---- what was acked and what was consumed ---------------------------------------------------------

class Ledger:
    """Acked and consumed messages, per queue offset in bit-per-offset arrays (plain messages) and by
    key (delayed and committed transactional ones, which the broker stores elsewhere first)."""

    def __init__(self, groups: list[str]):
        self.lock = threading.Lock()
        self.acked = [bytearray() for _ in range(QUEUES)]
        self.acked_sql = [bytearray() for _ in range(QUEUES)]
        self.consumed = {g: [bytearray() for _ in range(QUEUES)] for g in groups}
        self.keyed: set[str] = set()           # delayed + committed transactions, acked
        self.rolled_back: set[str] = set()
        self.keyed_seen = {g: set() for g in groups}
        self.deliveries = dict.fromkeys(groups, 0)
        self.send_errors = 0
        self.sent = 0

    @staticmethod
    def _mark(arrays: list[bytearray], queue_id: int, offset: int) -> None:
        a = arrays[queue_id]
        if offset >= len(a):
            a.extend(bytes(offset + 1 - len(a) + 4096))
        a[offset] = 1

    def ack(self, queue_id: int, offset: int, sql: bool) -> None:
        with self.lock:
            self._mark(self.acked, queue_id, offset)
            if sql:
                self._mark(self.acked_sql, queue_id, offset)

    def count(self, name: str) -> None:
        with self.lock:
            setattr(self, name, getattr(self, name) + 1)

    def ack_key(self, key: str) -> None:
        with self.lock:
            self.keyed.add(key)

    def consumed_batch(self, group: str, msgs) -> None:
        with self.lock:
            self.deliveries[group] += len(msgs)
            arrays, seen = self.consumed[group], self.keyed_seen[group]
            for m in msgs:
                if m.topic != TOPIC:
                    continue
                self._mark(arrays, m.queue_id, m.queue_offset)
                kind = m.properties.get("kind")
                if kind:
                    seen.add(m.keys[0] if m.keys else "")

    def missing(self, group: str, sql: bool = False) -> dict:
        """Acked but never consumed by `group` (the SQL group owes the matching plain messages only)."""
        with self.lock:
            lost = 0
            for q in range(QUEUES):
                want, got = (self.acked_sql if sql else self.acked)[q], self.consumed[group][q]
                for off, a in enumerate(want):
                    if a and (off >= len(got) or not got[off]):
                        lost += 1
            keyed = 0 if sql else len(self.keyed - self.keyed_seen[group])
            rolled = 0 if sql else len(self.rolled_back & self.keyed_seen[group])
            return {"plain": lost, "keyed": keyed, "rolled_back_delivered": rolled}

    def acked_counts(self) -> dict:
        with self.lock:
            return {"plain": sum(sum(a) for a in self.acked), "sql_matching": sum(sum(a) for a in self.acked_sql),
                    "delayed_and_committed": len(self.keyed), "rolled_back": len(self.rolled_back)}


# ---- the load ---------------------------------------------------------------------------------------

class Load:
    """Producers and consumers of one soak (threads of this process, one client each)."""

    GROUPS = ["soak-push", "soak-pull", "soak-sql"]

    def __init__(self, namesrv: str, shape: Shape = Shape()):
        self.namesrv = namesrv
        self.shape = shape
        self.ledger = Ledger(self.GROUPS)
        self.stop_producing = threading.Event()
        self.stop_consuming = threading.Event()
        self.idle = threading.Semaphore(0)     # released by each producer once its sends are answered
        self.threads: list[threading.Thread] = []
        self.clients: list = []
        self.errors: list[str] = []

    # producers
    def _producer(self, w: int) -> None:
        s = self.shape
        per_tick = s.rate_msgs_s / s.producers / s.ticks_s
        window = threading.BoundedSemaphore(s.window)
        body = bytes([65 + w]) * s.body_bytes
        with TransactionProducer(f"soak-pg{w}", namesrv=self.namesrv, checker=self._check) as p:
            self.clients.append(p)
            t0 = next_tick = time.monotonic()
            next_txn = t0 + s.txn_interval_s * (w + 1) / s.producers
            i, owed = 0, 0.0
            while not self.stop_producing.is_set():
                owed += per_tick
                while owed >= 1:
                    owed -= 1
                    i += 1
                    if not window.acquire(timeout=30):
                        self.errors.append(f"producer {w}: 30 s without a free send slot")
                        return
                    self._send_one(p, w, i, body, window)
                now = time.monotonic()
                if now >= next_txn:
                    next_txn += s.txn_interval_s
                    self._transaction(p, w, i, body)
                next_tick += 1 / s.ticks_s
                if next_tick < now - 1.0:           # over a second behind: do not burst to catch up
                    next_tick = now
                self.stop_producing.wait(max(0.0, next_tick - time.monotonic()))
            for _ in range(s.window):               # every send answered
                window.acquire(timeout=30)
            self.idle.release()
            self.stop_consuming.wait()              # still here to answer the check-backs of UNKNOWN ones

    def _send_one(self, p, w: int, i: int, body: bytes, window) -> None:
        s, ledger = self.shape, self.ledger
        key = f"p{w}-{i}"
        if i % s.delay_every == 0:
            kind = i // s.delay_every % 3
            msg = Message(TOPIC, body, tags="Delayed", keys=[key], properties={"kind": "delay", "n": "9"})
            if kind == 2:
                msg.deliver_at = int(time.time() * 1000) + 1500
            else:
                msg.delay_level = kind + 1      # 1 s, 5 s
        else:
            keys = [key] if i % s.key_every == 0 else None
            msg = Message(TOPIC, body, tags=f"Tag{'ABC'[i % 3]}", keys=keys, properties={"n": str(i % 10)})
        matches = msg.properties.get("kind") is None and i % 10 < 2

        def done(f, key=key, delayed=msg.properties.get("kind") is not None):
            window.release()
            try:
                r = f.result()
            except Exception:
                ledger.count("send_errors")
                return
            if r.status is not SendStatus.SEND_OK:
                ledger.count("send_errors")
            elif delayed:
                ledger.ack_key(key)
            else:
                ledger.ack(r.queue_id, r.queue_offset, matches)
        ledger.count("sent")
        p.send_async(msg, done)

    def _transaction(self, p, w: int, i: int, body: bytes) -> None:
        key = f"tx{w}-{i}"
        choice = i % 6
        state = (TransactionState.ROLLBACK if choice == 0 else
                 TransactionState.UNKNOWN if choice in (1, 2) else TransactionState.COMMIT)
        msg = Message(TOPIC, body, tags="Tx", keys=[key], properties={"kind": "txn", "n": "9", "fate": state.value})
        try:
            r = p.send_in_transaction(msg, lambda m, a: state)
        except QuiverError:
            self.ledger.count("send_errors")
            return
        if r.status is SendStatus.SEND_OK:
            with self.ledger.lock:
                (self.ledger.rolled_back if state is TransactionState.ROLLBACK else self.ledger.keyed).add(key)

    @staticmethod
    def _check(msg) -> TransactionState:
        # the check-back: UNKNOWN ones were meant to commit
        return TransactionState.COMMIT

    # consumers
    def _push(self, n: int) -> None:
        c = PushConsumer("soak-push", namesrv=self.namesrv, consume_from="first", threads=4, batch_size=16)
        c.subscribe(TOPIC, "*")

        def listener(msgs):
            self.ledger.consumed_batch("soak-push", msgs)
            return ConsumeResult.SUCCESS
        c.register(listener)
        c.start()
        self.clients.append(c)
        self.stop_consuming.wait()
        c.shutdown()

    def _pull(self, group: str, selector) -> None:
        with PullConsumer(group, namesrv=self.namesrv, consume_from="first", pull_batch_size=64) as c:
            self.clients.append(c)
            c.subscribe(TOPIC, selector)
            while not self.stop_consuming.is_set():
                msgs = c.poll(0.5)
                if msgs:
                    self.ledger.consumed_batch(group, msgs)

    def _spawn(self, name: str, fn, *args) -> None:
        def guarded():
            try:
                fn(*args)
            except Exception as exc:  # a dead load thread must show in the report, not just in stderr
                self.errors.append(f"{name}: {type(exc).__name__}: {exc}")
        t = threading.Thread(target=guarded, name=name, daemon=True)
        t.start()
        self.threads.append(t)

    def start(self) -> None:
        self._spawn("push-0", self._push, 0)
        self._spawn("push-1", self._push, 1)
        self._spawn("pull", self._pull, "soak-pull", "*")
        self._spawn("sql", self._pull, "soak-sql", MessageSelector.sql(SQL))
        for w in range(self.shape.producers):
            self._spawn(f"producer-{w}", self._producer, w)

    def drain(self, timeout_s: float) -> dict:
        """Stop producing; wait until every group has everything acked (or the deadline). Missing per group."""
        self.stop_producing.set()
        deadline = time.monotonic() + timeout_s
        for _ in range(self.shape.producers):
            self.idle.acquire(timeout=max(0.0, deadline - time.monotonic()))
        while True:
            missing = self.missing()
            if not any(sum(m.values()) for m in missing.values()) or time.monotonic() > deadline:
                return missing
            time.sleep(1.0)

    def missing(self) -> dict:
        return {g: self.ledger.missing(g, sql=g == "soak-sql") for g in self.GROUPS}

    def stop(self) -> None:
        self.stop_producing.set()
        self.stop_consuming.set()
        for t in self.threads:
            t.join(30)


# ---- one run -------------------------------------------------------------------------------------------

def services_of(cluster: LocalCluster) -> dict[str, int]:
    return {s.name: s.pid for s in cluster.services}


def run(cluster: LocalCluster, seconds: float, warmup_s: float, sample_s: float = 2.0, shape: Shape = Shape(),
        progress=None) -> dict:
    """Load `cluster` for `seconds`, sampling RSS; then drain and analyze. The cluster is the caller's."""
    sampler = RssSampler(services_of(cluster), sample_s)
    load = Load(cluster.namesrv, shape)
    sampler.start()
    load.start()
    t_end = time.monotonic() + seconds
    try:
        while time.monotonic() < t_end:
            time.sleep(min(10.0, max(0.0, t_end - time.monotonic())))
            if progress:
                progress(sampler, load)
        sampler.stop()
        elapsed = time.monotonic() - sampler.t0
        missing = load.drain(60)
    finally:
        sampler.stop()
        load.stop()
    dead = [s.name for s in cluster.services if not s.alive()]
    return {"seconds": round(elapsed, 1), "warmup_s": warmup_s, "sample_s": sample_s, "shape": asdict(shape),
            "sent": load.ledger.sent, "send_errors": load.ledger.send_errors, "acked": load.ledger.acked_counts(),
            "achieved_msgs_s": round(load.ledger.sent / elapsed), "deliveries": dict(load.ledger.deliveries),
            "missing": missing, "load_errors": load.errors, "dead_services": dead,
            "services": analyze(sampler.samples, warmup_s), "samples": sampler.samples}


def lost(doc: dict) -> int:
    return sum(sum(m.values()) for m in doc["missing"].values())


# ---- report -----------------------------------------------------------------------------------------------

def table(doc: dict) -> str:
    rows = ["| service | RSS first (MB) | warm-up end | end | max | growth | slope (MB/min) | anon warm -> end "
            "| anon slope | file warm -> end | within +15 % |", "|---|" + "---:|" * 9 + "---|"]
    for name, a in doc["services"].items():
        r, an, fi = a["rss"], a["anon"], a["file"]
        if "warm_mb" not in r:
            rows.append(f"| {name} | (too few samples) |" + " |" * 9)
            continue
        rows.append(f"| {name} | {r['first_mb']} | {r['warm_mb']} | {r['end_mb']} | {r['max_mb']} "
                    f"| {r['growth_pct']:+.1f} % | {r['slope_mb_min']:+.2f} | {an['warm_mb']} -> {an['end_mb']} "
                    f"| {an['slope_mb_min']:+.2f} | {fi['warm_mb']} -> {fi['end_mb']} "
                    f"| {'yes' if r['within_15pct'] else 'NO'} |")
    return "\n".join(rows)


def summary(doc: dict) -> str:
    a = doc["acked"]
    return (f"{doc['seconds']:.0f} s at {doc['achieved_msgs_s']} msg/s sent ({doc['sent']} sent, "
            f"{doc['send_errors']} send errors); acked {a['plain']} plain ({a['sql_matching']} SQL-matching), "
            f"{a['delayed_and_committed']} delayed + committed, {a['rolled_back']} rolled back; "
            f"deliveries {doc['deliveries']}; missing {doc['missing']}; load errors {doc['load_errors'] or 'none'}; "
            f"services down {doc['dead_services'] or 'none'}")


def _interrupt(signum, frame):
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--rate", type=int, default=Shape.rate_msgs_s, help="messages per second, all producers")
    ap.add_argument("--warmup", type=float, default=0.2, help="share of the run before RSS is judged (0.2)")
    ap.add_argument("--sample-s", type=float, default=2.0, help="RSS sampling period (2 s)")
    ap.add_argument("--keep", action="store_true", help="keep the data dir (logs) after the run")
    ap.add_argument("--out", default=RESULTS, help="directory of soak-<date>.json (bench/results)")
    args = ap.parse_args(argv)
    seconds = args.minutes * 60
    shape = Shape(rate_msgs_s=args.rate)
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    data = tempfile.mkdtemp(prefix="quiver-soak-")
    now = datetime.datetime.now()
    cluster = None
    try:
        cluster = local_cluster(data)
        wait_healthy(cluster.services)

        def progress(sampler, load):
            t = time.monotonic() - sampler.t0
            last = {n: f"{s[-1][1] / 1024:.0f}/{s[-1][2] / 1024:.0f}" for n, s in sampler.samples.items() if s}
            print(f"{t:6.0f} s  sent {load.ledger.sent:>9,}  RSS/anon MB {last}", file=sys.stderr, flush=True)
        doc = run(cluster, seconds, seconds * args.warmup, args.sample_s, shape, progress)
    except KeyboardInterrupt:
        print("\ninterrupted: every service started has been stopped", file=sys.stderr)
        return 130
    finally:
        if cluster is not None:
            cluster.stop()
        if not args.keep:
            import shutil
            shutil.rmtree(data, ignore_errors=True)
        else:
            print(f"data and logs kept in {data}", file=sys.stderr)
    doc = {"meta": {"date": now.strftime("%Y-%m-%d %H:%M"), "machine": f"{os.cpu_count()} cores",
                    "command": "python -m bench.soak " + " ".join(argv if argv is not None else sys.argv[1:])},
           **doc}
    print("\n" + table(doc) + "\n\n" + summary(doc))
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"soak-{now.strftime('%Y-%m-%d-%H%M')}.json")
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"wrote {path}")
    ok = lost(doc) == 0 and not doc["dead_services"] and all(a["rss"].get("within_15pct") for a in doc["services"].values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
