"""Retry through %RETRY%<group> and the scheduler, dead letters, resend from the DLQ."""

import threading
import time

import pytest

from quiver import Admin, ConsumeResult, Message, Producer, PushConsumer
from support.waiting import wait_for as _wait

# 18 levels; level 3 (the first retry) onwards are short so retries take well under a second
LEVELS = "100ms 100ms 100ms 200ms 200ms 200ms 200ms 200ms 200ms 200ms 200ms 200ms 200ms 200ms 200ms 200ms 200ms 200ms"


@pytest.fixture
def retry_cluster(make_cluster):
    c = make_cluster(broker_args=("--delay-levels", LEVELS))
    c.add_service("scheduler", "quiver_scheduler")
    c.wait()
    return c


def test_fail_twice_then_succeed_gets_three_deliveries(retry_cluster):
    c = retry_cluster
    seen, lock = [], threading.Lock()

    def fn(msgs):
        m = msgs[0]
        with lock:
            seen.append((m.topic, m.reconsume_times, m.body, m.msg_id))
        if m.reconsume_times < 2:
            raise RuntimeError("not yet")          # raising = RECONSUME_LATER
        return ConsumeResult.SUCCESS

    with PushConsumer("rg", namesrv=c.namesrv, consume_from="first") as pc:
        pc.subscribe("Work")
        pc.register(fn)
        with Producer("pg", namesrv=c.namesrv) as p:
            Admin(namesrv=c.namesrv).create_topic("Work", queues=2)
            pc.start()
            r = p.send(Message("Work", b"job-1", tags="T"))
        _wait(lambda: len(seen) >= 3, 60, "three deliveries")
        time.sleep(0.5)
    assert [s[1] for s in seen] == [0, 1, 2]
    assert all(s[0] == "Work" and s[2] == b"job-1" for s in seen)   # original topic restored
    assert seen[0][3] == r.msg_id


def test_always_failing_lands_in_dlq_after_max_and_resend_works(retry_cluster):
    c = retry_cluster
    admin = Admin(namesrv=c.namesrv)
    admin.create_topic("Doomed", queues=1)
    admin.set_group_config("dg", retry_max_times=2)   # group config wins over the client's 16
    attempts = []
    ok = threading.Event()

    def fn(msgs):
        attempts.append(msgs[0].reconsume_times)
        if msgs[0].properties.get("resent") == "1" or ok.is_set():
            return ConsumeResult.SUCCESS
        return ConsumeResult.RECONSUME_LATER

    pc = PushConsumer("dg", namesrv=c.namesrv, consume_from="first")
    pc.subscribe("Doomed")
    pc.register(fn)
    with pc, Producer("pg", namesrv=c.namesrv) as p:
        pc.start()
        sent = p.send(Message("Doomed", b"poison", keys=["k1"], properties={"resent": "0"}))
        dlq = _wait(lambda: admin.dlq_messages("dg"), 60, "the dead letter")
        assert attempts == [0, 1, 2]
        m = dlq[0]
        assert m.body == b"poison" and m.topic == "%DLQ%dg"
        assert m.properties["DLQ_ORIGIN_TOPIC"] == "Doomed"
        assert m.properties["DLQ_ORIGIN_MESSAGE_ID"] == sent.msg_id
        assert m.properties["RECONSUME_TIME"] == "2"
        ok.set()
        res = admin.resend_dlq("dg", [sent.msg_id])
        assert len(res) == 1 and res[0].topic == "Doomed"
        _wait(lambda: len(attempts) >= 4, 10, "the resent message")
    assert attempts[-1] == 0
    admin.shutdown()


def test_inline_listener_failures_go_back_at_once_and_return_with_their_count(retry_cluster):
    """consume_inline=True: the send-back is a blocking call made on the IO thread: it must not wait for a reply
    only that thread could read (it would time out and the retry come seconds late)."""
    c = retry_cluster
    Admin(namesrv=c.namesrv).create_topic("Work", queues=2)
    seen: list[tuple[int, float, bytes]] = []

    def fn(msgs):
        m = msgs[0]
        seen.append((m.reconsume_times, time.monotonic(), m.body))
        if m.reconsume_times < 2:
            if m.reconsume_times == 0:
                raise RuntimeError("not yet")          # raising = RECONSUME_LATER
            return ConsumeResult.RECONSUME_LATER
        return ConsumeResult.SUCCESS

    pc = PushConsumer("inline-rg", namesrv=c.namesrv, consume_from="first", consume_inline=True)
    pc.subscribe("Work")
    pc.register(fn)
    with pc, Producer("pg", namesrv=c.namesrv) as p:
        pc.start()
        p.send(Message("Work", b"job"))
        _wait(lambda: len(seen) >= 3, 60, "three deliveries")
        time.sleep(0.5)   # nothing more may come
    assert [s[0] for s in seen] == [0, 1, 2]
    assert all(s[2] == b"job" for s in seen)
    assert seen[2][1] - seen[0][1] < 2.5, "a send-back waited for a reply on the IO thread"
