"""CPU per request on the data plane, in-process: a figure that holds on a loaded machine.

    python -m bench.cpu                 # N=20000, 5 runs, 1 KiB bodies
    python -m bench.cpu -n 5000 --runs 3 --only broker
    QUIVER_NO_SPEEDUPS=1 python -m bench.cpu    # the Python references alone

No sockets and no threads: what is timed is the CPU the calling thread spends
(`time.thread_time()`), so other processes on the machine slow the wall clock but not
the figure. The median of `--runs` runs is reported.

broker  A real broker App (ASYNC flush, a MessageStore in a temp dir) with its socket
        replaced by a sink; each request is the frames the SDK sends (built once, up
        front) handed to `Service.handle`, the entry the ROUTER loop calls: decode,
        schema, checks, append, reply frames. `send` is one 1 KiB SEND_MESSAGE;
        `pull` a PULL_MESSAGE of 32 messages (µs per request; per message in the json);
        `ack` one ACK_MESSAGE of one receipt handle, what SimpleConsumer.ack sends per
        message (of messages POP_MESSAGE delivered, untimed).
client  The SDK's own work: `build send` is Producer.send's request up to its frames
        (message checks, properties, schema, header), `send reply` the decode of a
        SEND_MESSAGE reply into a SendResult, `pull reply` the decode of a 32-message
        PULL reply into MessageExt (per request).

Writes bench/results/cpu-<date>.json.
"""

import argparse
import datetime
import json
import logging
import os
import statistics
import sys
import tempfile
import time

from quiver.wire import protocol, speedups
from quiver.wire import requests as rq
from quiver.wire.codes import RequestCode, ResponseCode

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
BODY = b"x" * 1024
TOPIC = "Cpu"
PULL_BATCH = 32
IDENTITY = b"\x00k\x8bEg"


class Sink:
    """The ROUTER socket's place: keeps the last reply, counts them."""

    def __init__(self):
        self.sent = 0
        self.last = None

    def send_multipart(self, frames, flags=0, copy=True):
        self.sent += 1
        self.last = frames

    def setsockopt(self, *a):
        pass


def _timed(fn, n: int) -> float:
    """µs of this thread's CPU per call of fn(i), i in range(n)."""
    t0 = time.thread_time()
    for i in range(n):
        fn(i)
    return (time.thread_time() - t0) / n * 1e6


def broker_app(data_dir: str):
    from quiver_broker.app import App
    from quiver_broker.config import Config
    config = Config(listen="127.0.0.1:0", advertise="127.0.0.1:10911", namesrv="127.0.0.1:1",
                    broker_name="broker-cpu", data_dir=data_dir, flush="async", segment_bytes=256 << 20,
                    index_slots=1 << 16, index_entries=1 << 20)
    app = App(config)
    app.store.open()
    app.service.use_socket(Sink())
    app.topics.config(TOPIC, create=True)
    return app


def send_frames(producer, n: int) -> list:
    """n SEND_MESSAGE requests, as Producer.send builds them (routing frame in front)."""
    from quiver import Message
    from quiver.client.base import MessageQueue
    mq = MessageQueue(TOPIC, "broker-cpu", 0)
    out = []
    for i in range(n):
        msg = Message(TOPIC, BODY, tags="A", keys=[f"k{i}"])
        _, props = producer._encode(msg)
        req, frames = producer._request(mq, [props], [msg.flag], [msg.body])
        out.append([IDENTITY, *protocol.request(RequestCode.SEND_MESSAGE, i + 1, req.ext(), frames)])
    return out


