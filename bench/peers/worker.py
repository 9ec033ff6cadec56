"""Child process of the bench: a concurrent producer or the live e2e consumer of one system.

    python -m bench.peers.worker SYSTEM produce '{"conn":..., "topic":..., "n":..., "size":...}'
        prints "ready" once connected; each "go" line on stdin produces n messages
        (window 1000) and prints {"t0", "t1", "acked"} (epoch seconds); exits at EOF.
    python -m bench.peers.worker SYSTEM e2e '{"conn":..., "topic":..., "count":..., "seconds":...}'
        prints "ready" once subscribed, then {"count", "p50_us", "p99_us", "p999_us"} when done.

Latency = receive time - the send time (epoch seconds) the producer put in the
message; producer and consumer share this machine's clock.
"""

import json
import sys
import time

from bench.peers import base, registry


def main(system: str, role: str, params: dict) -> None:
    mod = registry.client_module(system)
    if role == "produce":
        client = mod.Client(params["conn"])
        try:
            print("ready", flush=True)
            for line in sys.stdin:
                if line.strip() != "go":
                    continue
                t0 = time.time()
                acked = client.produce(params["topic"], params["n"], params["size"])
                print(json.dumps({"t0": t0, "t1": time.time(), "acked": acked}), flush=True)
        finally:
            client.close()
    elif role == "e2e":
        lat = mod.e2e_consume(params["conn"], params["topic"], params["count"], params["seconds"],
                              lambda: print("ready", flush=True))
        print(json.dumps(base.percentiles(lat)), flush=True)
    else:
        raise SystemExit(f"unknown role {role!r}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]))
