"""The transport IO thread's CPU for one request round trip, as a consumer's pull loop makes it.

    python -m bench.io_round                  # 20000 rounds, 3 runs, 1 KiB answers
    python -m bench.io_round --rounds 5000 --body 0

A ROUTER in another process answers every request at once with a one-record-sized body; here,
each answer's callback (on the IO thread) sends the next request, as PushConsumer's next pull
leaves from the callback of the last. Printed: the IO thread's CPU time per round (its
CLOCK_THREAD_CPUTIME_ID across the rounds, so the load of other processes does not count, only
their cache misses) and the wall time per round. No broker: the cost of the transport itself.
"""

import argparse
import statistics
import subprocess
import sys
import threading
import time

ECHO = """
import sys, zmq
from quiver.wire import protocol
from quiver.wire.codes import ResponseCode
body = b"x" * int(sys.argv[1])
sock = zmq.Context.instance().socket(zmq.ROUTER)
port = sock.bind_to_random_port("tcp://127.0.0.1")
print(port, flush=True)
bodies = (body,) if body else ()
while True:
    ident, *frames = sock.recv_multipart()
    env = protocol.decode(frames)
    if env.code == 0:
        break
    sock.send_multipart([ident, *protocol.reply(ResponseCode.SUCCESS, env.id, "", {"n": 1, "m": 0, "x": 9}, bodies)])
"""


def run(addr: str, rounds: int) -> tuple[float, float]:
    """(IO-thread CPU µs, wall µs) per round over `rounds` chained requests."""
    from quiver.wire.codes import RequestCode
    from quiver.wire.transport import Transport
    t = Transport("io-round")
    try:
        t.call_future(addr, RequestCode.PING).result(10)   # connected
        done, left, cpu = threading.Event(), [rounds], [0.0]
        ext = {"t": "T", "q": 1, "o": 0, "g": "G", "mm": 32}

        def answered(env):
            left[0] -= 1
            if left[0] <= 0:
                cpu[0] = time.clock_gettime(time.CLOCK_THREAD_CPUTIME_ID) - cpu[0]
                done.set()
                return
            t.send(addr, RequestCode.PING, ext, (), answered)

        def start(_env):
            cpu[0] = time.clock_gettime(time.CLOCK_THREAD_CPUTIME_ID)
            t.send(addr, RequestCode.PING, ext, (), answered)

        t0 = time.monotonic()
        t.send(addr, RequestCode.PING, None, (), start)
        if not done.wait(600):
            raise SystemExit("rounds did not finish")
        wall = time.monotonic() - t0
        return cpu[0] / rounds * 1e6, wall / rounds * 1e6
    finally:
        t.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=20000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--body", type=int, default=1024, help="answer body bytes (default 1024)")
    args = ap.parse_args()
    echo = subprocess.Popen([sys.executable, "-c", ECHO, str(args.body)], stdout=subprocess.PIPE, text=True)
    try:
        addr = f"127.0.0.1:{int(echo.stdout.readline())}"
        cpus = []
        for i in range(args.runs):
            cpu_us, wall_us = run(addr, args.rounds)
            cpus.append(cpu_us)
            print(f"run {i + 1}: IO thread {cpu_us:.1f} µs CPU a round, {wall_us:.1f} µs wall a round")
        print(f"median: {statistics.median(cpus):.1f} µs CPU a round ({args.rounds} rounds, {args.body} B answers)")
    finally:
        echo.kill()
        echo.wait()


if __name__ == "__main__":
    main()