def bench_broker(n: int, producer) -> dict:
    with tempfile.TemporaryDirectory(prefix="quiver-cpu-") as d:
        app = broker_app(d)
        try:
            handle, sink = app.service.handle, app.service._sock
            requests = send_frames(producer, n)
            send_us = _timed(lambda i: handle(requests[i]), n)
            head = protocol.decode(sink.last[1:])
            if head.code != ResponseCode.SUCCESS:
                raise RuntimeError(f"send answered {head.code}: {head.remark}")
            pulls = [[IDENTITY, *protocol.request(rq.PullMessage(topic=TOPIC, queue_id=0, offset=k * PULL_BATCH,
                                                                 max_msgs=PULL_BATCH, group="g"), 10 ** 6 + k)]
                     for k in range(n // PULL_BATCH)]
            pull_us = _timed(lambda i: handle(pulls[i]), len(pulls))
            reply = sink.last
            if protocol.decode(reply[1:]).code != ResponseCode.SUCCESS:
                raise RuntimeError("pull did not succeed")
            acks = ack_frames(handle, sink, n)
            ack_us = _timed(lambda i: handle(acks[i]), len(acks))
            if protocol.decode(sink.last[1:]).code != ResponseCode.SUCCESS:
                raise RuntimeError("ack did not succeed")
        finally:
            app.transport.close()
            app.store.close()
            app.metadata.close()
    return {"send": send_us, "pull": pull_us, "ack": ack_us, "_pull_reply": reply[1:]}


def ack_frames(handle, sink, n: int) -> list:
    """ACK_MESSAGE requests, one receipt handle each as SimpleConsumer.ack sends them, for n
    messages popped (untimed) by POP_MESSAGEs of PULL_BATCH."""
    out = []
    for k in range(n // PULL_BATCH):
        handle([IDENTITY, *protocol.request(rq.PopMessage(group="g", topic=TOPIC, max_msgs=PULL_BATCH,
                                                           consume_from="first"), 2 * 10 ** 6 + k)])
        for h in rq.PopReply.decode(protocol.decode(sink.last[1:]).ext).handles:
            out.append([IDENTITY, *protocol.request(rq.AckMessage(group="g", topic=TOPIC, handles=[h]),
                                                    3 * 10 ** 6 + len(out))])
    return out


def bench_client(n: int, producer, pulled: list) -> dict:
    from quiver import Message
    from quiver.client.base import MessageQueue
    from quiver.client.message import decode_messages
    mq = MessageQueue(TOPIC, "broker-cpu", 0)
    msg = Message(TOPIC, BODY, tags="A", keys=["k"])

    def build(i):
        _, props = producer._encode(msg)
        req, frames = producer._request(mq, [props], [msg.flag], [msg.body])
        protocol.request(RequestCode.SEND_MESSAGE, i, req.ext(), frames)

    reply = protocol.reply(ResponseCode.SUCCESS, 7, "", dict(rq.SendReply.wire(TOPIC, 0, 12345, [987654321])))
    ids = ["0A000001000000000000000000000001"]

    def send_reply(i):
        producer._result(protocol.decode(reply), mq, "127.0.0.1:10911", ids)

    def pull_reply(i):
        env = protocol.decode(pulled)
        rq.PullReply.decode(env.ext)
        decode_messages(env.bodies[0], "broker-cpu")
    return {"build send": _timed(build, n), "send reply": _timed(send_reply, n),
            "pull reply": _timed(pull_reply, max(1, n // PULL_BATCH))}


def run_once(n: int, only: str) -> dict:
    from quiver import Producer
    producer = Producer("cpu", namesrv="127.0.0.1:1")  # never started: only its encoders run
    out = {}
    b = bench_broker(n, producer)
    if only in ("all", "broker"):
        out.update({"broker send": b["send"], "broker pull": b["pull"], "broker ack": b["ack"]})
    if only in ("all", "client"):
        out.update({f"client {k}": v for k, v in bench_client(n, producer, b["_pull_reply"]).items()})
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.cpu", description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=20_000, help="requests per run (default 20000)")
    ap.add_argument("--runs", type=int, default=5, help="runs; the median is reported (default 5)")
    ap.add_argument("--only", choices=("all", "broker", "client"), default="all")
    ap.add_argument("--out", default=None, help="json path (default bench/results/cpu-<date>.json)")
    args = ap.parse_args(argv)
    logging.getLogger("quiver_broker").setLevel(logging.ERROR)  # no name server here: its registration fails
    runs = [run_once(args.n, args.only) for _ in range(args.runs)]
    rows = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    impl = speedups.IMPLEMENTATION
    print(f"CPU per request (thread_time), median of {args.runs} runs of {args.n}; speedups: {impl}"
          + (f" ({speedups.REASON})" if speedups.REASON else ""))
    print(f"{'path':<24}{'µs/request':>12}{'µs/message':>12}{'min..max':>16}")
    for k, v in rows.items():
        per = v / PULL_BATCH if "pull" in k else v
        lo, hi = min(r[k] for r in runs), max(r[k] for r in runs)
        print(f"{k:<24}{v:>12.1f}{per:>12.2f}{f'{lo:.1f}..{hi:.1f}':>16}")
    os.makedirs(RESULTS, exist_ok=True)
    path = args.out or os.path.join(RESULTS, f"cpu-{datetime.datetime.now():%Y%m%d-%H%M%S}.json")
    with open(path, "w") as f:
        json.dump({"n": args.n, "runs": runs, "median_us": rows, "implementation": impl, "pull_batch": PULL_BATCH,
                   "body_bytes": len(BODY), "python": sys.version.split()[0]}, f, indent=1)
    print(f"saved {path}")


if __name__ == "__main__":
    main()
