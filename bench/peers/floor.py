"""The floor: what bare pyzmq does on the latency workloads, same machine, same run.

sync: a DEALER sends the 1 KiB body to a ROUTER in another process (bench.raw_server)
and waits for its 1-byte ack, as a sync send waits for its receipt: the round trip a
broker built on this socket pair cannot beat. e2e (and the load steps): a PUSH paces
frames [send time, 1 KiB body] at the rate asked, with the same pacing loop as Quiver's
e2e producer (base.paced_runs), to a PULL in another process that takes receive time -
send time (time.time(): one host, one clock). Both cross the same threads a Quiver
message does on its way (app thread, libzmq I/O threads, the peer's thread) minus all
of Quiver's own work, so Quiver's sync and e2e rows divided by these say what the
design costs above its transport (report.floor_ratios).

    python -m bench.peers.floor sink COUNT SECONDS    # the PULL side (bench runs it)
"""

import json
import subprocess
import sys
import time

import zmq

from quiver.tools.local import free_port

from bench.peers import base

BODY = b"x" * 1024
READY = b"ready?"


class Floor(base.System):
    name = "floor"
    durability = "none: bare pyzmq, nothing stored (the transport's own latency)"
    notes = {"sync": "DEALER -> ROUTER round trip, 1 KiB up, 1 B ack",
             "e2e": "PUSH -> PULL one way, 1 KiB, paced like Quiver's e2e"}
    warm_up = False   # nothing to route or create: runner skips the warm-up produce

    def __enter__(self):
        self.port = free_port()
        self.server = subprocess.Popen([sys.executable, "-m", "bench.raw_server", str(self.port)], cwd=base.ROOT,
                                       start_new_session=True)
        self.sock = None
        try:
            probe = self._dealer()   # asks queued while the server started are answered late: a socket of
            try:                     # its own, so no late ack is taken for the answer to a timed request
                _until_answered(probe, 30.0)
            finally:
                probe.close(0)
            self.sock = self._dealer()
            self.sock.send(b"warm")
            self.sock.recv()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _dealer(self):
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(f"tcp://127.0.0.1:{self.port}")
        return sock

    def __exit__(self, *exc):
        if self.sock is not None:
            self.sock.close(0)
        base.stop(self.server)

    def sync(self, samples: int) -> dict:
        sock, lat = self.sock, []
        for _ in range(min(200, samples)):   # warm, as Quiver's sync sends one first
            sock.send(BODY)
            sock.recv()
        for _ in range(samples):
            t = time.perf_counter()
            sock.send(BODY)
            sock.recv()
            lat.append(time.perf_counter() - t)
        return base.latency_stats(lat, "sync")

    def e2e(self, rate: int, seconds: float) -> dict:
        n = int(rate * seconds)
        sink = subprocess.Popen([sys.executable, "-m", "bench.peers.floor", "sink", str(n), str(seconds + 15)],
                                stdout=subprocess.PIPE, text=True, cwd=base.ROOT, start_new_session=True)
        push = zmq.Context.instance().socket(zmq.PUSH)
        push.setsockopt(zmq.LINGER, 0)
        push.setsockopt(zmq.SNDHWM, 0)
        try:
            port = int(sink.stdout.readline())
            push.connect(f"tcp://127.0.0.1:{port}")
            push.send_multipart([READY, b""])          # queued until connected; the sink says ready on it
            if sink.stdout.readline().strip() != "ready":
                raise RuntimeError("floor sink did not say ready")

            def send_many(k: int) -> None:
                for _ in range(k):
                    push.send_multipart([repr(time.time()).encode(), BODY])
            t0 = time.perf_counter()
            base.paced_runs(rate, n, send_many)
            rate_done = n / (time.perf_counter() - t0)
            out = json.loads(sink.stdout.readline())
        finally:
            push.close(0)
            base.stop(sink)
        return base.e2e_result(self.name, n, out, rate_done)


def _until_answered(sock, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        sock.send(b"warm")
        if sock.poll(100):
            return
    raise RuntimeError("bench.raw_server did not answer")


def sink(count: int, seconds: float) -> None:
    pull = zmq.Context.instance().socket(zmq.PULL)
    pull.setsockopt(zmq.LINGER, 0)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    print(port, flush=True)
    lat: list[float] = []
    deadline = time.monotonic() + seconds
    ready = False
    while len(lat) < count and time.monotonic() < deadline:
        if not pull.poll(50):
            continue
        stamp, _body = pull.recv_multipart()
        now = time.time()
        if stamp == READY:
            if not ready:
                print("ready", flush=True)
                ready = True
            continue
        lat.append(now - float(stamp))
    print(json.dumps(base.percentiles(lat)), flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] != ["sink"]:
        raise SystemExit(__doc__)
    sink(int(sys.argv[2]), float(sys.argv[3]))
