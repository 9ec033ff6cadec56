"""Master/slave benchmark: python -m bench.ha [--messages N] [--rate R] [--seconds S] [--size B]

1. produce throughput of a SYNC_MASTER (SEND_OK after a slave's ack) vs an
   ASYNC_MASTER, each with one slave, same run, same load (send_async, N
   messages of B bytes): msg/s and the ratio (target >= 0.5);
2. replication lag under a steady load of R msg/s for S seconds (ASYNC_MASTER,
   so the producer is not paced by the acks): the master's per-put ack latency
   (put -> slave ack of that offset) p50/p99/max, and the slave's byte lag
   sampled every 100 ms. The achieved rate is printed: on a small shared
   machine R may not be reached (then say so).
Real processes on loopback (LocalCluster); prints one JSON object.
"""

import argparse
import json
import tempfile
import time

from quiver import Admin, Message, Producer
from quiver.wire import requests as rq
from quiver.tools.local import LocalCluster
from quiver.wire.transport import Transport


def _status(t: Transport, addr: str) -> dict:
    return rq.StatusReply.decode(t.call(addr, rq.Status()).ext).status


def _cluster(tmp, role):
    c = LocalCluster(tmp)
    c.add_namesrv()
    c.wait()
    m = c.add_master(None, "bk", role)
    s = c.add_slave(m)
    c.wait()
    c.wait_registered(2)
    Admin(namesrv=c.namesrv).create_topic("HaBench", queues=4)
    t = Transport("bench")
    wait_slave(t, m.addr)
    return c, m, s, t


def wait_slave(t: Transport, addr: str, timeout_s: float = 20) -> None:
    """Block until the master at addr reports a connected slave."""
    deadline = time.monotonic() + timeout_s
    while not _status(t, addr)["ha"]["slaves"]:
        if time.monotonic() > deadline:
            raise RuntimeError("slave did not connect")
        time.sleep(0.05)


def timed_sends(namesrv: str, topic: str, n: int, size: int) -> dict:
    """n pipelined sends of `size` bytes after a 500-message warm-up: rate and statuses."""
    body = b"x" * size
    with Producer("bench", namesrv=namesrv) as p:
        for f in [p.send_async(Message(topic, body)) for _ in range(500)]:  # warm-up
            f.result(30)
        t0 = time.monotonic()
        futs = [p.send_async(Message(topic, body)) for _ in range(n)]
        statuses: dict = {}
        for f in futs:
            st = f.result(60).status.value
            statuses[st] = statuses.get(st, 0) + 1
        dt = time.monotonic() - t0
    return {"messages": n, "seconds": round(dt, 3), "msg_per_s": round(n / dt), "statuses": statuses}


def throughput(role, n, size) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        c, m, s, t = _cluster(tmp, role)
        try:
            return {"role": role, **timed_sends(c.namesrv, "HaBench", n, size)}
        finally:
            t.close()
            c.stop()


def lag(rate, seconds, size) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        c, m, s, t = _cluster(tmp, "ASYNC_MASTER")
        try:
            body = b"y" * size
            tick = 0.01
            per_tick = max(1, int(rate * tick))
            lag_bytes = []
            futs = []
            with Producer("bench", namesrv=c.namesrv) as p:
                t0 = time.monotonic()
                nxt, sent, last_sample = t0, 0, t0
                while time.monotonic() - t0 < seconds:
                    futs.extend(p.send_async(Message("HaBench", body)) for _ in range(per_tick))
                    sent += per_tick
                    now = time.monotonic()
                    if now - last_sample >= 0.1:
                        last_sample = now
                        st = _status(t, m.addr)
                        lag_bytes.extend(x["lag_bytes"] for x in st["ha"]["slaves"])
                    nxt += tick
                    if nxt > now:
                        time.sleep(nxt - now)
                for f in futs:
                    f.result(60)
                dt = time.monotonic() - t0
            time.sleep(0.5)  # let the last acks and the 200 ms status snapshot land
            st = _status(t, m.addr)
            link = st["ha"]["slaves"][0]
            lb = sorted(lag_bytes) or [0]
            return {"target_msg_per_s": rate, "achieved_msg_per_s": round(sent / dt), "seconds": round(dt, 2),
                    "ack_latency_ms": link["ack_latency"],
                    "lag_bytes_p99": lb[min(len(lb) - 1, int(0.99 * len(lb)))], "lag_bytes_max": lb[-1],
                    "final_lag_bytes": link["lag_bytes"]}
        finally:
            t.close()
            c.stop()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=30_000)
    ap.add_argument("--rate", type=int, default=10_000)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--size", type=int, default=1024)
    a = ap.parse_args(argv)
    async_ = throughput("ASYNC_MASTER", a.messages, a.size)
    sync = throughput("SYNC_MASTER", a.messages, a.size)
    out = {"throughput": {"async": async_, "sync": sync,
                          "sync_over_async": round(sync["msg_per_s"] / async_["msg_per_s"], 2)},
           "lag": lag(a.rate, a.seconds, a.size)}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
