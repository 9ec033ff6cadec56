"""SIGTERM to the master of a group of 3 (--auto-failover, SYNC flush and acks) under SYNC sends:
it drains (answers the sends it took, refuses new ones), resigns to the controller, which elects
an in-sync replica at once, and exits 0. Nothing acknowledged is lost; the producers' longest
pause is measured and printed next to the time to the first SEND_OK on the new master."""

import signal
import time

import pytest

from faults.store_checks import read_topic
from quiver import Admin
from support.failover import Load, Rig
from support.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.faults]


@pytest.fixture
def rig(tmp_path):
    r = Rig(str(tmp_path))
    yield r
    r.stop()


def _longest_pause(times: list[float], since: float) -> float:
    times = sorted(t for t in times if t >= since)
    return max((b - a for a, b in zip(times, times[1:])), default=0.0)


def test_sigterm_master_drains_hands_over_and_loses_nothing_acked(rig):
    rig.wait_group(3)
    Admin(namesrv=rig.c.namesrv).create_topic("FoD", queues=4)
    load = Load(rig.c.namesrv, "FoD", workers=3).start()
    try:
        wait_for(lambda: len(load.acked) > 300, 60, "the load running")
        old = rig.broker_at(rig.wait_group(3)["master"])
        t0 = time.monotonic()
        old.proc.send_signal(signal.SIGTERM)
        code = old.proc.wait(20)
        exited = time.monotonic() - t0
        took = wait_for(lambda: load.first_ok_after(t0, old.addr), 20, "a SEND_OK on the new master")
        wait_for(lambda: sum(a[4] > t0 + took for a in list(load.acked.values())) > 100, 30, "load on the new master")
    finally:
        load.stop()
    with load.lock:
        pause = _longest_pause([a[4] for a in load.acked.values()], t0 - 1.0)
    print(f"SIGTERM -> exit {exited:.2f} s, -> first SEND_OK on the new master {took:.2f} s, "
          f"longest producer pause {pause:.2f} s")
    log = old.log_tail(200)
    assert code == 0, log
    assert "drained in" in log, log
    g = rig.wait_group(2, not_master=old.addr)
    served = read_topic(rig.t, g["master"], "FoD", 4)
    missing = [m for m in load.acked if m not in served]
    assert not missing, f"{len(missing)} of {len(load.acked)} acknowledged messages lost"
    for mid, (body, qid, qoff, _, _) in load.acked.items():
        assert (served[mid].body, served[mid].queue_id, served[mid].queue_offset) == (body, qid, qoff)
