"""A message's timeline, hop by hop: where a sync send's and an e2e message's time goes, at p50 and p99.

    python -m bench.hops                                   # 6000 messages at 2k msg/s, push consumer
    python -m bench.hops --messages 20000 --consumer pull  # as `python -m bench`'s e2e consumer
    python -m bench.hops --messages 200 --no-floor         # a smoke run
    python -m bench.hops --probe-broker                    # plus the broker's service-thread tasks (bench.broker_probe)

One name server and one broker (ASYNC flush) on loopback; a Producer here sends 1 KiB
messages with send() paced at --rate (base.paced_runs, as `python -m bench`'s e2e does); the
consumer runs in another process (bench.hops_listener; --consumer push, push-inline, pull or
pull-direct). Per message, the points known without instrumenting Quiver:

    send      time.time() as send() is called (this process)
    born      its born_timestamp: epoch ms the client stamped while building the request
    stored    its store_timestamp: epoch ms the broker stamped while appending it
    replied   time.time() as send() returned (this process)
    consumed  time.time() as the listener (or poll) got it (the consumer's process)

Clocks: one host, time.time() (CLOCK_REALTIME) in every process; born and stored are the
same clock truncated to the millisecond by the client and the broker. So send -> replied and
send -> consumed are exact to a few µs, while a hop that starts or ends at a millisecond
stamp takes it at the middle of its millisecond (+500 µs) and is good to ±500 µs (born ->
stored, two such stamps: ±1 ms). Then each hop's p50/p99, the timelines of the slowest 1%
(by e2e) and which hop made them slow: the one furthest above its own p50. With the floor
(bare pyzmq, bench.peers.floor) of the same run, the ratios to it. Writes
bench/results/hops-<date>.json.
"""

import argparse
import bisect
import datetime
import json
import os
import select
import subprocess
import sys
import tempfile
import time

from quiver import Admin, Message, Producer

from bench import broker_probe
from bench.hops_listener import GcPauses, Stalls, switches
from bench.peers import base

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
BODY = b"x" * 1024
QUEUES = 4
MODES = ("push", "push-inline", "pull", "pull-direct")
MID_MS = 0.0005   # a millisecond stamp stands for the middle of its millisecond

# (hop, from, to): points are seconds, "born" and "stored" already moved to their middles
HOPS = [
    ("sync send: send -> replied", "send", "replied"),
    ("e2e: send -> consumed", "send", "consumed"),
    ("to the store: send -> stored", "send", "stored"),
    ("reply back: stored -> replied", "stored", "replied"),
    ("delivery: stored -> consumed", "stored", "consumed"),
    ("born -> stored (ms stamps both)", "born", "stored"),
]
# known when the consumer's pulls are timed (bench.hops_listener.watch_pulls): delivery in two
PULL_HOPS = [
    ("delivery, to the consumer's IO thread: stored -> its pull answered", "stored", "pull_answered"),
    ("delivery, in the consumer: pull answered -> consumed", "pull_answered", "consumed"),
]
# the hops a slow message's excess is looked for in: (slow by, [its parts])
SPLITS = {"e2e": ("e2e: send -> consumed", ["to the store: send -> stored", "delivery: stored -> consumed"]),
          "sync": ("sync send: send -> replied", ["to the store: send -> stored", "reply back: stored -> replied"])}


