"""Scheduler: delay levels and timers delivered never early, intact; cancel; horizon."""

import time

import pytest

from quiver import Message, Producer
from quiver.tools.cli import main as cli_main
from quiver.errors import MessageIllegalError, QueryNotFoundError

from support.scheduler import create_topic, LEVELS_MS, consumer, drain, sched_cluster


def test_levels_1_to_3_deliver_after_their_delay_intact(make_cluster):
    c, scheds, admin = sched_cluster(make_cluster)
    create_topic(admin, "Delayed", 2)
    with Producer("pg", namesrv=c.namesrv, auto_batch=False) as p, consumer(c.namesrv, "Delayed") as pc:
        sent = {}
        for i in range(30):
            level = 1 + i % 3
            r = p.send(Message("Delayed", f"b{i}".encode(), tags=f"L{level}", keys=[f"k{i}", "common"],
                               properties={"level": str(level), "ünï": "çødé"}, delay_level=level))
            assert r.topic == "SCHEDULE_TOPIC_XXXX" and r.queue_id == level - 1
            sent[r.msg_id] = (i, level)
        got = drain(pc, 30, 15)
    assert sorted(m.msg_id for m in got) == sorted(sent)
    for m in got:
        i, level = sent[m.msg_id]
        due = int(m.properties["SCHEDULE_DUE_MS"])
        assert m.topic == "Delayed" and m.body == f"b{i}".encode() and m.tags == f"L{level}"
        assert m.keys == [f"k{i}", "common"]
        assert m.properties["level"] == str(level) and m.properties["ünï"] == "çødé"
        assert "DELAY" not in m.properties and m.properties["SCHEDULE_ORIGIN_ID"] == m.msg_id
        assert due - m.born_timestamp >= LEVELS_MS[level - 1]       # due = parked store time + delay
        assert m.store_timestamp >= due, (m.store_timestamp, due)    # never early
        assert m.store_timestamp - m.born_timestamp >= LEVELS_MS[level - 1]
    deadline = time.monotonic() + 30   # the scheduler counts a re-put when its reply is back
    while (status := admin.status(scheds[0].addr))["delivered"] < 30 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert status["delivered"] >= 30 and status["early"] == 0 and status["lag_ms"]["n"] >= 30, status
    assert set(status["pending"]["levels"]) == {str(n) for n in range(1, 19)}
    assert admin.scheduler_status()[scheds[0].addr]["role"] == "scheduler"


def test_timer_beyond_horizon_is_refused_and_due_timer_is_delivered(make_cluster):
    c, scheds, admin = sched_cluster(make_cluster)
    create_topic(admin, "Timed", 1)
    with Producer("pg", namesrv=c.namesrv, auto_batch=False) as p, consumer(c.namesrv, "Timed") as pc:
        with pytest.raises(MessageIllegalError, match="limit"):
            p.send(Message("Timed", b"x", delay_ms=41 * 86_400_000))
        due = int(time.time() * 1000) + 700
        r = p.send(Message("Timed", b"t", tags="T", properties={"p": "1"}, deliver_at=due))
        assert r.topic == "rmq_sys_wheel_timer"
        got = drain(pc, 1, 10)
    assert [m.msg_id for m in got] == [r.msg_id]
    assert got[0].store_timestamp >= due and got[0].properties["p"] == "1" and got[0].tags == "T"
    assert "TIMER_DELIVER_MS" not in got[0].properties


def test_cancel_before_delivery_prevents_it_after_delivery_says_too_late(make_cluster, capsys):
    c, scheds, admin = sched_cluster(make_cluster)
    create_topic(admin, "Cancel", 1)
    with Producer("pg", namesrv=c.namesrv, auto_batch=False) as p, consumer(c.namesrv, "Cancel") as pc:
        timer = p.send(Message("Cancel", b"timer", delay_ms=2500))
        level = p.send(Message("Cancel", b"level", delay_level=5))      # 3 s
        cli_timer = p.send(Message("Cancel", b"cli", delay_ms=2500))
        quick = p.send(Message("Cancel", b"quick", delay_level=1))
        got = drain(pc, 1, 5)
        assert [m.body for m in got] == [b"quick"]
        deadline = time.monotonic() + 30    # the timer must be ingested (or tombstoned) first
        while admin.status(scheds[0].addr)["pending"]["timers"] < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert p.cancel_scheduled(timer.msg_id) is True
        assert p.cancel_scheduled(level.msg_id) is True
        assert cli_main(["--namesrv", c.namesrv, "msg", "cancel", "--id", cli_timer.msg_id, "--topic", "Cancel",
                         "-o", "json"]) == 0
        assert '"cancelled": true' in capsys.readouterr().out
        assert p.cancel_scheduled(quick.msg_id) is False                 # delivered already
        assert cli_main(["--namesrv", c.namesrv, "msg", "cancel", "--id", quick.msg_id]) == 1
        with pytest.raises(QueryNotFoundError):
            p.cancel_scheduled("0" * 32)
        late = drain(pc, 1, 4.5)
        assert late == []
        assert p.cancel_scheduled(timer.msg_id) is True                  # stays cancelled
