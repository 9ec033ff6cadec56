"""Runs the chosen workloads on the chosen systems, repeated, with a plain-text progress bar.

Owns: the workload table (which method, which counts, which metric names), the
counts of a full and a smoke run, repeats and their median/spread, and keeping
going past one failed measurement (recorded as an error). Every system's servers
start first and stop together (one ExitStack), also on Ctrl-C and exceptions; the
repeats are interleaved across systems.
Does not own output files (bench/peers/report.py).
"""

import contextlib
import statistics
import sys
import time
import traceback
from dataclasses import dataclass

from bench.peers import base, registry

E2E_RATE = 2000


@dataclass(frozen=True)
class Counts:
    n: int = 20_000             # messages per produce / batch measurement
    # messages per consume measurement: 20,000 are read in 40-60 ms by the fastest systems, a window
    # where one scheduling hiccup or the first pulls' start decide the rate; 100,000 measure reading
    consume_n: int = 100_000
    n_16k: int = 4_000          # 16 KiB bodies
    samples: int = 5_000        # sync send latency samples
    e2e_s: float = 3.0          # seconds at E2E_RATE msg/s
    procs: tuple = (1, 4, 16)   # concurrent producer processes
    procs_n: int = 10_000       # messages in all, split between them
    raw_n: int = 20_000
    disk_n: int = 50_000
    load_rates: tuple = (2_000, 10_000, 50_000)   # latency under load: e2e at each rate (msg/s)
    load_s: float = 2.0         # seconds at each rate
    scale_n: int = 10_000_000   # messages stored by the scale workload (opt-in: --workloads scale)


SMOKE = Counts(n=2_000, consume_n=2_000, n_16k=300, samples=300, e2e_s=1.0, procs=(1, 4), procs_n=2_000, raw_n=2_000, disk_n=5_000,
               load_rates=(2_000, 10_000), load_s=0.5, scale_n=20_000)


def _prefixed(prefix: str, out: dict | None) -> dict | None:
    return None if out is None else {f"{prefix}_{k}": v for k, v in out.items()}


def _procs(name: str, s, c: Counts) -> dict:
    return {f"procs{k}_msgs_s": base.concurrent_produce(name, s, k, c.procs_n, 1024) for k in c.procs}


def load_key(rate: int) -> str:
    return f"load{rate // 1000}k" if rate % 1000 == 0 else f"load{rate}"


def _load(name: str, s, c: Counts) -> dict:
    """Latency under load, as OpenMessaging Benchmark reports it: e2e p50/p99/p99.9 with the
    producer paced at each rate (and the rate it reached)."""
    out = {}
    for rate in c.load_rates:
        out.update(_prefixed(load_key(rate), s.e2e(rate, c.load_s)))
    return out


# workload -> measure(system_name, system, counts) -> {metric: value} or None (N/A)
WORKLOADS = {
    "produce": lambda name, s, c: _prefixed("produce", s.produce(c.n, 1024)),
    "batch": lambda name, s, c: _prefixed("batch", s.batch(c.n)),
    "consume": lambda name, s, c: _prefixed("consume", s.consume(c.consume_n)),
    "sync": lambda name, s, c: s.sync(c.samples),
    "e2e": lambda name, s, c: s.e2e(E2E_RATE, c.e2e_s),
    "produce_64": lambda name, s, c: _prefixed("produce_64b", s.produce(c.n, 64)),
    "produce_16k": lambda name, s, c: _prefixed("produce_16k", s.produce(c.n_16k, 16 * 1024)),
    "procs": _procs,
    "load": _load,
    "scale": lambda name, s, c: _prefixed("scale", s.scale(c.scale_n)),
    "raw": lambda name, s, c: s.raw(c.raw_n),
    "disk": lambda name, s, c: s.disk(c.disk_n),
}
PER_SYSTEM = {
    "ceilings": ["raw", "disk"],
    "floor": ["sync", "e2e", "load"],   # bare pyzmq on the latency workloads: the rows Quiver is divided by
    # reading does not depend on the flush mode: consume and e2e run once, on quiver-async
    "quiver-sync": ["produce", "batch", "sync", "produce_64", "produce_16k", "procs"],
    "quiver-auth": ["produce", "batch", "consume", "sync"],   # next to quiver-async: what auth costs
    "quiver-trace": ["produce", "batch"],                     # next to quiver-async: what tracing costs
    # the 5.x client sends under 2k msg/s here: no e2e at 2k (nor the load steps), no 16 client processes
    "rocketmq5-proxy": ["produce", "consume", "sync", "produce_64", "produce_16k"],
    "kafka-gateway": ["produce", "consume", "sync", "e2e", "produce_64", "produce_16k"],
}
DEFAULT = ["produce", "batch", "consume", "sync", "e2e", "produce_64", "produce_16k", "procs", "load"]
# run only when named in --workloads: minutes each (10M messages stored, then a kill -9 and recovery)
OPT_IN = {"quiver-async": ["scale"]}


