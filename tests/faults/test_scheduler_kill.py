"""kill -9 the scheduler with 1,000 delayed messages pending (and mid-delivery); restart.

All are delivered, none early; duplicates only from the re-put batches in
flight at the kill (at most 2 per level queue: the batch sent and the
previous one whose commit may not have landed), here --max-reput-batch 50.
And a timer the scheduler acknowledged (its offset committed) survives kill -9
even once the broker's parked copy is gone.
"""

import os
import sqlite3
import time
from collections import Counter

import pytest

from quiver import Message, Producer
from quiver.client.base import MessageQueue
from quiver.tools.local import wait_healthy
from quiver.wire.validation import TIMER_TOPIC

from support.scheduler import create_topic, UNITS, consumer, drain, sched_cluster, wait_owned

pytestmark = [pytest.mark.slow, pytest.mark.faults]
BATCH = 50
SCHED_GROUP = "SCHEDULE_CONSUMER"


def test_kill_9_with_1000_pending_then_restart_delivers_all_never_early(make_cluster):
    c, (sched,), admin = sched_cluster(make_cluster, sched_args=("--max-reput-batch", str(BATCH)))
    create_topic(admin, "Survive", 2)
    with Producer("pg", namesrv=c.namesrv, auto_batch=False) as p, consumer(c.namesrv, "Survive") as pc:
        futs = [p.send_async(Message("Survive", str(i).encode(), delay_level=4 + i % 2)) for i in range(1000)]
        ids = {f.result(20).msg_id for f in futs}                     # levels 4-5: 2 s and 3 s
        first = drain(pc, 1, 10)                                      # kill while delivering
        sched.kill()
        killed_at = int(time.time() * 1000)
        time.sleep(0.5)
        sched.start()
        wait_healthy([sched])
        wait_owned(admin, [sched], UNITS)
        got = first + drain(pc, 1000 - len(first), 30)
        time.sleep(1.0)
        got += pc.poll(0.5)
    counts = Counter(m.msg_id for m in got)
    assert set(counts) == ids                                         # none lost
    dups = sum(n - 1 for n in counts.values())
    assert dups <= 2 * 2 * BATCH, dups                                # only the in-flight window
    assert all(m.store_timestamp >= int(m.properties["SCHEDULE_DUE_MS"]) for m in got)   # never early
    assert killed_at > 0


def test_a_timer_whose_offset_the_scheduler_committed_survives_kill_9_without_its_parked_copy(make_cluster):
    """The scheduler commits the timer topic's offset only once the writer thread has committed the
    rows below it. The index is held locked for a while (as a stalled disk would hold the writer):
    no offset may be committed meanwhile. Then killed -9 the moment an offset shows up, and with the
    broker's parked copies removed by retention, every timer below the committed offset must still be
    delivered, from the scheduler's index alone."""
    c, (sched,), admin = sched_cluster(make_cluster, broker_args=("--file-reserved-hours", "0",
                                                                  "--segment-bytes", "65536"))
    broker = c.services[1]
    create_topic(admin, "Acked", 1)
    timer_q = MessageQueue(TIMER_TOPIC, "broker-a", 0)
    index = sqlite3.connect(os.path.join(sched.args[sched.args.index("--data-dir") + 1], "timers.db"))
    n = 1500
    with Producer("pg", namesrv=c.namesrv, auto_batch=False) as p, consumer(c.namesrv, "Acked") as pc:
        index.execute("BEGIN IMMEDIATE")                               # the writer waits (busy timeout 5 s)
        due = int(time.time() * 1000) + 15_000
        futs = [p.send_async(Message("Acked", os.urandom(1024), deliver_at=due + i)) for i in range(n)]
        at = {r.queue_offset: r.msg_id for r in (f.result(20) for f in futs)}   # timer queue offset -> id
        assert sorted(at) == list(range(n))
        held_until = time.monotonic() + 2.0
        acked = 0
        while not acked and time.monotonic() < held_until:
            acked = admin.consumer_offset(SCHED_GROUP, timer_q) or 0
        if not acked:                                                 # as it must: nothing is stored yet
            index.rollback()
            deadline = time.monotonic() + 20
            while not acked and time.monotonic() < deadline:
                acked = admin.consumer_offset(SCHED_GROUP, timer_q) or 0
        sched.kill()
        index.close()
        acked = admin.consumer_offset(SCHED_GROUP, timer_q)           # the last commit that landed
        assert acked and 0 < acked <= n
        for _ in range(100):                                          # roll segments past the parked copies
            p.send(Message("Filler", os.urandom(4096)))
        while admin.clean_expired(broker.addr) > 0:                   # a few segments a call
            pass
        assert admin.min_offset(timer_q) == n                         # the broker no longer has any of them
        sched.start()
        wait_healthy([sched])
        wait_owned(admin, [sched], UNITS)
        got = drain(pc, acked, 45)
    got_ids = {m.msg_id for m in got}
    lost = [i for i in range(acked) if at[i] not in got_ids]
    assert not lost, f"{len(lost)} of {acked} acknowledged timers lost (first offsets {lost[:5]})"
    assert all(m.store_timestamp >= int(m.properties["SCHEDULE_DUE_MS"]) for m in got)   # never early
