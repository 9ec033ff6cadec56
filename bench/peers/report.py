"""Turns one run's results into the JSON file, the markdown tables and the PNG plot.

Owns: row labels and units, the issue's targets (ratios from the same run),
and the plot layout (matplotlib, Agg backend, imported lazily). Each cell is
the median of the repeats with the spread (max - min) / median.
"""

import json
import os

THROUGHPUT_ROWS = [
    ("produce_msgs_s", "produce pipelined, window 1000 (msg/s)"),
    ("batch_msgs_s", "batch produce, 100 per call (msg/s)"),
    ("consume_msgs_s", "consume with acks (msg/s)"),
    ("produce_64b_msgs_s", "produce 64 B bodies (msg/s)"),
    ("produce_16k_msgs_s", "produce 16 KiB bodies (msg/s)"),
    ("procs1_msgs_s", "produce, 1 producer process (msg/s)"),
    ("procs4_msgs_s", "produce, 4 producer processes (msg/s)"),
    ("procs16_msgs_s", "produce, 16 producer processes (msg/s)"),
]
LATENCY_ROWS = [
    ("sync_p50_us", "sync send p50 (µs)"),
    ("sync_p99_us", "sync send p99 (µs)"),
    ("sync_max_us", "sync send max (µs)"),
    ("e2e_p50_us", "e2e p50 at 2k msg/s (µs)"),
    ("e2e_p99_us", "e2e p99 at 2k msg/s (µs)"),
    ("produce_client_cpu_us", "client CPU per pipelined message, all threads (µs)"),
    ("produce_broker_cpu_us", "broker CPU per pipelined message, all threads (µs)"),
]
LOAD_RATES_SHOWN = (2, 10, 50)   # thousand msg/s: runner.Counts.load_rates
LOAD_ROWS = [row for k in LOAD_RATES_SHOWN for row in (
    (f"load{k}k_e2e_p50_us", f"e2e p50 at {k}k msg/s (µs)"),
    (f"load{k}k_e2e_p99_us", f"e2e p99 at {k}k msg/s (µs)"),
    (f"load{k}k_e2e_p999_us", f"e2e p99.9 at {k}k msg/s (µs)"),
    (f"load{k}k_e2e_rate_msgs_s", f"publish rate reached, {k}k asked (msg/s)"))]
