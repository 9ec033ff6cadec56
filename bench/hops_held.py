"""A held pull's wake: how long after a put's reply the pull held on its queue is answered.

    python -m bench.hops_held                 # 300 rounds
    python -m bench.hops_held --rounds 1000

One broker (ASYNC flush), a topic of one queue. Each round a PULL_MESSAGE (suspend 5 s) is
sent on a transport of its own and left 10 ms to be held at the broker; then a blocking
send() stores the message it waits for. Printed: the send's round trip, and when the pull's
answer reached this process, after send() was called and after it returned. A pull answered
in the put's loop turn arrives about with the send's reply; one woken by a timer or a later
turn arrives that much after it.
"""

import argparse
import tempfile
import threading
import time

from quiver import Admin, Message, Producer
from quiver.client import queue_puller
from quiver.wire.transport import Transport

from bench.peers import base


def rounds(n: int) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory(prefix="quiver-bench-held-") as d:
        cluster = base.one_broker(d, "--flush", "async")
        try:
            addr = next(s.addr for s in cluster.services if s.role == "broker")
            admin = Admin(namesrv=cluster.namesrv)
            admin.create_topic("Held", queues=1)
            admin.shutdown()
            out: dict[str, list[float]] = {"send() round trip": [], "pull answered, after send() was called": [],
                                           "pull answered, after send() returned": []}
            with Producer("held", namesrv=cluster.namesrv) as p:
                msg = Message("Held", b"x" * 1024)
                p.send(msg)
                t = Transport("held-pull")
                try:
                    for offset in range(1, n + 1):
                        answered: list[float] = []
                        done = threading.Event()
                        t.send(addr, queue_puller.request("Held", 0, offset, suspend_ms=5000), None, (),
                               lambda env: (answered.append(time.perf_counter()), done.set()), 10.0)
                        time.sleep(0.01)
                        t0 = time.perf_counter()
                        p.send(msg)
                        t1 = time.perf_counter()
                        if not done.wait(10):
                            raise RuntimeError(f"the pull held at offset {offset} was not answered")
                        for name, v in zip(out, (t1 - t0, answered[0] - t0, answered[0] - t1)):
                            out[name].append(v)
                finally:
                    t.close()
            return out
        finally:
            cluster.stop()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=300)
    a = ap.parse_args(argv)
    for name, v in rounds(a.rounds).items():
        s = base.percentiles(v)
        print(f"{name}: p50 {s['p50_us']:,.0f} µs, p99 {s['p99_us']:,.0f} µs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
