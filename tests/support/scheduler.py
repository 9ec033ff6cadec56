"""Shared helpers of the scheduler tests (no tests here)."""

import time

from quiver import Admin, PullConsumer
from quiver.errors import QuiverError

LEVELS = "100ms 300ms 600ms 2s 3s 4s 5s 6s 7s 8s 9s 10s 11s 12s 13s 14s 15s 16s"
LEVELS_MS = [100, 300, 600, 2000, 3000, 4000, 5000]
UNITS = 19  # 18 level queues + 1 timer queue on one broker


def sched_cluster(make_cluster, schedulers=1, broker_args=(), sched_args=()):
    c = make_cluster(broker_args=("--delay-levels", LEVELS, *broker_args))
    scheds = [c.add_service("scheduler", "quiver_scheduler", *sched_args) for _ in range(schedulers)]
    c.wait()
    admin = Admin(namesrv=c.namesrv)
    wait_owned(admin, scheds, UNITS)
    return c, scheds, admin


def wait_owned(admin, scheds, total, timeout=60.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            owned = [admin.status(s.addr)["owned"] for s in scheds]
        except QuiverError:
            owned = []
        flat = [u for o in owned for u in o]
        if len(flat) == total and len(set(flat)) == total:
            return owned
        if time.monotonic() > deadline:
            raise AssertionError(f"units not allocated in {timeout} s: {owned}")
        time.sleep(0.1)


def drain(consumer, want, timeout):
    got, deadline = [], time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        got.extend(consumer.poll(0.3))
    return got


def consumer(namesrv, topic, group="sched-test"):
    c = PullConsumer(group, namesrv=namesrv, consume_from="first")
    c.subscribe(topic)
    return c.start()


def create_topic(admin, topic, queues, timeout=60.0):
    """Create a topic and wait until the name server routes it (registration is asynchronous, and one
    lost on a loaded machine is sent again a register interval, 30 s, later)."""
    admin.create_topic(topic, queues=queues)
    deadline = time.monotonic() + timeout
    while True:
        try:
            admin.topic_route(topic)
            return
        except QuiverError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
