"""Scheduler timers: 1,000 arbitrary times in due order, a timer outliving CommitLog retention,
the pending-timer index rebuilt from the timer topic when its file is lost."""

import glob
import os
import random
import time

import pytest

from quiver import Message, Producer
from quiver.client.base import MessageQueue

from support.scheduler import create_topic, consumer, drain, sched_cluster, wait_owned, UNITS

pytestmark = pytest.mark.slow


def _due(m) -> int:
    return int(m.properties["SCHEDULE_DUE_MS"])


def test_1000_arbitrary_times_over_20s_arrive_in_due_order_never_early(make_cluster):
    c, scheds, admin = sched_cluster(make_cluster)
    create_topic(admin, "Arbitrary", 1)
    now = int(time.time() * 1000)
    dues = sorted(now + random.randint(2_000, 20_000) for _ in range(1000))
    random.shuffle(dues)
    with Producer("pg", namesrv=c.namesrv, auto_batch=False) as p, consumer(c.namesrv, "Arbitrary") as pc:
        futs = [p.send_async(Message("Arbitrary", str(d).encode(), deliver_at=d)) for d in dues]
        ids = {f.result(10).msg_id for f in futs}
        got = drain(pc, 1000, 40)
    assert len(got) == 1000 and {m.msg_id for m in got} == ids
    got.sort(key=lambda m: m.queue_offset)
    delivered_dues = [_due(m) for m in got]
    assert delivered_dues == sorted(delivered_dues)                      # due order
    late = sorted(m.store_timestamp - _due(m) for m in got)
    assert late[0] >= 0, late[:5]                                        # never early
    assert late[len(late) // 2] < 200 and late[-1] < 2000, (late[len(late) // 2], late[-1])
    assert all(int(m.body) == _due(m) for m in got)


def test_timer_outlives_a_forced_retention_run(make_cluster):
    c, scheds, admin = sched_cluster(make_cluster, broker_args=("--file-reserved-hours", "0",
                                                                "--segment-bytes", "65536"))
    broker = c.services[1]
    create_topic(admin, "Kept", 1)
    with Producer("pg", namesrv=c.namesrv, auto_batch=False) as p, consumer(c.namesrv, "Kept") as pc:
        due = int(time.time() * 1000) + 6_000
        r = p.send(Message("Kept", b"survivor", keys=["keep-me"], deliver_at=due))
        deadline = time.monotonic() + 5
        while admin.status(scheds[0].addr)["pending"]["timers"] < 1:
            assert time.monotonic() < deadline, "timer not ingested"
            time.sleep(0.05)
        for i in range(200):                                             # roll several 64 KiB segments
            p.send(Message("Filler", os.urandom(1024)))
        assert admin.clean_expired(broker.addr) > 0
        timer_q = MessageQueue("rmq_sys_wheel_timer", "broker-a", 0)
        assert admin.min_offset(timer_q) == 1                            # the parked copy is gone
        assert admin.query_by_key("rmq_sys_wheel_timer", "keep-me") == []
        got = drain(pc, 1, 10)
    assert [(m.msg_id, m.body) for m in got] == [(r.msg_id, b"survivor")]
    assert got[0].store_timestamp >= due


def test_index_is_rebuilt_from_the_timer_topic_when_its_file_is_lost(make_cluster):
    c, scheds, admin = sched_cluster(make_cluster)
    create_topic(admin, "Rebuilt", 1)
    sched = scheds[0]
    with Producer("pg", namesrv=c.namesrv, auto_batch=False) as p, consumer(c.namesrv, "Rebuilt") as pc:
        now = int(time.time() * 1000)
        early = [p.send(Message("Rebuilt", b"e", deliver_at=now + 800)).msg_id for _ in range(5)]
        later = [p.send(Message("Rebuilt", b"l", deliver_at=now + 5_000 + i)).msg_id for i in range(50)]
        first = drain(pc, 5, 5)
        assert sorted(m.msg_id for m in first) == sorted(early)
        deadline = time.monotonic() + 5
        while admin.status(sched.addr)["pending"]["timers"] < 50:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        sched.stop()
        data = sched.args[sched.args.index("--data-dir") + 1]
        for f in glob.glob(os.path.join(data, "timers.db*")):
            os.unlink(f)
        sched.start()
        wait_owned(admin, [sched], UNITS)
        got = drain(pc, 50, 15)
        time.sleep(0.5)
        got += pc.poll(0.3)
    assert sorted(m.msg_id for m in got) == sorted(later)                # no loss, and the 5 delivered
    assert all(m.store_timestamp >= _due(m) for m in got)                # ones are not delivered again
