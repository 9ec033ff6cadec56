"""A broker group of 3 with --auto-failover under 3 controllers, loaded by producers, for
tests/faults/test_failover*.py and bench/failover.py: kill or pause members, time the first
SEND_OK on the new master, check every acknowledged message on it and compare the members'
CommitLogs byte for byte."""

import collections
import os
import signal
import threading
import time

from quiver import Message, Producer, PullConsumer, SendStatus
from quiver.client.message import host_bytes
from quiver.errors import QuiverError
from quiver.tools.local import LocalCluster
from quiver.wire import requests as rq
from quiver.wire.codes import RequestCode
from quiver.wire.transport import Transport

GROUP = "fo"
CLUSTER = "FoCluster"


class Rig:
    def __init__(self, data_dir: str, broker_args=(), members: int = 3, auth_dir: str | None = None):
        self.c = LocalCluster(data_dir, auth_dir=auth_dir)   # auth on: CURVE everywhere, Raft encrypted
        self.t = Transport("failover-rig", credentials=self.c.credentials)
        self.c.add_controllers(3)
        self.c.wait()
        self.brokers = [self.c.add_auto_broker(GROUP, i, "--cluster", CLUSTER, "--flush", "sync", *broker_args)
                        for i in range(1, members + 1)]
        self.c.wait()

    def info(self) -> dict | None:
        """The controller leader's view of the group, or None."""
        for ns in self.c.namesrv.split(";"):
            try:
                r = rq.ReplicaInfoReply.decode(self.t.call(ns, rq.ReplicaInfo(), timeout=0.5).ext)
            except QuiverError:
                continue
            if r.leader:
                return next((g for g in r.groups if g["broker_name"] == GROUP), None)
        return None

    def wait_group(self, in_sync: int, timeout: float = 30.0, not_master: str = "") -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            g = self.info()
            if g and g["master"] and g["master"] != not_master and len(g["sync_state_set"]) >= in_sync:
                return g
            time.sleep(0.1)
        raise AssertionError(f"group not in sync ({in_sync}) within {timeout} s: {self.info()}")

    def wait_info(self, check, what: str, timeout: float = 30.0) -> dict:
        """The controller's view of the group once `check(view)` holds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            g = self.info()
            if g and check(g):
                return g
            time.sleep(0.1)
        raise AssertionError(f"not within {timeout} s: {what}: {self.info()}")

    def broker_at(self, addr: str):
        return next(b for b in self.brokers if b.addr == addr)

    def status(self, svc) -> dict:
        return self.t.call(svc.addr, RequestCode.STATUS, timeout=5.0).ext["status"]

    def wait_topics(self, timeout: float = 30.0) -> None:
        """Every member knows the master's topics (a slave learns them with the metadata sync: a
        topic a new master does not know would come back auto-created, with the default queues)."""
        deadline = time.monotonic() + timeout
        while True:
            counts = {b.addr: self.status(b)["topics"] for b in self.brokers if b.alive()}
            if len(set(counts.values())) == 1:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"members' topic counts differ after {timeout} s: {counts}")
            time.sleep(0.1)

    def controller_leader(self, timeout: float = 30.0):
        """The name server whose controller is the Raft leader now."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for ns in (s for s in self.c.services if s.role == "namesrv" and s.alive()):
                try:
                    if rq.ReplicaInfoReply.decode(self.t.call(ns.addr, rq.ReplicaInfo(), timeout=0.5).ext).leader:
                        return ns
                except QuiverError:
                    pass
            time.sleep(0.1)
        raise AssertionError(f"no controller leader within {timeout} s")

    def log_bytes(self, svc) -> bytes:
        """A member's whole CommitLog as its segment files hold it (names are start offsets)."""
        d = os.path.join(self.c.data_dir, "broker", f"{GROUP}-{self.brokers.index(svc) + 1}", "commitlog")
        out = []
        for name in sorted(os.listdir(d)):
            with open(os.path.join(d, name), "rb") as f:
                out.append(f.read())
        return b"".join(out)

    def wait_converged(self, timeout: float = 60.0) -> bytes:
        """Every member's CommitLog equals the master's byte for byte (no writes under way)."""
        deadline = time.monotonic() + timeout
        while True:
            g = self.info()
            if g and g["master"]:
                want = self.log_bytes(self.broker_at(g["master"]))
                logs = {b.addr: self.log_bytes(b) for b in self.brokers}
                if all(v == want for v in logs.values()):
                    return want
            if time.monotonic() > deadline:
                sizes = {a: len(v) for a, v in logs.items()} if g and g["master"] else None
                raise AssertionError(f"CommitLogs differ after {timeout} s: master {g and g['master']}, "
                                     f"sizes {sizes}")
            time.sleep(0.2)

    def stop(self) -> None:
        for svc in self.c.services:
            if svc.alive():
                os.kill(svc.pid, signal.SIGCONT)  # a paused process would sit out SIGTERM
        self.t.close()
        self.c.stop()


def pause(svc) -> None:
    os.kill(svc.pid, signal.SIGSTOP)


