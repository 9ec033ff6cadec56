"""A controller leader cut off from the other controllers stops deciding (real processes).

Three controllers, a group of three --auto-failover brokers under load. Both followers are
paused (SIGSTOP: the leader's Raft peers go silent, the brokers stay connected to each other
and to the leader), so the leader has no majority. It must stop answering heartbeats, so the
master's lease runs out and it stops acknowledging within the lease, with SYNC and with async
acks; nobody else may become master (no majority anywhere). Before, the leader kept renewing
the lease for pysyncobj's 30 s leader fallback. Once the followers resume, writes are
acknowledged again (the check above is not passing on a dead cluster).
"""

import time

import pytest

from quiver import Admin
from quiver.client.message import host_bytes
from quiver.errors import QuiverError
from quiver.wire import requests as rq

from support.failover import Load, Rig, pause, resume

pytestmark = [pytest.mark.slow, pytest.mark.faults]

TOPIC = "IsoT"
LEASE_S = 1.2          # 0.8 x the default --controller-heartbeat-timeout-ms
SLACK_S = 1.5          # a loaded machine: the client sees an answer later than the broker gave it
WATCH_S = 8.0


def _leads(rig, ns) -> bool | None:
    try:
        return rq.ReplicaInfoReply.decode(rig.t.call(ns.addr, rq.ReplicaInfo(), timeout=1.0).ext).leader
    except QuiverError:
        return None


@pytest.mark.parametrize("acks", ["sync", "async"])
def test_an_isolated_controller_leader_grants_no_lease(tmp_path, acks):
    # the replicas fetch the new topic within a second, not the default 10 s (wait_topics below)
    rig = Rig(str(tmp_path), broker_args=("--ha-acks", acks, "--ha-sync-interval-ms", "1000"))
    load = None
    followers = []
    try:
        g = rig.wait_group(3)
        Admin(namesrv=rig.c.namesrv).create_topic(TOPIC, queues=2)
        rig.wait_topics()
        master = rig.broker_at(g["master"])
        host, port = master.addr.rsplit(":", 1)
        on_master = host_bytes(host, int(port))
        load = Load(rig.c.namesrv, TOPIC, workers=2).start()
        deadline = time.monotonic() + 30
        while len(load.acked) < 200:
            assert time.monotonic() < deadline, "no load acknowledged"
            time.sleep(0.1)
        leader = rig.controller_leader()
        followers = [s for s in rig.c.services if s.role == "namesrv" and s is not leader]
        for f in followers:
            pause(f)
        t0 = time.monotonic()
        stepped_down = None
        while time.monotonic() < t0 + WATCH_S:
            if stepped_down is None and _leads(rig, leader) is False:
                stepped_down = time.monotonic() - t0
            time.sleep(0.05)
        with load.lock:
            after = [(a[4] - t0, a[3] == on_master) for a in load.acked.values() if a[4] > t0]
        last_on_master = max((dt for dt, on in after if on), default=0.0)
        elsewhere = [dt for dt, on in after if not on]
        lease_valid = rig.status(master)["ha"]["lease_valid"]
        print(f"acks={acks}: leader stepped down after {stepped_down} s; last SEND_OK on the old master "
              f"{last_on_master:.2f} s after the cut ({len(after)} after the cut); lease valid now: {lease_valid}")
        assert stepped_down is not None and stepped_down < 0.6 + SLACK_S, stepped_down
        assert last_on_master < LEASE_S + SLACK_S, f"the old master acknowledged {last_on_master:.2f} s after the cut"
        assert not elsewhere, "another broker acknowledged without a controller majority"
        assert lease_valid is False
        for f in followers:
            resume(f)
        followers = []
        n = len(load.acked)
        deadline = time.monotonic() + 30
        while len(load.acked) < n + 50:
            assert time.monotonic() < deadline, "writes were not acknowledged again once the majority was back"
            time.sleep(0.1)
    finally:
        for f in followers:
            resume(f)
        if load is not None:
            load.stop()
        rig.stop()
