"""CPU per message of a producer and of its broker: where produce throughput goes.

    python -m bench.produce_cpu                          # pipelined send_async, 1 KiB, 8 s, ASYNC flush
    python -m bench.produce_cpu --mode batch --size 1024  # send_batch_async of 100, 10 in flight
    python -m bench.produce_cpu --flush sync --size 64
    python -m bench.produce_cpu --no-sockets --size 64    # the SDK's own work only (no broker, no IO thread)

One name server and one broker on loopback; the producer is `python -m bench`'s (bench.peers.
quiver_system.Client: window 1000) in this process. Prints one JSON line: msg/s, this process's
CPU per message (every thread), the broker's (from /proc), each thread's share of both, and the
collector's time in this process. CPU time is what a loaded machine does not distort; the rate
it does. `--no-sockets` sends through a stand-in transport whose replies are made in the same
thread: what is left of the client's CPU once the sockets and thread hand-offs are taken away.
"""

import argparse
import collections
import gc
import json
import os
import sys
import tempfile
import time

import orjson

from quiver import Admin, Message, Producer
from quiver.client.base import Route
from quiver.wire import protocol, requests as rq
from quiver.wire.codes import ResponseCode

from bench.core import pipelined_batches
from bench.peers import base
from bench.peers.base import cpu_s
from bench.peers.quiver_system import Client


def threads_cpu(pid: int) -> dict[str, float]:
    """{thread name#id: CPU seconds so far} of process `pid`."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            name = "main" if tid == str(pid) else open(f"/proc/{pid}/task/{tid}/comm").read().strip()
            out[f"{name}#{tid}"] = base.stat_cpu_s(f"/proc/{pid}/task/{tid}/stat")
        except OSError:   # ended meanwhile
            pass
    return out


def _shares(before: dict, after: dict, n: int) -> dict[str, float]:
    used = {k: (after[k] - before.get(k, 0.0)) / n * 1e6 for k in after}
    return {k: round(v, 2) for k, v in sorted(used.items(), key=lambda kv: -kv[1]) if v > 0.005}


def live(mode: str, size: int, seconds: float, flush: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="quiver-produce-cpu-") as tmp:
        cluster = base.one_broker(tmp, "--flush", flush)
        try:
            broker = next(s.pid for s in cluster.services if s.role == "broker")
            admin = Admin(namesrv=cluster.namesrv)
            topic = base.unique("T")
            admin.create_topic(topic, queues=4)
            client = Client({"namesrv": cluster.namesrv})
            client.produce(topic, 2000, size)       # routes, connections, first segment: not timed
            batch = [Message(topic, b"x" * size)] * 100
            gc_s, began = [0.0], [0.0]

            def timed_gc(phase, _info):
                if phase == "start":
                    began[0] = time.perf_counter()
                else:
                    gc_s[0] += time.perf_counter() - began[0]
            gc.callbacks.append(timed_gc)
            me, b_threads = threads_cpu(os.getpid()), threads_cpu(broker)
            sent, c0, b0, t0 = 0, time.process_time(), cpu_s(broker), time.perf_counter()
            while time.perf_counter() - t0 < seconds:
                if mode == "pipe":
                    sent += client.produce(topic, 20_000, size)
                else:
                    pipelined_batches(client.p, batch, 200, window=10)
                    sent += 20_000
            took = time.perf_counter() - t0
            out = {"msgs_s": round(sent / took), "client_cpu_us": round((time.process_time() - c0) / sent * 1e6, 2),
                   "broker_cpu_us": round((cpu_s(broker) - b0) / sent * 1e6, 2),
                   "client_threads_us": _shares(me, threads_cpu(os.getpid()), sent),
                   "broker_threads_us": _shares(b_threads, threads_cpu(broker), sent),
                   "client_gc_share": round(gc_s[0] / took, 4)}
            gc.callbacks.remove(timed_gc)
            client.close()
            admin.shutdown()
            return out
        finally:
            cluster.stop()


class _Loopback:
    """A transport stand-in: keeps each request's callback; `answer()` replies SEND_OK to all."""

    def __init__(self):
        self.sent, self.next = collections.deque(), 0

    def send(self, addr, code, ext, frames, done, timeout):
        protocol.request(code, 1, ext, frames)      # the header the real transport encodes
        self.sent.append((ext, done))

    def answer(self) -> None:
        while self.sent:
            ext, done = self.sent.popleft()
            k = len(ext["m"])
            reply = rq.SendReply.wire(ext["t"], ext.get("q", 0), self.next, list(range(self.next, self.next + k)))
            self.next += k
            done(protocol.Envelope(ResponseCode.SUCCESS, 1, orjson.loads(orjson.dumps(reply)), [], ""))

    def close(self) -> None:
        pass


def no_sockets(size: int, n: int = 100_000, rounds: int = 5) -> dict:
    p = Producer("produce-cpu", namesrv="127.0.0.1:1")
    io = p._transport = _Loopback()
    p._started = True
    route = Route("T", {"brokers": [{"broker_name": "b", "addrs": {"0": "127.0.0.1:2"}}],
                        "queues": [{"broker_name": "b", "read": 4, "write": 4, "perm": 6}]})
    p._routes["T"] = (time.monotonic() + 1e9, route)
    msg = Message("T", b"x" * size)

    def run(count: int) -> None:
        inflight = collections.deque()
        for _ in range(count):
            inflight.append(p.send_async(msg))
            if len(inflight) >= base.WINDOW:
                io.answer()
                while inflight:
                    inflight.popleft().result(0)
        io.answer()
        while inflight:
            inflight.popleft().result(0)
    run(20_000)
    per = []
    for _ in range(rounds):
        c0 = time.process_time()
        run(n)
        per.append((time.process_time() - c0) / n * 1e6)
    return {"client_cpu_us_median": round(sorted(per)[len(per) // 2], 2), "rounds": [round(v, 2) for v in per]}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=("pipe", "batch"), default="pipe")
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--flush", choices=("async", "sync"), default="async")
    ap.add_argument("--no-sockets", action="store_true")
    a = ap.parse_args(argv)
    out = no_sockets(a.size) if a.no_sockets else live(a.mode, a.size, a.seconds, a.flush)
    out.update(mode="no-sockets" if a.no_sockets else a.mode, size=a.size, flush=a.flush, load=os.getloadavg()[0])
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