def _ready(child: subprocess.Popen, producer: Producer, topic: str, timeout_s: float = 60.0) -> None:
    """Warm-up sends (i = -1) until the consumer has one from every queue: all queues owned and pulled."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        producer.send(Message(topic, BODY, properties={"i": "-1"}))
        r, _, _ = select.select([child.stdout], [], [], 0.02)
        if r:
            line = child.stdout.readline().strip()
            if line == "ready":
                return
            raise RuntimeError(f"hops consumer said {line!r}")
    raise RuntimeError("hops consumer did not get a message from every queue in time")


def run_quiver(n: int, rate: int, mode: str, data_dir: str, work_us: int = 0) -> dict:
    """The raw points of n messages: {"points": {i: {point: seconds}}, "threads", "rate_done"}."""
    cluster = base.one_broker(data_dir, "--flush", "async")
    try:
        admin = Admin(namesrv=cluster.namesrv)
        admin.create_topic("Hops", queues=QUEUES)
        admin.shutdown()
        seconds = n / rate + 30
        child = subprocess.Popen([sys.executable, "-m", "bench.hops_listener", cluster.namesrv, "Hops", str(QUEUES),
                                  str(n), str(seconds + 60), mode, str(work_us)], stdout=subprocess.PIPE, text=True,
                                 cwd=base.ROOT, start_new_session=True)
        try:
            with Producer("hops", namesrv=cluster.namesrv) as p:
                _ready(child, p, "Hops")
                pauses, stalls, before = GcPauses(), Stalls(), switches()
                sent: dict[int, tuple[float, float]] = {}
                counter = iter(range(n))

                def send_many(k: int) -> None:
                    for _ in range(k):
                        i = next(counter)
                        t0 = time.time()
                        p.send(Message("Hops", BODY, properties={"i": str(i)}))
                        sent[i] = (t0, time.time())
                t0 = time.perf_counter()
                base.paced_runs(rate, n, send_many)
                rate_done = n / (time.perf_counter() - t0)
                gc_producer, stalls_producer, after = pauses.close(), stalls.close(), switches()
            out = json.loads(child.stdout.readline())
        finally:
            base.stop(child)
    finally:
        cluster.stop()
    points = {}
    for i, t, born_ms, store_ms, qid in out["seen"]:
        if i in sent:
            points[i] = {"send": sent[i][0], "replied": sent[i][1], "consumed": t,
                         "born": born_ms / 1000 + MID_MS, "stored": store_ms / 1000 + MID_MS, "queue": qid}
    _match_pulls(points, out["pulls"])
    gaps = pull_gaps(out["pulls"])
    procs = {"producer": {"gc": gc_producer, "stalls": stalls_producer,
                          "rusage": {k: after[k] - before[k] for k in after}},
             "consumer": {"gc": out["gc"], "stalls": out["stalls"], "rusage": out["rusage"]}}
    return {"points": points, "threads": out["threads"], "rate_done": rate_done, "sent": len(sent), "procs": procs,
            "pull_gaps": gaps, "pulls": out["pulls"]}


def pull_gaps(pulls: list) -> dict | None:
    """Per queue, each pull's answer -> that queue's next pull sent (the time no pull of the
    queue is at the broker, less the trip there): p50/p99/p99.9 (µs), and how many were 1 ms or more."""
    by_queue: dict[int, list] = {}
    for qid, sent, answered in sorted(pulls, key=lambda p: p[1]):
        by_queue.setdefault(qid, []).append((sent, answered))
    gaps = sorted(nxt[0] - cur[1] for seq in by_queue.values() for cur, nxt in zip(seq, seq[1:]))
    if not gaps:
        return None
    return {**base.percentiles(gaps), "over_1ms": sum(1 for g in gaps if g >= 0.001),
            "negative": sum(1 for g in gaps if g < 0)}   # negative: the next pull left before this answer came


def _match_pulls(points: dict, pulls: list) -> None:
    """Give each message the pull that brought it: its queue's last pull answered before the
    listener (or poll) got it ("pull_sent", "pull_answered"; none with direct_poll's held pulls)."""
    by_queue: dict[int, list] = {}
    for qid, sent, answered in sorted(pulls, key=lambda p: p[2]):
        by_queue.setdefault(qid, []).append((answered, sent))
    for pt in points.values():
        answers = by_queue.get(pt["queue"], [])
        k = bisect.bisect_right(answers, (pt["consumed"], float("inf"))) - 1
        if k >= 0:
            pt["pull_answered"], pt["pull_sent"] = answers[k]


def analyse(points: dict, procs: dict | None = None, slow_share: float = 0.01) -> dict:
    """Each hop's p50/p99 (µs), the slowest `slow_share` of messages by e2e and by sync send, each
    one's timeline (µs after send), the hop furthest above its p50 in it, and how many of them
    waited through a GC pause of the process that took them in (`procs`: run_quiver's)."""
    matched = [pt for pt in points.values() if "pull_sent" in pt]   # all but what pulls sent before the
    pulled = len(matched) >= 0.9 * len(points)                       # watch began brought, if any
    hops = {name: sorted(pt[b] - pt[a] for pt in points.values()) for name, a, b in HOPS}
    hops.update({name: sorted(pt[b] - pt[a] for pt in matched) for name, a, b in PULL_HOPS if pulled})
    stats = {name: base.percentiles(vals) for name, vals in hops.items()}
    out = {"count": len(points), "pulls_matched": len(matched), "hops": stats, "slowest": {}}
    if pulled:
        out["pull_waiting"] = _pull_waiting(matched)
    for key, (total, parts) in SPLITS.items():
        by = sorted(points.items(), key=lambda kv: _hop(kv[1], total), reverse=True)
        slow = by[:max(1, int(len(by) * slow_share))]
        dominant: dict[str, int] = {}
        lines = []
        for i, pt in slow:
            excess = {h: _hop(pt, h) - stats[h]["p50_us"] / 1e6 for h in parts}
            top = max(excess, key=excess.get)
            dominant[top] = dominant.get(top, 0) + 1
            lines.append({"i": i, "total_us": _hop(pt, total) * 1e6, "dominant": top,
                          **{f"{p}_us": (pt[p] - pt["send"]) * 1e6 for p in ("born", "stored", "replied", "consumed")}})
        mean = {h: sum(_hop(pt, h) for _, pt in slow) / len(slow) * 1e6 for h in parts}
        out["slowest"][key] = {"by": total, "messages": len(slow), "dominant": dominant, "parts_mean_us": mean,
                               "bursts": _bursts([pt[_end(total)] for _, pt in slow]), "timelines": lines}
        if pulled and key == "e2e":   # was a pull waiting on its queue when it was stored?
            late = [pt["pull_sent"] - pt["stored"] for _, pt in slow
                    if pt.get("pull_sent", 0.0) > pt["stored"] + MID_MS]
            out["slowest"][key]["pull_sent_after_stored"] = len(late)
            out["slowest"][key]["pull_sent_after_stored_mean_us"] = sum(late) / len(late) * 1e6 if late else 0.0
        if procs:
            mine = procs["consumer" if key == "e2e" else "producer"]
            for what, spans in (("through_gc", [g[:2] for g in mine["gc"]]), ("through_stall", mine["stalls"])):
                out["slowest"][key][what] = sum(
                    1 for _, pt in slow if any(s0 < pt[_end(total)] and s0 + d > pt["send"] for s0, d in spans))
    return out


def _pull_waiting(matched: list[dict]) -> dict:
    """Every message by whether its queue's pull was at the broker when it was stored, on exact
    clocks: sent before send() was called (waiting), or after send() returned (not); each
    group's count and delivery to the consumer's IO thread (send -> pull answered), p50/p99."""
    groups: dict[str, list[float]] = {"waiting": [], "not_waiting": [], "unclear": []}
    for pt in matched:
        g = ("waiting" if pt["pull_sent"] < pt["send"] else
             "not_waiting" if pt["pull_sent"] > pt["replied"] else "unclear")
        groups[g].append(pt["pull_answered"] - pt["send"])
    return {g: base.percentiles(sorted(v)) for g, v in groups.items()}


def _hop(pt: dict, name: str) -> float:
    _, a, b = next(h for h in HOPS + PULL_HOPS if h[0] == name)
    return pt[b] - pt[a]


def _end(name: str) -> str:
    return next(h[2] for h in HOPS + PULL_HOPS if h[0] == name)


def _bursts(ends: list[float], gap_s: float = 0.002) -> int:
    """Groups among the slow messages' arrival times (less than `gap_s` apart): few groups of many
    messages is one stall holding up all that came meanwhile, not messages slow one by one."""
    ends = sorted(ends)
    return sum(1 for i, t in enumerate(ends) if i == 0 or t - ends[i - 1] > gap_s)


def run_floor(samples: int, rate: int, seconds: float) -> dict:
    from bench.peers.floor import Floor
    with Floor() as f:
        return {**f.sync(samples), **f.e2e(rate, seconds)}


def report(doc: dict) -> str:
    a, floor = doc["analysis"], doc.get("floor")
    lines = [f"# Hops of a message — {doc['meta']['date']}", "",
             f"{a['count']} messages of 1 KiB, send() paced at {doc['meta']['rate']} msg/s "
             f"(reached {doc['rate_done']:,.0f}), consumer: {doc['meta']['consumer']} (listener threads: "
             + ", ".join(f"{k} {v}" for k, v in doc["threads"].items()) + f"); {doc['meta']['machine']}.", "",
             "| hop | p50 (µs) | p99 (µs) | p99.9 (µs) |", "|---|---:|---:|---:|"]
    for name in a["hops"]:
        s = a["hops"][name]
        lines.append(f"| {name} | {s['p50_us']:,.0f} | {s['p99_us']:,.0f} | {s['p999_us']:,.0f} |")
    lines += ["", "Hops at `stored` or `born` are good to ±500 µs (millisecond stamps, taken at their middle).", ""]
    for who, p in doc.get("procs", {}).items():
        longest = max((d for _, d, _ in p["gc"]), default=0.0)
        stall = max((d for _, d in p["stalls"]), default=0.0)
        lines.append(f"- {who} process: {len(p['gc'])} GC pause(s) of 1 ms or more (longest {longest * 1e3:.1f} ms), "
                     f"{len(p['stalls'])} stall(s) of 30 ms or more that no thread ran in (a 5 ms ticker's gaps; "
                     f"longest {stall * 1e3:.0f} ms), "
                     f"{p['rusage']['involuntary']:,} involuntary context switches (preempted), "
                     f"{p['rusage']['voluntary']:,} voluntary"
                     + (f", {p['rusage']['cpu_s'] / n * 1e6:.1f} µs CPU a message (all threads)"
                        if "cpu_s" in p["rusage"] and (n := doc["analysis"]["count"]) else ""))
    lines.append("")
    if probe := doc.get("broker_probe"):
        lines += ["| broker service thread, thread CPU | count | 1 ms or more | longest (ms) |", "|---|---:|---:|---:|"]
        lines += [f"| {k} | {t['count']:,} | {t['over_1ms']:,} | {t['max_ms']:.2f} |"
                  for k, t in probe["tasks"].items()]
        gcs, counts = probe["gc_over_0_5ms"], probe["gc_collections"]
        lines += ["", "Broker GC collections: " + ", ".join(f"{k} {n}" for k, n in sorted(counts.items()))
                  + f"; while serving, {len(gcs)} of 0.5 ms CPU or more"
                  + (f" ({', '.join(f'gen{g} {ms} ms' for g, ms in gcs[:12])})." if gcs else "."), ""]
    if pw := a.get("pull_waiting"):
        lines += ["| its queue's pull, when the message was stored | messages | send -> pull answered p50 (µs) "
                  "| p99 (µs) |",
                  "|---|---:|---:|---:|"]
        lines += [f"| {g.replace('_', ' ')} | {v['count']:,} | {v['p50_us'] or 0:,.0f} | {v['p99_us'] or 0:,.0f} |"
                  for g, v in pw.items()] + [""]
    if gap := doc.get("pull_gaps"):
        lines += [f"A queue's pull answered -> its next pull sent: p50 {gap['p50_us']:,.0f} µs, p99 "
                  f"{gap['p99_us']:,.0f}, p99.9 {gap['p999_us']:,.0f}; {gap['over_1ms']:,} of {gap['count']:,} "
                  f"gaps 1 ms or more, {gap['negative']:,} pulls sent before the previous one's answer.", ""]
    if floor:
        sync, e2e = a["hops"]["sync send: send -> replied"], a["hops"]["e2e: send -> consumed"]
        lines += ["| floor, bare pyzmq, same run | p50 (µs) | p99 (µs) | sync send / it | e2e / it |",
                  "|---|---:|---:|---:|---:|",
                  f"| round trip, 1 KiB | {floor['sync_p50_us']:,.0f} | {floor['sync_p99_us']:,.0f} | "
                  f"{sync['p50_us'] / floor['sync_p50_us']:.2f}x / {sync['p99_us'] / floor['sync_p99_us']:.2f}x | "
                  f"{e2e['p50_us'] / floor['sync_p50_us']:.2f}x / {e2e['p99_us'] / floor['sync_p99_us']:.2f}x |",
                  f"| one way (PUSH/PULL) at the same rate | {floor['e2e_p50_us']:,.0f} | {floor['e2e_p99_us']:,.0f} | "
                  f"| {e2e['p50_us'] / floor['e2e_p50_us']:.2f}x / {e2e['p99_us'] / floor['e2e_p99_us']:.2f}x |", ""]
    for key, s in a["slowest"].items():
        dom = ", ".join(f"{h} {n}" for h, n in sorted(s["dominant"].items(), key=lambda kv: -kv[1]))
        parts = ", ".join(f"{h} {us:,.0f} (p50 {a['hops'][h]['p50_us']:,.0f})" for h, us in s["parts_mean_us"].items())
        lines += [f"## The slowest {s['messages']} by {s['by']}", "",
                  f"Furthest above its p50: {dom}. Their mean µs: {parts}. They arrived in {s['bursts']} "
                  f"burst(s) (arrivals < 2 ms apart grouped: few bursts = a stall, not slow messages one by one); "
                  f"{s.get('through_gc', 0)} waited through a GC pause and {s.get('through_stall', 0)} through a "
                  "stall of the process that took them in."
                  + (f" For {s['pull_sent_after_stored']} no pull was waiting on their queue when they were stored "
                     f"(the pull that brought them left {s['pull_sent_after_stored_mean_us']:,.0f} µs after, mean)."
                     if "pull_sent_after_stored" in s else ""), "",
                  "| i | total | born | stored | replied | consumed | dominant |", "|---:|---:|---:|---:|---:|---:|---|"]
        for t in s["timelines"][:20]:
            lines.append(f"| {t['i']} | {t['total_us']:,.0f} | {t['born_us']:,.0f} | {t['stored_us']:,.0f} | "
                         f"{t['replied_us']:,.0f} | {t['consumed_us']:,.0f} | {t['dominant'].split(':')[0]} |")
        lines += ["", "(µs after send() was called; 20 at most shown, all in the JSON)", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.hops", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=6000, help="messages timed (default 6000: 3 s at 2k msg/s)")
    ap.add_argument("--rate", type=int, default=2000, help="msg/s (default 2000)")
    ap.add_argument("--consumer", choices=MODES, default="push", help="how the consumer takes messages")
    ap.add_argument("--no-floor", action="store_true", help="skip the bare pyzmq floor of the same run")
    ap.add_argument("--out", default=RESULTS, help="directory for hops-<date>.json (default bench/results)")
    ap.add_argument("--listener-us", type=int, default=0,
                    help="push listener's work per message, µs slept after noting it (default 0: a no-op)")
    ap.add_argument("--raw", action="store_true", help="keep every message's points and every pull in the JSON")
    ap.add_argument("--probe-broker", action="store_true",
                    help="time the broker's service-thread tasks and GC in thread CPU (bench.broker_probe)")
    args = ap.parse_args(argv)
    now = datetime.datetime.now()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    meta = {"date": now.strftime("%Y-%m-%d %H:%M"), "messages": args.messages, "rate": args.rate,
            "consumer": args.consumer, "listener_us": args.listener_us,
            "machine": f"{os.cpu_count()} cores, load average at start {load}",
            "command": "python -m bench.hops " + " ".join(sys.argv[1:] if argv is None else argv)}
    floor = None if args.no_floor else run_floor(min(5000, max(200, args.messages)), args.rate,
                                                 max(0.5, args.messages / args.rate))
    probe = None
    with tempfile.TemporaryDirectory(prefix="quiver-bench-hops-") as d:
        if args.probe_broker:
            with broker_probe.probing(os.path.join(d, "probe.json")):
                raw = run_quiver(args.messages, args.rate, args.consumer, d, args.listener_us)
            with open(os.path.join(d, "probe.json")) as f:
                probe = json.load(f)
        else:
            raw = run_quiver(args.messages, args.rate, args.consumer, d, args.listener_us)
    if len(raw["points"]) < raw["sent"]:
        print(f"consumer saw {len(raw['points'])} of {raw['sent']} messages", file=sys.stderr)
    if not raw["points"]:
        return 1
    doc = {"meta": meta, "rate_done": raw["rate_done"], "threads": raw["threads"], "floor": floor,
           "procs": raw["procs"], "analysis": analyse(raw["points"], raw["procs"]), "broker_probe": probe,
           "pull_gaps": raw["pull_gaps"]}
    if args.raw:
        doc["raw"] = {"points": raw["points"], "pulls": raw["pulls"]}
    print(report(doc))
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"hops-{now.strftime('%Y-%m-%d-%H%M%S')}.json")
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"wrote {path}")
    return 0 if len(raw["points"]) == raw["sent"] else 1


if __name__ == "__main__":
    sys.exit(main())