def plan(systems: list[str], workloads: list[str] | None) -> list[tuple[str, list[str]]]:
    out = []
    for name in systems:
        mine = PER_SYSTEM.get(name, DEFAULT) + (OPT_IN.get(name, []) if workloads else [])
        if name != "ceilings" and registry.system_class(name).notes.get("batch", "").startswith("N/A"):
            mine = [w for w in mine if w != "batch"]
        chosen = [w for w in mine if workloads is None or w in workloads]
        if chosen:
            out.append((name, chosen))
    return out


def summarize(values: list[float]) -> dict:
    med = statistics.median(values)
    return {"median": med, "min": min(values), "max": max(values),
            "spread_pct": (max(values) - min(values)) / med * 100 if med else 0.0, "values": values}


class Progress:
    """`[#####.....] 12/60  redis consume 2/3  1m05s` on one line (a line per step when not a tty)."""

    def __init__(self, total: int, stream=sys.stderr):
        self.total, self.done, self.stream, self.t0 = total, 0, stream, time.monotonic()
        self.tty = stream.isatty()

    def show(self, label: str) -> None:
        width = 30
        fill = int(width * self.done / max(1, self.total))
        el = int(time.monotonic() - self.t0)
        line = f"[{'#' * fill}{'.' * (width - fill)}] {self.done:>3}/{self.total}  {label:<34} {el // 60}m{el % 60:02d}s"
        self.stream.write(("\r" + line) if self.tty else line + "\n")
        self.stream.flush()

    def step(self, label: str) -> None:
        self.done += 1
        self.show(label)

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


def run(systems: list[str], workloads: list[str] | None, repeat: int, counts: Counts, log=print) -> dict:
    """Every system is started first; then each repeat runs every workload on every system in
    turn, so drift on a shared machine (another tenant, page cache, thermal) spreads over all
    of them instead of landing on whichever ran last."""
    todo = plan(systems, workloads)
    bar = Progress(sum(1 + len(wls) * repeat for _, wls in todo))
    results, live = {}, []
    try:
        with contextlib.ExitStack() as stack:
            for name, wls in todo:
                cls = registry.system_class(name)
                entry = results[name] = {"durability": cls.durability, "notes": dict(cls.notes), "metrics": {},
                                         "errors": {}, "seconds": {}}
                bar.show(f"{name} starting")
                try:
                    system = stack.enter_context(cls())
                    if system.warm_up:      # connections, routes, first segment files: not timed
                        system.produce(min(1000, counts.n), 1024)
                    bar.step(f"{name} up")
                    live.append((name, system, wls, entry, {wl: {} for wl in wls}))
                except Exception as exc:  # a server that would not start: record it, go on with the others
                    entry["errors"]["start"] = f"{type(exc).__name__}: {exc}"
                    log(f"\n{name}: {entry['errors']['start']}")
                    bar.done += len(wls) * repeat
            order = list(dict.fromkeys(wl for _, _, wls, _, _ in live for wl in wls))
            for r in range(repeat):
                for wl in order:
                    for name, system, wls, entry, samples in live:
                        if wl in wls and wl not in entry["errors"]:
                            _measure_once(name, system, wl, r, repeat, counts, entry, samples[wl], bar)
            for name, _, wls, entry, samples in live:
                for wl in wls:
                    for k, vals in samples[wl].items():
                        entry["metrics"][k] = summarize(vals)
    finally:
        bar.close()
    return results


def _measure_once(name, system, wl, r, repeat, counts, entry, samples, bar) -> None:
    bar.show(f"{name} {wl} {r + 1}/{repeat}")
    t0 = time.monotonic()
    try:
        out = WORKLOADS[wl](name, system, counts)
    except Exception as exc:
        entry["errors"][wl] = f"{type(exc).__name__}: {exc}"
        traceback.print_exc(file=sys.stderr)
        bar.done += repeat - r
        return
    for k, v in (out or {}).items():
        samples.setdefault(k, []).append(v)
    entry["seconds"][wl] = round(entry["seconds"].get(wl, 0.0) + time.monotonic() - t0, 1)
    bar.step(f"{name} {wl} {r + 1}/{repeat}")
