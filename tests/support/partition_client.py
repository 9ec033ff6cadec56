"""The partition suite's client processes, run inside the clients' network namespace
(`ip netns exec <ns> python -m support.partition_client <role> ...`): the test process lives in
the host's namespace and reaches the cluster only through them.

  produce  sends bodies "<worker>-<n>|..." until SIGTERM; each SEND_OK a JSON line
           {id, mid, q, o, b (storing broker), ts (sent), tr (answer)} in --out
  pull     a PullConsumer (one thread, committing as it goes); each delivery {g, q, o, id, t}
  push     a PushConsumer (POP with --pop); each delivery likewise
  agent    JSON requests on stdin, one answer a line on stdout (ping, info, topic, read)
Times are time.monotonic(), one clock for every process of the machine."""

import argparse
import json
import signal
import sys
import threading
import time

from faults.store_checks import read_queue
from quiver import Admin, ConsumeResult, Message, Producer, PullConsumer, PushConsumer, SendStatus
from quiver.client.message import host_str
from quiver.errors import QuiverError
from quiver.wire import requests as rq
from quiver.wire.codes import RequestCode
from quiver.wire.curve import read_credentials
from quiver.wire.transport import Transport

class Out:
    """JSON lines, flushed each: a killed client loses at most the line being written."""

    def __init__(self, path: str):
        self.f = open(path, "a", buffering=1)
        self.lock = threading.Lock()

    def write(self, rec: dict) -> None:
        line = json.dumps(rec, separators=(",", ":")) + "\n"
        with self.lock:
            self.f.write(line)


def produce(a, stop: threading.Event) -> None:
    out = Out(a.out)
    p = Producer(f"pp-{a.name}", namesrv=a.namesrv, credentials=a.creds, send_timeout=1.0, retries=0,
                 auto_batch=False)
    p._route_refresh_s = 0.5
    p.start()
    n = 0
    try:
        while not stop.is_set():
            mid = f"{a.name}-{n}"
            n += 1
            body = f"{mid}|".encode() + b"x" * (n % 64)
            ts = time.monotonic()
            try:
                r = p.send(Message(a.topic, body))
            except QuiverError:
                time.sleep(0.02)
                continue
            if r.status is SendStatus.SEND_OK:
                out.write({"id": mid, "mid": r.msg_id, "q": r.queue_id, "o": r.queue_offset,
                           "b": host_str(r.store_host) if r.store_host else "?", "body": body.decode(), "ts": ts, "tr": time.monotonic()})
    finally:
        p.shutdown()


def delivered(out: Out, group: str, msgs) -> None:
    now = time.monotonic()
    for m in msgs:
        out.write({"g": group, "q": m.queue_id, "o": m.queue_offset, "id": m.body.split(b"|", 1)[0].decode(),
                   "t": now})


def pull(a, stop: threading.Event) -> None:
    out = Out(a.out)
    c = PullConsumer(a.group, namesrv=a.namesrv, credentials=a.creds, consume_from="first",
                     commit_interval_ms=200)
    c.subscribe(a.topic)
    c.start()
    try:
        while not stop.is_set():
            try:
                delivered(out, a.group, c.poll(0.3))
            except QuiverError:
                time.sleep(0.1)
    finally:
        c.shutdown()


def push(a, stop: threading.Event) -> None:
    out = Out(a.out)

    def listener(msgs):
        delivered(out, a.group, msgs)
        return ConsumeResult.SUCCESS

    opts = {"pop": True, "pop_invisible_ms": 20_000} if a.pop else {"consume_from": "first", "threads": 2}
    c = PushConsumer(a.group, namesrv=a.namesrv, credentials=a.creds, **opts)
    c.subscribe(a.topic)
    c.register(listener)
    c.start()
    try:
        while not stop.wait(0.5):
            pass
    finally:
        c.shutdown()


# ---- the agent: the test process's hands inside the namespace ----------------------------------

def read_rows(t: Transport, addr: str, topic: str, queue_id: int) -> list[list]:
    """[queue offset, id, body] of every record the broker serves from the queue (CRC checked)."""
    out = []
    for off, rec in sorted(read_queue(t, addr, topic, queue_id).items()):
        body = bytes(rec.body)
        out.append([off, body.split(b"|", 1)[0].decode(), body.decode()])
    return out


def controllers(t: Transport, namesrv: str) -> dict:
    """Each controller's answer (None: no answer) and the leader's view of every group."""
    out = {"answers": {}, "leader": None, "groups": []}
    for ns in namesrv.split(";"):
        try:
            r = rq.ReplicaInfoReply.decode(t.call(ns, rq.ReplicaInfo(), timeout=0.5).ext)
        except QuiverError:
            out["answers"][ns] = None
            continue
        g = next((g for g in r.groups if g.get("broker_name") == "pg"), {})
        out["answers"][ns] = {"leader": r.leader, "master": g.get("master"), "epoch": g.get("epoch"),
                              "term": r.raft.get("term")}
        if r.leader and out["leader"] is None:
            out["leader"], out["groups"] = ns, r.groups
    return out


def agent(a, stop: threading.Event) -> None:
    t = Transport("partition-agent", credentials=read_credentials(a.creds) if a.creds else None)
    admin = None
    for line in sys.stdin:
        req = json.loads(line)
        try:
            op = req["op"]
            if op == "ping":
                got = {}
                for addr in req["addrs"]:
                    try:
                        got[addr] = bool(t.call(addr, rq.Ping(), timeout=0.5).ext is not None)
                    except QuiverError:
                        got[addr] = False
                ans = got
            elif op == "info":
                ans = controllers(t, a.namesrv)
            elif op == "status":
                ans = t.call(req["addr"], RequestCode.STATUS, timeout=3.0).ext["status"]
            elif op == "topic":
                admin = admin or Admin(namesrv=a.namesrv, credentials=a.creds).start()
                admin.create_topic(req["topic"], queues=req["queues"])
                ans = True
            elif op == "read":
                ans = {str(q): read_rows(t, req["addr"], req["topic"], q) for q in range(req["queues"])}
            else:
                raise ValueError(f"unknown op {op!r}")
            print(json.dumps({"ok": ans}), flush=True)
        except Exception as exc:   # the test reads the failure; the agent goes on
            print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
    if admin:
        admin.shutdown()
    t.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("role", choices=["produce", "pull", "push", "agent"])
    ap.add_argument("--namesrv", required=True)
    ap.add_argument("--creds", default=None)
    ap.add_argument("--topic", default="")
    ap.add_argument("--out", default="")
    ap.add_argument("--name", default="p0")
    ap.add_argument("--group", default="")
    ap.add_argument("--pop", action="store_true")
    a = ap.parse_args()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    if a.role == "agent":
        agent(a, stop)
        return
    {"produce": produce, "pull": pull, "push": push}[a.role](a, stop)


if __name__ == "__main__":
    main()
