"""PullConsumer(direct_poll=True) against real processes: poll() holds the pulls of idle queues
on its own thread's socket. Messages sent while it polls arrive once each, in queue order, from
whichever thread polls; a pull held by a thread that stops polling is taken back. (The common
pull-consumer guarantees with direct_poll on: test_send_pull.py's `direct` cases.)"""

import threading
import time

import pytest

from quiver import Admin, Message, Producer, PullConsumer
from quiver.aio import AsyncPullConsumer


def test_sent_while_polling_from_two_threads_arrive_once_in_order_and_commit(cluster):
    Admin(namesrv=cluster.namesrv).create_topic("Live", queues=4)
    c = PullConsumer("live", namesrv=cluster.namesrv, consume_from="first", auto_commit=False, direct_poll=True)
    c.subscribe("Live")
    got = []
    with c, Producer("pg", namesrv=cluster.namesrv) as p:
        c.poll(0.3)
        sent = []

        def produce():
            for i in range(1500):
                sent.append(p.send_async(Message("Live", f"m-{i}".encode())))
                if i % 50 == 0:
                    time.sleep(0.01)   # arrivals while poll() waits, not one burst
        sender = threading.Thread(target=produce)
        sender.start()
        # a first stretch polled on another thread: the pulls it still holds when it stops
        # polling must be taken back, or their queues would stall
        helper = threading.Thread(target=lambda: [got.extend(c.poll(0.05)) for _ in range(10)])
        helper.start()
        helper.join()
        deadline = time.monotonic() + 30
        while len(got) < 1500 and time.monotonic() < deadline:
            got.extend(c.poll(0.05))
        sender.join()
        results = [f.result(10) for f in sent]
        c.commit()
        committed = {mq.queue_id: c.committed(mq) for mq in c.assignment()}
    assert {(m.queue_id, m.queue_offset): m.body for m in got} == \
        {(r.queue_id, r.queue_offset): f"m-{i}".encode() for i, r in enumerate(results)}
    assert len(got) == 1500                                   # none twice
    per_queue: dict[int, list[int]] = {}
    for m in got:
        per_queue.setdefault(m.queue_id, []).append(m.queue_offset)
    for qid, offsets in per_queue.items():
        assert offsets == list(range(len(offsets))), qid      # in queue order, no gap
        assert committed[qid] == len(offsets)


def test_a_queue_held_by_a_thread_that_stopped_polling_is_taken_back(cluster):
    Admin(namesrv=cluster.namesrv).create_topic("Moved", queues=2)
    with PullConsumer("moved", namesrv=cluster.namesrv, consume_from="last", direct_poll=True) as c, \
            Producer("pg", namesrv=cluster.namesrv) as p:
        c.subscribe("Moved")
        c.poll(0.3)
        q0, q1 = c.assignment()
        taken: list = []
        t = threading.Thread(target=lambda: taken.extend(c.poll(2.0)))   # holds both queues' pulls
        t.start()
        time.sleep(0.3)
        p.send(Message("Moved", b"x"), queue=q0)      # its poll returns x; q1's pull stays on its socket
        t.join()
        t0 = time.monotonic()
        p.send(Message("Moved", b"y"), queue=q1)      # answered on the socket of a thread that is gone
        got: list = []
        while not got and time.monotonic() - t0 < 10:
            got += c.poll(0.1)
        waited = time.monotonic() - t0
        got += c.poll(0.5)
    assert [m.body for m in taken] == [b"x"]
    assert [m.body for m in got] == [b"y"]              # taken back and pulled again, once
    assert waited < 4.5                                 # the held suspend (<= 2 s) plus the grace


def test_async_pull_consumer_refuses_direct_poll():
    with pytest.raises(ValueError, match="direct_poll"):
        AsyncPullConsumer("g", namesrv="127.0.0.1:9876", direct_poll=True)


def test_direct_poll_is_checked():
    with pytest.raises(ValueError, match="direct_poll"):
        PullConsumer("g", namesrv="127.0.0.1:9876", direct_poll="yes")