def resume(svc) -> None:
    os.kill(svc.pid, signal.SIGCONT)


def send_acked(namesrv: str, topic: str, count: int, tag: str) -> dict[str, tuple]:
    """`count` sends (retried until acknowledged or 30 s passed); msg id -> (body, queue id, queue offset)."""
    acked = {}
    deadline = time.monotonic() + 30
    with Producer(f"fo-{tag}", namesrv=namesrv, send_timeout=3.0, retries=3) as p:
        p._route_refresh_s = 0.5
        for i in range(count):
            body = f"{tag}-{i}-".encode() + bytes([i % 251]) * (i % 200)
            while time.monotonic() < deadline:
                try:
                    r = p.send(Message(topic, body))
                except QuiverError:
                    time.sleep(0.05)
                    continue
                if r.status is SendStatus.SEND_OK:
                    acked[r.msg_id] = (body, r.queue_id, r.queue_offset)
                    break
    return acked


class Load:
    """Producers sending unique bodies; every SEND_OK recorded with when and where it was stored."""

    def __init__(self, namesrv: str, topic: str, workers: int = 2):
        self.namesrv, self.topic = namesrv, topic
        self.acked: dict[str, tuple] = {}   # msg id -> (body, queue id, queue offset, store host, monotonic)
        self.lock = threading.Lock()
        self.stop_ev = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(w,), daemon=True) for w in range(workers)]

    def start(self) -> "Load":
        for th in self.threads:
            th.start()
        return self

    def _run(self, worker: int) -> None:
        p = Producer(f"fo-pg{worker}", namesrv=self.namesrv, send_timeout=1.0, retries=3, auto_batch=False)
        p._route_refresh_s = 0.5
        p.start()
        i = 0
        try:
            while not self.stop_ev.is_set():
                body = f"w{worker}-{i}-".encode() + bytes([i % 251]) * (i % 300)
                i += 1
                try:
                    r = p.send(Message(self.topic, body))
                except QuiverError:
                    time.sleep(0.02)
                    continue
                if r.status is SendStatus.SEND_OK:
                    with self.lock:
                        self.acked[r.msg_id] = (body, r.queue_id, r.queue_offset, r.store_host, time.monotonic())
        finally:
            p.shutdown()

    def first_ok_after(self, t0: float, not_on: str) -> float | None:
        """Seconds from t0 to the first SEND_OK stored on a broker other than `not_on`."""
        host, port = not_on.rsplit(":", 1)
        old = host_bytes(host, int(port))
        with self.lock:
            times = [a[4] for a in self.acked.values() if a[4] > t0 and a[3] != old]
        return min(times) - t0 if times else None

    def stop(self) -> None:
        self.stop_ev.set()
        for th in self.threads:
            th.join(10)


class Reader:
    """A pull consumer reading a topic all along (committing as it goes): how often each msg id was
    delivered, and every delivery as (msg id, queue offset, body)."""

    def __init__(self, namesrv: str, topic: str, group: str = "fo-reader", **options):
        self.c = PullConsumer(group, namesrv=namesrv, consume_from="first", **options)
        self.c._route_refresh_s = 0.5
        self.c.subscribe(topic)
        self.seen: collections.Counter = collections.Counter()
        self.got: list[tuple[str, int, bytes]] = []
        self.stop_ev = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "Reader":
        self.c.start()
        self.thread.start()
        return self

    def _run(self) -> None:
        while not self.stop_ev.is_set():
            try:
                for m in self.c.poll(0.3):
                    self.seen[m.msg_id] += 1
                    self.got.append((m.msg_id, m.queue_offset, m.body))
            except QuiverError:
                time.sleep(0.1)   # a broker of the group is down or paused: the next poll goes on

    def bodies(self) -> set[bytes]:
        return {b for _, _, b in list(self.got)}

    def wait_for(self, ids: set, timeout_s: float) -> set:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            unseen = ids - set(self.seen)
            if not unseen:
                return unseen
            time.sleep(0.2)
        return ids - set(self.seen)

    def stop(self) -> None:
        self.stop_ev.set()
        self.thread.join(10)
        self.c.shutdown()


def kill_cycle(rig: Rig, load: Load, goal_s: float = 6.0) -> tuple[float, str | None]:
    """kill -9 the master, wait for the first SEND_OK on another broker, restart the old one and
    wait until the group is 3 in sync again. Returns the seconds from the kill to that SEND_OK and
    why the group did not get back in sync (None: it did)."""
    g = rig.wait_group(len(rig.brokers))
    old = rig.broker_at(g["master"])
    t0 = time.monotonic()
    old.kill()
    took = None
    while time.monotonic() - t0 < goal_s * 3:
        took = load.first_ok_after(t0, old.addr)
        if took is not None:
            break
        time.sleep(0.05)
    old.start()
    if took is None:
        raise AssertionError(f"no SEND_OK on a new master within {goal_s * 3} s of killing {old.addr}: "
                             f"{rig.info()}")
    try:
        rig.wait_group(len(rig.brokers), timeout=60)
    except AssertionError as exc:
        return took, str(exc)
    return took, None
