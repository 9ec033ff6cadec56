"""Two scheduler instances share the (broker, level) queues; kill one, the other takes over."""

import time

import pytest

from quiver import Message, Producer

from support.scheduler import create_topic, UNITS, consumer, drain, sched_cluster, wait_owned

pytestmark = pytest.mark.slow


def test_two_instances_split_units_and_survivor_takes_over(make_cluster):
    c, scheds, admin = sched_cluster(make_cluster, schedulers=2)
    owned = wait_owned(admin, scheds, UNITS)
    assert all(8 <= len(o) <= 11 for o in owned), owned                 # averaged, disjoint, complete
    create_topic(admin, "Shared", 2)
    victim_idx = 0 if any("timer" in u for u in owned[0]) else 1
    victim, survivor = scheds[victim_idx], scheds[1 - victim_idx]
    with Producer("pg", namesrv=c.namesrv, auto_batch=False) as p, consumer(c.namesrv, "Shared") as pc:
        before = {p.send(Message("Shared", b"b", delay_level=1 + i % 3)).msg_id for i in range(60)}
        got = drain(pc, 60, 10)
        assert {m.msg_id for m in got} == before
        due = int(time.time() * 1000) + 2500
        timer = p.send(Message("Shared", b"timer", deliver_at=due)).msg_id    # owned by the victim
        deadline = time.monotonic() + 5
        while admin.status(victim.addr)["pending"]["timers"] < 1:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        victim.kill()
        t0 = time.monotonic()
        wait_owned(admin, [survivor], UNITS, timeout=20)
        takeover_s = time.monotonic() - t0
        after = {p.send(Message("Shared", b"a", delay_level=1 + i % 3)).msg_id for i in range(60)}
        got = drain(pc, 61, 20)
    ids = [m.msg_id for m in got]
    assert set(ids) == after | {timer} and len(ids) == len(set(ids))
    t = next(m for m in got if m.msg_id == timer)
    assert t.store_timestamp >= due
    assert takeover_s < 15, takeover_s
