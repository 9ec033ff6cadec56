"""Quiver next to NATS JetStream, RabbitMQ and Redis Streams, same machine, same run.

    python -m bench                                   # everything, 3 repeats
    python -m bench --only quiver,redis --workloads produce,consume --repeat 1
    python -m bench --only quiver --repeat 1 --smoke  # tiny counts, no peers

    python -m bench --only quiver-async --auth --workloads produce,consume   # auth on vs off
    python -m bench --only quiver-async --trace --workloads produce           # message trace on vs off

Systems: ceilings (raw pyzmq + disk), floor (bare pyzmq on the sync and e2e workloads), quiver-async, quiver-sync, quiver-auth, quiver-trace, redis,
jetstream, rabbitmq, rocketmq5-proxy (rocketmq-python-client through quiver_proxy), kafka-gateway
(confluent-kafka through quiver_kafka) (aliases: quiver, nats, rabbit, raw, peers, proxy, kafka). Workloads:
produce, batch, consume, sync, e2e, produce_64, produce_16k, procs, raw, disk.
Peers are installed with apt-get when absent, started on 127.0.0.1 with data
in a temp dir and stopped by PID, also on Ctrl-C. Writes
bench/results/<date>.json, .md and .png (see bench/peers/report.py).
"""

import argparse
import datetime
import importlib.metadata
import os
import platform
import signal
import subprocess
import sys

from bench.peers import registry, report, runner, servers

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def _versions(systems: list[str]) -> dict:
    out = {"python": platform.python_version()}
    for dist in ("pyzmq", "redis", "hiredis", "nats-py", "pika"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    for name, pkg in registry.PACKAGES.items():
        if name in systems:
            r = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", pkg], capture_output=True, text=True)
            out[pkg] = r.stdout.strip() or "?"
    return out


def _machine() -> str:
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return f"{os.cpu_count()} cores, load average at start {load} (shared with other jobs)"


def _interrupt(signum, frame):
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="comma-separated systems or aliases (default: all)")
    ap.add_argument("--workloads", help=f"comma-separated, from: {', '.join(runner.WORKLOADS)} (default: all)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each measurement (default 3)")
    ap.add_argument("--smoke", action="store_true", help="tiny counts (a check that everything runs)")
    ap.add_argument("--messages", type=int, help="messages per produce/consume measurement (default 20000 produce, 100000 consume)")
    ap.add_argument("--out", default=RESULTS, help="directory for <date>.json/.md/.png (default bench/results)")
    ap.add_argument("--no-install", action="store_true", help="do not apt-get missing peer servers")
    ap.add_argument("--auth", action="store_true",
                    help="also quiver-auth (auth on) next to quiver-async: what CURVE + ACL cost, same run")
    ap.add_argument("--trace", action="store_true",
                    help="also quiver-trace (message trace on) next to quiver-async: what tracing costs, same run")
    args = ap.parse_args(argv)

    systems = registry.resolve(args.only)
    if args.auth:
        systems = registry.resolve(",".join(dict.fromkeys([*systems, "quiver-async", "quiver-auth"])))
    if args.trace:
        systems = registry.resolve(",".join(dict.fromkeys([*systems, "quiver-async", "quiver-trace"])))
    workloads = [w.strip() for w in args.workloads.split(",")] if args.workloads else None
    for w in workloads or []:
        if w not in runner.WORKLOADS:
            ap.error(f"unknown workload {w!r}")
    counts = runner.SMOKE if args.smoke else runner.Counts()
    if args.messages:
        counts = runner.Counts(**{**counts.__dict__, "n": args.messages, "consume_n": args.messages})
    peers = [registry.PACKAGES[s] for s in systems if s in registry.PACKAGES]
    if peers and not args.no_install:
        servers.ensure_packages(peers)

    # SIGTERM (and SIGINT, even if inherited as ignored) unwind like Ctrl-C: every `with` stops its server
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    now = datetime.datetime.now()
    meta = {"date": now.strftime("%Y-%m-%d %H:%M"), "machine": _machine(), "repeat": args.repeat,
            "smoke": args.smoke, "counts": {k: v for k, v in counts.__dict__.items()},
            "versions": _versions(systems), "command": "python -m bench " + " ".join(argv or sys.argv[1:])}
    try:
        results = runner.run(systems, workloads, args.repeat, counts)
    except KeyboardInterrupt:
        print("\ninterrupted: every server started has been stopped", file=sys.stderr)
        return 130
    doc = {"meta": meta, "results": results, "targets": report.targets(results), "floor": report.floor_ratios(results)}
    paths = report.write(doc, args.out, now.strftime("%Y-%m-%d-%H%M"))
    print(report.markdown(doc))
    print("wrote " + ", ".join(paths.values()))
    return 1 if any(e["errors"] for e in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
