"""kill -9 the broker with POP messages in flight: acked ones never come back, unacked ones all do."""

import time

import pytest

from quiver import Admin, Message, Producer, SimpleConsumer

pytestmark = [pytest.mark.slow, pytest.mark.faults]


def _pop_all(sc, want: int, invisible_s: float, timeout: float = 30.0) -> list:
    got, deadline = [], time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        got.extend(sc.receive(16, invisible_duration_s=invisible_s, wait_s=0.5))
    return got


def test_kill_with_messages_in_flight_then_restart(make_cluster):
    # offsets persisted every 500 ms: the replay starts from a snapshot taken between the two rounds
    c = make_cluster(broker_args=("--offset-persist-interval-ms", "500"))
    broker = next(s for s in c.services if s.role == "broker")
    Admin(namesrv=c.namesrv).create_topic("PopKill", queues=2)
    with Producer("pk-pg", namesrv=c.namesrv) as p:
        for i in range(40):
            p.send(Message("PopKill", b"k-%02d" % i))
    acked, unacked = set(), set()
    sc = SimpleConsumer("pk", namesrv=c.namesrv, consume_from="first", await_duration_s=0.5).start()
    sc.subscribe("PopKill")
    try:
        first = sc.receive(20, invisible_duration_s=60, wait_s=2)
        for i, m in enumerate(first):
            (sc.ack(m), acked.add(m.body)) if i % 2 == 0 else unacked.add(m.body)
        time.sleep(1.5)                     # a snapshot of bases and the replay start is persisted
        rest = _pop_all(sc, 40 - len(first), invisible_s=6)
        assert len(first) + len(rest) == 40
        for i, m in enumerate(rest):
            (sc.ack(m), acked.add(m.body)) if i % 2 == 0 else unacked.add(m.body)
        long_held = [m for i, m in enumerate(first) if i % 2]   # invisible for 60 s: still so after the restart
        broker.kill()                       # SIGKILL, with 20 in flight and acks just written
    finally:
        sc.shutdown()
    c.restart(broker)
    c.wait_registered(1)
    with SimpleConsumer("pk", namesrv=c.namesrv, await_duration_s=0.5) as sc2:
        sc2.subscribe("PopKill")
        for m in long_held:                 # handles from before the kill still own their messages
            sc2.change_invisible_duration(m, 0.2)
        back, deadline = [], time.monotonic() + 40
        while time.monotonic() < deadline and len({m.body for m in back}) < len(unacked):
            back.extend(sc2.receive(16, invisible_duration_s=60, wait_s=0.5))
        bodies = {m.body for m in back}
        assert bodies == unacked, (sorted(bodies - unacked), sorted(unacked - bodies))
        assert len(back) == len(unacked) and all(m.reconsume_times == 1 for m in back)
        assert not bodies & acked           # no acked message is delivered again
        for m in back:
            sc2.ack(m)
        assert not sc2.receive(16, invisible_duration_s=60, wait_s=1)
    assert len(acked) == 20 and len(unacked) == 20
