"""SQL92 filter benchmark: engine evaluations/s and end-to-end filtered consume.

    python -m bench.filter [--messages 50000] [--evals 300000] [--quick]

Engine: `a > 5 AND b = 'x' OR c BETWEEN 1 AND 10` over realistic property maps
(user properties plus TAGS, KEYS, UNIQ_KEY), one core; also the filter
server's per-record path (decode the properties of a stored record + match).
End to end (one run, loopback): the same stored messages consumed by a plain
pull consumer ("*", from the broker) and by one selecting ~10 % through a
filter server, in messages scanned per second (queue offsets passed / s).
Targets: >= 300k evaluations/s; filtered >= 0.5x plain. Writes
bench/results/filter-<date>.json.
"""

import argparse
import datetime
import json
import os
import random
import tempfile
import time

from quiver import Admin, Message, MessageSelector, Producer, PullConsumer
from quiver.wire import record
from quiver.wire.property_string import format_properties
from quiver.tools.local import LocalCluster, wait_healthy
from quiver_filter import sql92
from quiver_filter.scanning import scan

EXPR = "a > 5 AND b = 'x' OR c BETWEEN 1 AND 10"
SELECT_10 = "pick = 'yes' AND region IS NOT NULL"


def _props(rng: random.Random, i: int) -> dict:
    return {"a": str(rng.randint(0, 10)), "b": rng.choice("xyz"), "c": str(rng.randint(0, 40)),
            "region": rng.choice(["eu", "us", "ap"]), "amount": f"{rng.uniform(0, 999):.2f}",
            "TAGS": rng.choice(["TagA", "TagB"]), "KEYS": f"order-{i}", "UNIQ_KEY": f"{i:032X}"}


def engine(n: int) -> dict:
    rng = random.Random(7)
    maps = [_props(rng, i) for i in range(1000)]
    sel = sql92.compile(EXPR)
    matches = sel.matches
    best = 0.0
    hits = evals = 0
    for _ in range(3):
        rounds = max(1, n // len(maps))
        t0 = time.perf_counter()
        for _ in range(rounds):
            for p in maps:
                if matches(p):
                    hits += 1
        best = max(best, rounds * len(maps) / (time.perf_counter() - t0))
        evals += rounds * len(maps)
    # the filter server's per-record path: properties decoded from stored bytes + match
    recs = b"".join(record.encode(b"x" * 256, topic=b"Bench", props=format_properties(p).encode(), queue_offset=i,
                                  phys_offset=i, born_ts=1, store_ts=2) for i, p in enumerate(maps))
    t0 = time.perf_counter()
    rounds = max(1, n // len(maps) // 2)
    for _ in range(rounds):
        scan(recs, matches, 1 << 30, 1 << 40)
    per_record = rounds * len(maps) / (time.perf_counter() - t0)
    return {"expression": EXPR, "evaluations_per_s": round(best), "match_rate": round(hits / evals, 3),
            "scan_records_per_s": round(per_record)}


def _consume(namesrv: str, group: str, topic: str, selector, want: int, batch: int, timeout: float) -> tuple[int, float]:
    with PullConsumer(group, namesrv=namesrv, consume_from="first", pull_batch_size=batch,
                      auto_commit=False) as c:
        c.subscribe(topic, selector)
        got, t0 = 0, time.perf_counter()
        deadline = time.monotonic() + timeout
        while got < want and time.monotonic() < deadline:
            got += len(c.poll(0.2))
        return got, time.perf_counter() - t0


def end_to_end(n: int, batch: int) -> dict:
    tmp = tempfile.mkdtemp(prefix="quiver-bench-filter-")
    cluster = LocalCluster(tmp)
    try:
        cluster.add_namesrv()
        cluster.wait()
        cluster.add_broker(None, None, "--flush", "async")
        cluster.wait()
        cluster.wait_registered(1)
        admin = Admin(namesrv=cluster.namesrv)
        admin.create_topic("BenchFilter", queues=4)
        filt = cluster.add_service("filter", "quiver_filter", "--register-interval-ms", "1000", data=False)
        wait_healthy([filt])
        deadline = time.monotonic() + 15
        while not admin.topic_route("BenchFilter").get("filter_servers"):
            if time.monotonic() > deadline:
                raise RuntimeError("filter server not in the route")
            time.sleep(0.1)
        rng = random.Random(11)
        sel = sql92.compile(SELECT_10)
        expected = 0
        t0 = time.perf_counter()
        with Producer("bench-filter", namesrv=cluster.namesrv) as p:
            futs = []
            for i in range(n):
                props = _props(rng, i)
                props["pick"] = "yes" if rng.random() < 0.10 else "no"
                tags = props.pop("TAGS")
                del props["KEYS"], props["UNIQ_KEY"]
                expected += sel.matches(props)
                futs.append(p.send_async(Message("BenchFilter", b"x" * 256, tags=tags, keys=[f"order-{i}"],
                                                 properties=props)))
            for f in futs:
                f.result(60)
        produce_s = time.perf_counter() - t0
        plain_got, plain_s = _consume(cluster.namesrv, "bench-plain", "BenchFilter", "*", n, batch, 120)
        sql_got, sql_s = _consume(cluster.namesrv, "bench-sql", "BenchFilter", MessageSelector.sql(SELECT_10),
                                  expected, batch, 120)
        status = admin.status(filt.addr)
        admin.shutdown()
        plain_rate, sql_rate = n / plain_s, n / sql_s
        return {"messages": n, "pull_batch_size": batch, "selected": expected, "produce_msgs_per_s": round(n / produce_s),
                "plain": {"received": plain_got, "seconds": round(plain_s, 2), "scanned_per_s": round(plain_rate)},
                "filtered": {"received": sql_got, "seconds": round(sql_s, 2), "scanned_per_s": round(sql_rate),
                             "delivered_per_s": round(sql_got / sql_s),
                             "filter_server_counters": status.get("counters", {})},
                "ratio": round(sql_rate / plain_rate, 2)}
    finally:
        cluster.stop()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=50_000)
    ap.add_argument("--evals", type=int, default=300_000)
    ap.add_argument("--batch", type=int, default=32, help="pull batch size of both consumers")
    ap.add_argument("--quick", action="store_true", help="10k messages, 100k evaluations")
    args = ap.parse_args(argv)
    if args.quick:
        args.messages, args.evals = 10_000, 100_000
    eng = engine(args.evals)
    print(f"engine   {eng['evaluations_per_s']:>10,} evaluations/s   (target >= 300,000)  {EXPR}")
    print(f"scan     {eng['scan_records_per_s']:>10,} records/s       (properties decoded from stored bytes + match)")
    e2e = end_to_end(args.messages, args.batch)
    print(f"plain    {e2e['plain']['scanned_per_s']:>10,} msgs scanned/s ({e2e['plain']['received']} received)")
    print(f"filtered {e2e['filtered']['scanned_per_s']:>10,} msgs scanned/s ({e2e['filtered']['received']} of "
          f"{e2e['selected']} selected received)")
    print(f"ratio    {e2e['ratio']:>10} x                (target >= 0.5)")
    stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M")
    os.makedirs(os.path.join(os.path.dirname(__file__), "results"), exist_ok=True)
    path = os.path.join(os.path.dirname(__file__), "results", f"filter-{stamp}.json")
    with open(path, "w") as f:
        json.dump({"engine": eng, "end_to_end": e2e}, f, indent=2)
    print(f"written {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
