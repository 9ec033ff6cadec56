"""kill -9 the scheduler with 1,000 delayed messages pending (and mid-delivery); restart.

All are delivered, none early; duplicates only from the re-put batches in
flight at the kill (at most 2 per level queue: the batch sent and the
previous one whose commit may not have landed), here --max-reput-batch 50.
"""

import time
from collections import Counter

import pytest

from quiver import Message, Producer
from quiver.tools.local import wait_healthy

from support.scheduler import create_topic, UNITS, consumer, drain, sched_cluster, wait_owned

pytestmark = [pytest.mark.slow, pytest.mark.faults]
BATCH = 50


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
