"""A master that resigns (a broker draining on SIGTERM) is replaced at the next scan, not a heartbeat timeout later."""

from quiver_namesrv.controller_state import Liveness, pick_master


def test_a_resigned_master_is_replaced_by_a_live_in_sync_member_at_once():
    now = [100.0]
    live = Liveness(1.5, clock=lambda: now[0])
    for addr, off in (("m:1", 10), ("r:2", 10), ("r:3", 9)):
        live.beat(addr, off, 1)
    g = {"master": "m:1", "sss": ["m:1", "r:2", "r:3"], "members": {}}
    assert pick_master(g, live) is None
    live.forget("m:1")
    assert pick_master(g, live) == "r:2"