SCALE_ROWS = [   # bench.scale through `--workloads scale` (counts' scale_n messages of 100 B, 10M by default;
    # goals: RSS <= 250 MB, recovery <= 10 s)
    ("scale_store_msgs_s", "storing them, batch produce (msg/s)"),
    ("scale_rss_mb", "broker RSS with them stored (MB)"),
    ("scale_cold_read_msgs_s", "pull up to 1M from the head (msg/s)"),
    ("scale_recovery_s", "kill -9 -> every queue back (s)"),
]
CEILING_ROWS = [
    ("raw_1ack_msgs_s", "pyzmq DEALER/ROUTER, 1 ack per 1 KiB msg, window 1000 (msg/s)"),
    ("raw_batch_msgs_s", "pyzmq 100-frame multipart, 1 ack each (msg/s)"),
    ("raw_rtt_p50_us", "pyzmq round trip p50 (µs)"),
    ("disk_nosync_recs_s", "disk append 1 KiB, no fsync (rec/s)"),
    ("disk_fdatasync64k_recs_s", "disk append 1 KiB, fdatasync per 64 KiB (rec/s)"),
]
# (text, system, metric, peer, peer metric, op, bound): ratio = ours / theirs
TARGETS = [   # the performance issue's goals, then auth's and trace's
    ("e2e p99 at 2k msg/s <= 1.0x Redis Streams'", "quiver-async", "e2e_p99_us", "redis", "e2e_p99_us", "<=", 1.0),
    ("e2e p50 at 2k msg/s <= 1.5x Redis Streams'", "quiver-async", "e2e_p50_us", "redis", "e2e_p50_us", "<=", 1.5),
    ("sync send p50 <= 1.2x JetStream's", "quiver-async", "sync_p50_us", "jetstream", "sync_p50_us", "<=", 1.2),
    ("sync send p99 <= 1.5x JetStream's", "quiver-async", "sync_p99_us", "jetstream", "sync_p99_us", "<=", 1.5),
    ("pipelined produce >= 1.2x Redis Streams", "quiver-async", "produce_msgs_s", "redis", "produce_msgs_s", ">=", 1.2),
    ("produce 64 B >= 1.2x Redis Streams", "quiver-async", "produce_64b_msgs_s", "redis", "produce_64b_msgs_s",
     ">=", 1.2),
    ("16 producer processes >= 1.0x Redis Streams", "quiver-async", "procs16_msgs_s", "redis", "procs16_msgs_s",
     ">=", 1.0),
    ("batch produce >= 0.9x pyzmq 100-frame ceiling", "quiver-async", "batch_msgs_s", "ceilings", "raw_batch_msgs_s",
     ">=", 0.9),
    ("consume >= 1.5x Redis Streams", "quiver-async", "consume_msgs_s", "redis", "consume_msgs_s", ">=", 1.5),
    ("SYNC-flush produce >= 0.5x disk fdatasync ceiling", "quiver-sync", "produce_msgs_s", "ceilings",
     "disk_fdatasync64k_recs_s", ">=", 0.5),
    ("pipelined produce >= 1.5x JetStream", "quiver-async", "produce_msgs_s", "jetstream", "produce_msgs_s", ">=", 1.5),
    ("e2e p99 at 10k msg/s <= 1.0x Redis Streams'", "quiver-async", "load10k_e2e_p99_us", "redis",
     "load10k_e2e_p99_us", "<=", 1.0),
    ("auth on: pipelined produce >= 0.85x auth off", "quiver-auth", "produce_msgs_s", "quiver-async", "produce_msgs_s",
     ">=", 0.85),
    ("auth on: consume >= 0.85x auth off", "quiver-auth", "consume_msgs_s", "quiver-async", "consume_msgs_s", ">=", 0.85),
    ("trace on: pipelined produce >= 0.9x trace off", "quiver-trace", "produce_msgs_s", "quiver-async",
     "produce_msgs_s", ">=", 0.9),
    ("trace on: client CPU per pipelined message <= 1.1x trace off", "quiver-trace", "produce_client_cpu_us",
     "quiver-async", "produce_client_cpu_us", "<=", 1.1),
    ("sync send p50 <= 1.6x the bare pyzmq round trip (floor)", "quiver-async", "sync_p50_us", "floor", "sync_p50_us",
     "<=", 1.6),
    ("e2e p50 at 2k msg/s <= 2.5x the bare pyzmq round trip (floor)", "quiver-async", "e2e_p50_us", "floor",
     "sync_p50_us", "<=", 2.5),
    ("Kafka gateway: produce >= 0.7x Quiver's SDK", "kafka-gateway", "produce_msgs_s", "quiver-async",
     "produce_msgs_s", ">=", 0.7),
    ("Kafka gateway: consume >= 0.7x Quiver's SDK", "kafka-gateway", "consume_msgs_s", "quiver-async",
     "consume_msgs_s", ">=", 0.7),
    ("Kafka gateway: e2e p99 at 2k msg/s <= 1.5x Quiver's SDK", "kafka-gateway", "e2e_p99_us", "quiver-async",
     "e2e_p99_us", "<=", 1.5),
]
# (label, metric, the floor's metric): each system's latency over bare pyzmq's of the same run
FLOOR_ROWS = [
    ("sync send p50 / round trip p50", "sync_p50_us", "sync_p50_us"),
    ("sync send p99 / round trip p99", "sync_p99_us", "sync_p99_us"),
    ("e2e p50 at 2k msg/s / one-way p50", "e2e_p50_us", "e2e_p50_us"),
    ("e2e p99 at 2k msg/s / one-way p99", "e2e_p99_us", "e2e_p99_us"),
    ("e2e p50 at 2k msg/s / round trip p50", "e2e_p50_us", "sync_p50_us"),
    ("e2e p99 at 10k msg/s / one-way p99 at 10k", "load10k_e2e_p99_us", "load10k_e2e_p99_us"),
]


def _median(results: dict, system: str, metric: str) -> float | None:
    m = results.get(system, {}).get("metrics", {}).get(metric)
    return None if m is None else m["median"]


