"""The classic bank transfer with a transactional message: debit in bank A, credit in bank B.

    python examples/bank_transfer.py                       # own local cluster + SQLite files
    python examples/bank_transfer.py --namesrv 127.0.0.1:9876 \\
        --db-a postgresql+psycopg://u@h/bank_a --db-b postgresql+psycopg://u@h/bank_b

Bank A's debit and the message are "both or neither": the debit runs as the
local transaction of `send_in_transaction` through quiver.client.transaction
(SqlTransaction writes the transaction id into quiver_tx_log in the same
database transaction; its checker answers check-backs from that row). Bank B
credits from a PullConsumer, idempotently: the transfer key goes into a
`processed` table in the same database transaction as the credit, so a
message delivered twice credits once. Workers (subprocesses) crash at random
(os._exit, no cleanup) before or after their database commit; the txn-checker
asks a surviving producer of the group, and the sum of all balances is the
same at the end.
"""

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time

from sqlalchemy import BigInteger, Column, MetaData, String, Table, create_engine, event, func, select, update
from sqlalchemy.exc import IntegrityError

GROUP = "bank-transfer"
TOPIC = "Transfers"
ACCOUNTS = 10
START_BALANCE = 10_000

_meta = MetaData()
accounts = Table("accounts", _meta, Column("id", String(16), primary_key=True),
                 Column("balance", BigInteger, nullable=False))
processed = Table("processed", _meta, Column("msg_key", String(64), primary_key=True))


def engine(url: str):
    eng = create_engine(url, future=True)
    if url.startswith("sqlite"):
        @event.listens_for(eng, "connect")
        def _pragmas(conn, _):
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA busy_timeout=10000")
            conn.execute("PRAGMA synchronous=NORMAL")  # WAL: durable enough for a demo, no fsync per commit
    return eng


def setup(db_a: str, db_b: str) -> int:
    """Fresh accounts in both banks; returns the total money."""
    for url, prefix in ((db_a, "a"), (db_b, "b")):
        eng = engine(url)
        _meta.drop_all(eng)
        _meta.create_all(eng)
        with eng.begin() as conn:
            conn.execute(accounts.insert(), [{"id": f"{prefix}{i}", "balance": START_BALANCE} for i in range(ACCOUNTS)])
        eng.dispose()
    return 2 * ACCOUNTS * START_BALANCE


def total(url: str) -> int:
    eng = engine(url)
    with eng.connect() as conn:
        n = conn.execute(select(func.sum(accounts.c.balance))).scalar() or 0
    eng.dispose()
    return int(n)


def transfer_of(i: int) -> dict:
    return {"id": f"t{i}", "from": f"a{i % ACCOUNTS}", "to": f"b{(i * 7) % ACCOUNTS}", "amount": 1 + i % 50}


def debit(session, msg, arg):
    t = json.loads(msg.body)
    session.execute(update(accounts).where(accounts.c.id == t["from"]).values(balance=accounts.c.balance - t["amount"]))
    if arg and arg.get("crash") == "before-commit":
        os._exit(3)  # the database transaction dies with us: nothing was debited


def producer(namesrv: str, db_a: str):
    from quiver import TransactionProducer
    from quiver.client.transaction import SqlTransaction
    tx = SqlTransaction(engine(db_a), debit, rollback_after_ms=3_000)
    return TransactionProducer(GROUP, namesrv=namesrv, checker=tx.checker, heartbeat_interval_s=1.0), tx


def worker(namesrv: str, db_a: str, start: int, end: int, crash_rate: float, seed: int, progress: str) -> None:
    """Send transfers start..end-1; may crash (os._exit) anywhere around the database commit."""
    from quiver import Message
    rng = random.Random(seed)
    tp, tx = producer(namesrv, db_a)
    tp.start()

    def execute(msg, arg):
        state = tx.execute(msg, arg)
        if arg.get("crash") == "after-commit":
            os._exit(4)  # debited and logged, but END_TRANSACTION never sent: the checker commits it
        return state
    with open(progress, "a") as prog:
        for i in range(start, end):
            prog.write(f"{i}\n")
            prog.flush()
            crash = None
            if rng.random() < crash_rate:
                crash = rng.choice(["before-commit", "after-commit", "after-half"])
            t = transfer_of(i)
            msg = Message(TOPIC, json.dumps(t).encode(), keys=[t["id"]])
            if crash == "after-half":
                tp.send_in_transaction(msg, lambda m, a: os._exit(5), {})
            tp.send_in_transaction(msg, execute, {"crash": crash})
    tp.shutdown()


