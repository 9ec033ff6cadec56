"""The live consumer of the end-to-end latency run, in its own process.

Usage: python -m bench.e2e_consumer NAMESRV TOPIC COUNT SECONDS [io|direct] [GROUP]
Prints {"count", "p50_us", "p99_us", "p999_us"} as JSON: latency = receive time - the
producer's send time carried in property "t" (same machine, same clock). "direct":
ConsumerOptions.direct_poll (poll() holds the pulls on its own socket); GROUP: "e2e".
"""

import json
import sys
import time

from quiver import PullConsumer

from bench.peers.base import percentiles


def main(namesrv: str, topic: str, count: int, seconds: float, direct: bool = False, group: str = "e2e") -> None:
    lat = []
    with PullConsumer(group, namesrv=namesrv, consume_from="last", direct_poll=direct) as c:
        c.subscribe(topic)
        c.poll(0.3)
        print("ready", flush=True)
        deadline = time.monotonic() + seconds
        while len(lat) < count and time.monotonic() < deadline:
            for m in c.poll(0.05):
                lat.append(time.time() - float(m.properties["t"]))
    print(json.dumps(percentiles(lat)), flush=True)


if __name__ == "__main__":
    extra = sys.argv[5:]
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), extra[:1] == ["direct"],
         extra[1] if len(extra) > 1 else "e2e")