def targets(results: dict) -> list[dict]:
    out = []
    for text, sys_a, met_a, sys_b, met_b, op, bound in TARGETS:
        a, b = _median(results, sys_a, met_a), _median(results, sys_b, met_b)
        row = {"target": text, "quiver": a, "peer": b, "ratio": None, "met": None}
        if a is not None and b:
            row["ratio"] = a / b
            row["met"] = row["ratio"] >= bound if op == ">=" else row["ratio"] <= bound
        out.append(row)
    return out


def floor_ratios(results: dict) -> dict:
    """{system: {label: ratio}}: every system's sync and e2e latencies over the floor's (bare pyzmq) of
    this run; {} without a floor."""
    out = {}
    for s in results:
        if s in ("ceilings", "floor"):
            continue
        row = {}
        for label, metric, floor_metric in FLOOR_ROWS:
            a, b = _median(results, s, metric), _median(results, "floor", floor_metric)
            if a is not None and b:
                row[label] = a / b
        if row:
            out[s] = row
    return out


def _floor_table(results: dict) -> list[str]:
    ratios = floor_ratios(results)
    if not ratios:
        return []
    systems = list(ratios)
    lines = ["## Against the floor (bare pyzmq, same run; lower is better)", "",
             "Each system's latency divided by the `floor` column's: a pyzmq DEALER/ROUTER round trip of the "
             "1 KiB body (for sync send) and a paced pyzmq PUSH/PULL one way (for e2e). Goals: Quiver's sync "
             "send p50 <= 1.6x and e2e p50 <= 2.5x the round trip.", "",
             "| ratio | " + " | ".join(systems) + " |", "|---|" + "---:|" * len(systems)]
    for label, _, _ in FLOOR_ROWS:
        cells = [f"{ratios[s][label]:.2f}x" if label in ratios[s] else "—" for s in systems]
        if any(c != "—" for c in cells):
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines + [""]


def _num(v: float) -> str:
    """Whole numbers, but a tenth where a value is small enough for it to matter (µs per message)."""
    return f"{v:,.1f}" if abs(v) < 100 else f"{v:,.0f}"


def _cell(m: dict | None) -> str:
    if m is None:
        return "—"
    value = _num(m["median"])
    return f"{value} ±{m['spread_pct']:.0f}%" if len(m["values"]) > 1 else value


def _table(results: dict, systems: list[str], rows) -> list[str]:
    lines = ["| measure | " + " | ".join(systems) + " |", "|---|" + "---:|" * len(systems)]
    for key, label in rows:
        cells = [_cell(results[s]["metrics"].get(key)) for s in systems]
        if all(c == "—" for c in cells):
            continue
        if key == "batch_msgs_s":
            cells = ["N/A" if results[s]["notes"].get("batch", "").startswith("N/A") else c
                     for s, c in zip(systems, cells)]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def markdown(doc: dict) -> str:
    results, meta = doc["results"], doc["meta"]
    systems = [s for s in results if s != "ceilings"]
    stored = [s for s in systems if s != "floor"]   # the floor has latency rows only
    out = [f"# Quiver vs peers — {meta['date']}", "",
           f"Same machine, same run, 127.0.0.1 only; {meta['machine']}. Each cell: median of "
           f"{meta['repeat']} run(s) ±spread ((max−min)/median). 1 KiB bodies unless noted; every message "
           f"acknowledged and counted. Counts: {meta['counts']}.", "",
           f"Reproduce: `{meta['command'].strip()}`. Versions: "
           + ", ".join(f"{k} {v}" for k, v in meta.get("versions", {}).items()) + ".", ""]
    if systems:
        if stored:
            out += ["## Throughput (higher is better)", "", *_table(results, stored, THROUGHPUT_ROWS), ""]
        out += ["## Latency (lower is better)", "", *_table(results, systems, LATENCY_ROWS), "",
                *_floor_table(results)]
        load = _table(results, systems, LOAD_ROWS)
        if len(load) > 2:
            out += ["## Latency under load (e2e, consumer in another process; lower is better)", "",
                    "The producer is paced at each rate; a system whose publish rate falls short of the rate "
                    "asked for was saturated there, and its latencies are not comparable.", "", *load, ""]
    scale = _table(results, stored, SCALE_ROWS) if stored else []
    if len(scale) > 2:
        out += [f"## A broker holding {meta['counts'].get('scale_n', 0):,} messages (`--workloads scale`)", "",
                *scale, ""]
    if "ceilings" in results:
        out += ["## Ceilings on this machine", "", *_table(results, ["ceilings"], CEILING_ROWS), ""]
    t = [r for r in doc["targets"] if r["ratio"] is not None]
    if t:
        out += ["## Targets (ratios from this run)", "", "| target | Quiver | peer | ratio | met |", "|---|---:|---:|---:|---|"]
        out += [f"| {r['target']} | {_num(r['quiver'])} | {_num(r['peer'])} | {r['ratio']:.2f} | "
                f"{'yes' if r['met'] else '**no**'} |" for r in t]
        out.append("")
    out += ["## Durability and client choices", ""]
    for s, e in results.items():
        notes = "; ".join(f"{k}: {v}" for k, v in e["notes"].items())
        out.append(f"- **{s}**: {e['durability']}" + (f" ({notes})" if notes else ""))
        for wl, err in e["errors"].items():
            out.append(f"  - error in {wl}: {err}")
    return "\n".join(out) + "\n"