def run_workers(namesrv: str, db_a: str, transfers: int, crash_rate: float, progress: str, seed: int = 1) -> int:
    """Workers one after another until every transfer was attempted; returns the number of crashes."""
    crashes, start = 0, 0
    while start < transfers:
        subprocess.run([sys.executable, __file__, "worker", "--namesrv", namesrv, "--db-a", db_a,
                        "--start", str(start), "--end", str(transfers), "--crash-rate", str(crash_rate),
                        "--seed", str(seed + start), "--progress", progress], check=False, timeout=600)
        with open(progress) as f:
            done = [int(x) for x in f.read().split()]
        last = max(done) if done else start - 1
        if last + 1 < transfers:
            crashes += 1
        start = last + 1  # the attempt that crashed is left to the checker
    return crashes


def credit_all(namesrv: str, db_b: str, idle_s: float = 2.0, deadline_s: float = 120.0, open_fn=None) -> int:
    """Apply every transfer message to bank B, once per key; stops when idle and nothing is open."""
    from quiver import PullConsumer
    eng = engine(db_b)
    applied = 0
    with PullConsumer("bank-credit", namesrv=namesrv, consume_from="first") as pc:
        pc.subscribe(TOPIC)
        deadline = time.monotonic() + deadline_s
        last = time.monotonic()
        while time.monotonic() < deadline:
            msgs = pc.poll(0.3)
            for m in msgs:
                t = json.loads(m.body)
                try:
                    with eng.begin() as conn:
                        conn.execute(processed.insert().values(msg_key=m.keys[0]))
                        conn.execute(update(accounts).where(accounts.c.id == t["to"])
                                     .values(balance=accounts.c.balance + t["amount"]))
                    applied += 1
                except IntegrityError:
                    pass  # delivered twice: credited once
            if msgs:
                last = time.monotonic()
                pc.commit()
            elif time.monotonic() - last > idle_s and (open_fn is None or open_fn() == 0):
                break
    eng.dispose()
    return applied


def run(namesrv: str, db_a: str, db_b: str, transfers: int = 1000, crash_rate: float = 0.02,
        workdir: str | None = None) -> dict:
    from quiver import Admin
    workdir = workdir or tempfile.mkdtemp(prefix="bank-")
    money = setup(db_a, db_b)
    admin = Admin(namesrv=namesrv)
    try:
        admin.create_topic(TOPIC, queues=4)
        progress = os.path.join(workdir, "progress")
        open(progress, "w").close()
        t0 = time.monotonic()
        crashes = run_workers(namesrv, db_a, transfers, crash_rate, progress)
        tp, _ = producer(namesrv, db_a)  # a live member of the group answers the checks of crashed ones
        with tp:
            open_fn = lambda: sum(map(len, admin.open_transactions().values()))  # noqa: E731
            applied = credit_all(namesrv, db_b, open_fn=open_fn)
            still_open = open_fn()
        a, b = total(db_a), total(db_b)
    finally:
        admin.shutdown()
    return {"transfers": transfers, "crashes": crashes, "credited": applied, "open": still_open,
            "bank_a": a, "bank_b": b, "sum": a + b, "expected_sum": money,
            "seconds": round(time.monotonic() - t0, 1)}


def _local_cluster(data_dir: str):
    from quiver.tools.local import LocalCluster
    c = LocalCluster(data_dir)
    c.add_namesrv()
    c.wait()
    c.add_broker()
    c.wait()
    c.wait_registered(1)
    c.add_service("txn-checker", "quiver_txn", "--check-interval-ms", "500", "--transaction-timeout-ms", "1000")
    c.wait()
    return c


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("mode", nargs="?", default="run", choices=["run", "worker"])
    p.add_argument("--namesrv", help="a running cluster (with a txn-checker); default: start one locally")
    p.add_argument("--db-a")
    p.add_argument("--db-b")
    p.add_argument("--transfers", type=int, default=1000)
    p.add_argument("--crash-rate", type=float, default=0.02)
    p.add_argument("--start", type=int, default=0)
    p.add_argument("--end", type=int, default=0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--progress")
    args = p.parse_args(argv)
    if args.mode == "worker":
        worker(args.namesrv, args.db_a, args.start, args.end, args.crash_rate, args.seed, args.progress)
        return 0
    work = tempfile.mkdtemp(prefix="bank-")
    db_a = args.db_a or f"sqlite:///{os.path.join(work, 'bank_a.db')}"
    db_b = args.db_b or f"sqlite:///{os.path.join(work, 'bank_b.db')}"
    cluster = None if args.namesrv else _local_cluster(os.path.join(work, "cluster"))
    try:
        out = run(args.namesrv or cluster.namesrv, db_a, db_b, args.transfers, args.crash_rate, work)
    finally:
        if cluster is not None:
            cluster.stop()
    print(json.dumps(out))
    return 0 if out["sum"] == out["expected_sum"] and out["open"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
