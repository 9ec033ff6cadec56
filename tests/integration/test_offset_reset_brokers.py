"""Live offset reset of a running group over three broker processes (24 queues), repeated: after
each reset to a time before the first send every message is delivered again. Each reset lands while
a second member joins or leaves (a rebalance: queues given up commit their old position, queues
taken read the stored one), which is when commits of the old position raced the reset."""

import collections
import os
import threading
import time

from quiver import Admin, ConsumeResult, Message, Producer, PushConsumer
from support.waiting import wait_for

TOPIC = "ResetMany"
GROUP = "reset-many"
TOTAL = 2400
ROUNDS = int(os.environ.get("QUIVER_RESET_ROUNDS", "5"))


def _send(namesrv, bodies):
    with Producer("reset-many-pg", namesrv=namesrv) as p:
        for i in range(0, len(bodies), 200):
            for f in [p.send_async(Message(TOPIC, b.encode())) for b in bodies[i:i + 200]]:
                f.result(20)


def test_live_reset_of_a_group_over_three_brokers_redelivers_every_message_each_time(make_cluster):
    c = make_cluster(brokers=3)
    admin = Admin(namesrv=c.namesrv)
    admin.create_topic(TOPIC, queues=8)
    wait_for(lambda: len(admin.queues(TOPIC)) == 24, 20, "24 queues over 3 brokers")
    before_first = int(time.time() * 1000) - 1
    bodies = [f"m{i}" for i in range(TOTAL)]
    _send(c.namesrv, bodies)

    got: list[str] = []
    lock = threading.Lock()

    def listen(msgs):
        with lock:
            got.extend(m.body.decode() for m in msgs)
        return ConsumeResult.SUCCESS

    def seen_since(n):
        with lock:
            return collections.Counter(got[n:])

    want = collections.Counter(bodies)
    consumer = PushConsumer(GROUP, namesrv=c.namesrv, consume_from="first", commit_interval_ms=100)
    consumer.subscribe(TOPIC)
    consumer.register(listen)
    with consumer:
        wait_for(lambda: set(seen_since(0)) >= set(want), 60, "the first pass over every message")
        other = None
        for r in range(ROUNDS):
            with lock:
                start = len(got)
            if other is None:   # a member joins as the reset is made, or leaves
                other = PushConsumer(GROUP, namesrv=c.namesrv, consume_from="first", commit_interval_ms=100)
                other.subscribe(TOPIC)
                other.register(listen)
                other.start()
                leaving = None
            else:
                leaving = threading.Thread(target=other.shutdown)
                leaving.start()
                other = None
            done = admin.reset_offset(GROUP, TOPIC, before_first)
            assert done.online and len(done.offsets) == 24 and set(done.offsets.values()) == {0}, done
            try:
                wait_for(lambda: not (want - seen_since(start)), 60, f"every message again after reset {r}")
            except AssertionError:
                missing = want - seen_since(start)
                raise AssertionError(f"round {r}: {len(missing)} of {TOTAL} never delivered again") from None
            if leaving is not None:
                leaving.join(15)
            wait_for(lambda: sum(admin.consumer_offset(GROUP, mq) or 0 for mq in admin.queues(TOPIC)) == TOTAL,
                     30, "offsets committed at the end")
        if other is not None:
            other.shutdown()
    admin.shutdown()
