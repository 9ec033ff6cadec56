"""SYNC load for the swarm's rolling-update test, run in a client container on the stack's network.

    python swarm_load.py NAMESRV CREDENTIALS TOPIC IO_DIR

One producer sends unique bodies with SYNC flush, one at a time, each retried until acknowledged;
one consumer group reads the topic all along. IO_DIR/progress.json says how far it got (every
second); once IO_DIR/stop exists the producer stops, the group reads until it has every
acknowledged body (at most 90 s more), and IO_DIR/result.json says what happened: the bodies
acknowledged (and when, seconds after the start), every delivery by body and position, the sends
retried, the longest pauses.
"""

import collections
import json
import os
import sys
import threading
import time

from quiver import Admin, Message, Producer, PullConsumer
from quiver.errors import QuiverError

GIVE_UP_S = 60.0   # one body's attempts, at most


def create_topic(ns: str, creds: str, topic: str) -> None:
    with Admin(namesrv=ns, credentials=creds) as admin:
        deadline = time.monotonic() + 60
        while True:   # the group's master may be being elected
            try:
                admin.create_topic(topic, queues=4)
                return
            except QuiverError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)


class Load:
    def __init__(self, ns: str, creds: str, topic: str):
        self.ns, self.creds, self.topic = ns, creds, topic
        self.acked: list[tuple[str, float]] = []     # body, monotonic time of its SEND_OK
        self.retried: set[str] = set()               # bodies sent more than once (may be stored twice)
        self.failed: list[str] = []                  # bodies never acknowledged (given up)
        self.errors: collections.Counter = collections.Counter()
        self.deliveries: dict[str, list[list]] = collections.defaultdict(list)   # body -> [[queue, offset]]
        self.group_log: list[list] = []              # [seconds after the start, master, in-sync set]
        self.stop_sending, self.stop_reading = threading.Event(), threading.Event()

    def send(self) -> None:
        with Producer("swarm-roll", namesrv=self.ns, credentials=self.creds, send_timeout=3.0,
                      auto_batch=False) as p:
            i = 0
            while not self.stop_sending.is_set():
                body, i = f"r-{i}", i + 1
                give_up = time.monotonic() + GIVE_UP_S
                while True:
                    try:
                        if p.send(Message(self.topic, body.encode())).status.value == "SEND_OK":
                            self.acked.append((body, time.monotonic()))
                            break
                        self.errors["not SEND_OK"] += 1
                    except QuiverError as exc:
                        self.errors[type(exc).__name__] += 1
                    self.retried.add(body)
                    if time.monotonic() > give_up:
                        self.failed.append(body)
                        break
                    time.sleep(0.05)

    def read(self) -> None:
        with PullConsumer("swarm-roll-group", namesrv=self.ns, credentials=self.creds, consume_from="first") as c:
            c.subscribe(self.topic, "*")
            while not self.stop_reading.is_set():
                try:
                    for m in c.poll(0.3):
                        self.deliveries[m.body.decode()].append([m.queue_id, m.queue_offset])
                except QuiverError as exc:
                    self.errors[f"poll {type(exc).__name__}"] += 1
                    time.sleep(0.2)

    def watch(self, t0: float) -> None:
        """The group's master and in-sync set when they change: where a pause came from."""
        last = None
        with Admin(namesrv=self.ns, credentials=self.creds) as admin:
            while not self.stop_reading.is_set():
                try:
                    rows = [r for r in admin.ha_status() if r["broker"] == "broker-a"]
                    master = [r for r in rows if r["id"] == 0]
                    now = (master[0]["addr"] if master else None,
                           sorted(master[0].get("ha", {}).get("sync_state_set", [])) if master else [])
                except QuiverError as exc:
                    now = (f"error {type(exc).__name__}", [])
                if now != last:
                    self.group_log.append([round(time.monotonic() - t0, 1), *now])
                    last = now
                time.sleep(1)

    def pauses(self, t0: float, n: int = 3) -> list[list[float]]:
        """The n longest gaps between acknowledgements: [seconds after the start, length]."""
        times = [t for _, t in self.acked]
        gaps = sorted(((b - a, a) for a, b in zip(times, times[1:])), reverse=True)[:n]
        return [[round(a - t0, 1), round(g, 2)] for g, a in gaps]


def main(ns: str, creds: str, topic: str, io: str) -> None:
    create_topic(ns, creds, topic)
    load = Load(ns, creds, topic)
    t0 = time.monotonic()
    threads = [threading.Thread(target=load.send, daemon=True), threading.Thread(target=load.read, daemon=True),
               threading.Thread(target=load.watch, args=(t0,), daemon=True)]
    for th in threads:
        th.start()
    while not os.path.exists(os.path.join(io, "stop")):
        progress = {"acked": len(load.acked), "seen": len(load.deliveries), "s": round(time.monotonic() - t0, 1)}
        with open(os.path.join(io, "progress.json.tmp"), "w") as f:
            json.dump(progress, f)
        os.replace(os.path.join(io, "progress.json.tmp"), os.path.join(io, "progress.json"))
        time.sleep(1)
    load.stop_sending.set()
    threads[0].join(GIVE_UP_S + 10)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and any(b not in load.deliveries for b, _ in load.acked):
        time.sleep(0.5)
    load.stop_reading.set()
    threads[1].join(30)
    out = {"acked": [b for b, _ in load.acked], "retried": sorted(load.retried), "failed": load.failed,
           "deliveries": load.deliveries, "errors": dict(load.errors), "pauses": load.pauses(t0), "group": load.group_log,
           "acked_s": [round(t - t0, 2) for _, t in load.acked],
           "load_s": time.monotonic() - t0}
    with open(os.path.join(io, "result.json"), "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main(*sys.argv[1:5])
