"""A consumer group reading all along through an automatic failover never skips an acknowledged
message: 2 brokers with --auto-failover (SYNC flush; SYNC and async acks) under 3 controllers,
real processes.

The master stores a tail its paused replica never gets (not acknowledged); the replica is elected;
the new master stores acknowledged messages at the same queue offsets. Reads bounded only by the
master's flush let the group read the tail and go on past those offsets; bounded by the confirm
offset (what every in-sync replica holds) it never sees the tail, and reads every acked message.
With async acks the tail is acknowledged and lost with the old master (what async acks allow);
the group still reads every message the new master stored.
"""

import time

import pytest

from faults.store_checks import wait_for
from faults.test_failover_faults import outcome, pinned_send
from quiver import Admin, Producer
from support.failover import Reader, Rig, pause, resume, send_acked

pytestmark = [pytest.mark.slow, pytest.mark.faults]

TOPIC = "FoF"   # the name pinned_send writes to


@pytest.fixture(params=["sync", "async"])
def rig(tmp_path, request):
    r = Rig(str(tmp_path), ("--ha-acks", request.param), members=2)
    r.acks = request.param
    yield r
    r.stop()


def test_a_group_reading_through_a_failover_skips_no_acknowledged_message(rig):
    g = rig.wait_group(2)
    ns = rig.c.namesrv
    Admin(namesrv=ns).create_topic(TOPIC, queues=1)
    acked = send_acked(ns, TOPIC, 20, "before")
    rig.wait_topics()
    old = rig.broker_at(g["master"])
    (heir,) = [b for b in rig.brokers if b is not old]
    reader = Reader(ns, TOPIC, "fo-reads", suspend_ms=1000).start()
    try:
        wanted = {a[0] for a in acked.values()}
        wait_for(lambda: wanted <= reader.bodies(), 30, "the group reads what was acknowledged")
        end = rig.status(old)["ha"]["max_offset"]
        with Producer("fo-pinned", namesrv=ns) as p:
            # a tail only the master stores: its replica is paused, so nothing of it is acknowledged
            pause(heir)
            tail = [pinned_send(rig, p, old.addr, f"tail-{i}".encode()) for i in range(5)]
            wait_for(lambda: rig.status(old)["ha"]["max_offset"] > end, 10, "the unacknowledged tail on the master")
            seen_tail = lambda: any(b.startswith(b"tail-") for b in reader.bodies())  # noqa: E731
            deadline = time.monotonic() + 1.5  # well inside the 3 s after which the set would drop the replica
            while time.monotonic() < deadline and not seen_tail():
                time.sleep(0.05)
            pause(old)
            heir.kill()   # restarted, not resumed: the tail in flight to it is gone for sure
            heir.start()
            rig.wait_group(1, not_master=old.addr)
            after = send_acked(ns, TOPIC, 20, "after")  # the new master's, at the tail's queue offsets
            assert len(after) == 20
            wait_for(lambda: any(b.startswith(b"after-") for b in reader.bodies()), 60,
                     "the group reads from the new master")
            resume(old)
            results = [outcome(f) for f in tail]
        if rig.acks == "sync":
            assert "SUCCESS" not in results, f"the tail was acknowledged: {results}"
        rig.wait_group(2, timeout=60)
        acked.update(after)
        wanted = {a[0] for a in acked.values()}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not wanted <= reader.bodies():
            time.sleep(0.2)
    finally:
        reader.stop()
    skipped = sorted(acked[m][2] for m in acked if acked[m][0] not in reader.bodies())
    tail_read = sorted(o for _, o, b in reader.got if b.startswith(b"tail-"))
    assert not skipped, (f"{len(skipped)} acknowledged messages never delivered to the group, queue offsets "
                         f"{skipped}; unacknowledged tail it read at offsets {tail_read}; tail sends: {results}")
    assert not tail_read, f"the group read the unacknowledged tail at offsets {tail_read}"