def plot(doc: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    results = doc["results"]
    systems = [s for s in results if s != "ceilings" and results[s]["metrics"]]
    if not any(k in results[s]["metrics"] for s in systems for k, _ in THROUGHPUT_ROWS + LATENCY_ROWS):
        return   # nothing the plot shows (a scale-only run)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(15, 6.5))
    _bars(ax1, results, [s for s in systems if s != "floor"], THROUGHPUT_ROWS, "msg/s (higher is better)", log=False)
    raw = _median(results, "ceilings", "raw_1ack_msgs_s")
    if raw:
        ax1.axvline(raw, color="grey", ls="--", lw=1)
        ax1.text(raw, -0.6, " pyzmq 1-ack ceiling", color="grey", fontsize=8, va="top")
    _bars(ax2, results, systems, LATENCY_ROWS, "µs, log scale (lower is better)", log=True)
    ax1.set_title("Throughput")
    ax2.set_title("Latency")
    legend = {}   # a system may have bars in one panel only (the floor: latency)
    for ax in (ax1, ax2):
        for handle, label in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(label, handle)
    fig.legend(list(legend.values()), list(legend), loc="lower center", ncol=len(systems), fontsize=10, frameon=False)
    fig.suptitle(f"Quiver vs NATS JetStream, RabbitMQ, Redis Streams — {doc['meta']['date']} "
                 f"(median of {doc['meta']['repeat']}, whiskers min–max; shared 2-core VM)", fontsize=11)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


COLORS = {"floor": "#7f7f7f", "quiver-async": "#1f77b4", "quiver-sync": "#7fb3e0", "quiver-auth": "#17becf", "quiver-trace": "#9467bd", "redis": "#d62728", "jetstream": "#2ca02c",
          "rabbitmq": "#ff7f0e"}


def _bars(ax, results, systems, rows, xlabel, log) -> None:
    rows = [(k, lbl) for k, lbl in rows if any(k in results[s]["metrics"] for s in systems)]
    if not rows:
        return
    h = 0.8 / len(systems)
    for i, s in enumerate(systems):
        ys, xs, lo, hi = [], [], [], []
        for j, (k, _) in enumerate(rows):
            m = results[s]["metrics"].get(k)
            if m:
                ys.append(j + (i - (len(systems) - 1) / 2) * h)
                xs.append(m["median"])
                lo.append(m["median"] - m["min"])
                hi.append(m["max"] - m["median"])
        ax.barh(ys, xs, height=h, xerr=[lo, hi], label=s, color=COLORS.get(s), error_kw={"lw": 0.8})
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([lbl.rsplit(" (", 1)[0] for _, lbl in rows], fontsize=9)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    if log:
        ax.set_xscale("log")
    ax.grid(axis="x", alpha=0.3)


def write(doc: dict, out_dir: str, stamp: str) -> dict:
    os.makedirs(out_dir, exist_ok=True)
    paths = {ext: os.path.join(out_dir, f"{stamp}.{ext}") for ext in ("json", "md", "png")}
    with open(paths["json"], "w") as f:
        json.dump(doc, f, indent=2)
    with open(paths["md"], "w") as f:
        f.write(markdown(doc))
    try:
        plot(doc, paths["png"])
    except ImportError:      # matplotlib comes with the `bench` extra: `pip install -e ".[bench]"`
        print("matplotlib is not installed: no plot (pip install -e \".[bench]\")")
        del paths["png"]
    return paths
