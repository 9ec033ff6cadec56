"""A broker group of 3 with --auto-failover under 3 controllers, loaded by producers, for
tests/faults/test_failover.py and bench/failover.py: kill the master, time the first SEND_OK
on the new one, check every acknowledged message on it."""

import threading
import time

from quiver import Message, Producer, SendStatus
from quiver.client.message import host_bytes
from quiver.errors import QuiverError
from quiver.tools.local import LocalCluster
from quiver.wire import requests as rq
from quiver.wire.transport import Transport

GROUP = "fo"
CLUSTER = "FoCluster"


class Rig:
    def __init__(self, data_dir: str, broker_args=(), members: int = 3):
        self.c = LocalCluster(data_dir)
        self.t = Transport("failover-rig")
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

    def broker_at(self, addr: str):
        return next(b for b in self.brokers if b.addr == addr)

    def stop(self) -> None:
        self.t.close()
        self.c.stop()


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
        p.route_refresh_s = 0.5
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
