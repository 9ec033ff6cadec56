"""TraceDispatcher: bounded, never blocks a caller, drops counted; a traced client's hooks."""

import sys
import threading
import time

from quiver import ConsumeResult, Message, Producer, PushConsumer
from quiver.wire import trace
from quiver.client.trace_dispatcher import ClientTrace, TraceDispatcher
from quiver.testing import stub_cluster, wait_until


def _events(n, prefix="M"):
    rows = [trace.msg_entry(f"{prefix}{i}") for i in range(n)]
    return [trace.event("Pub", 1, None, "SEND_OK", "T", "b", "g", "c", None, trace.columns(rows))]


def test_full_queue_drops_and_counts_without_blocking():
    with stub_cluster() as cluster:
        producer = cluster.client(Producer, "tp", send_timeout=30.0).start()
        d = TraceDispatcher(cluster.namesrv, producer=producer, max_pending_msgs=10, max_in_flight=1,
                            interval_s=0.01)
        try:
            cluster.network.hold(cluster.broker_addrs["broker-a"])   # the trace topic never answers
            assert d.add_events(_events(5))
            assert wait_until(lambda: d.stats()["in_flight"] == 1)     # sent, unanswered
            assert d.add_events(_events(10, "N"))                        # queued: the one batch is in flight
            assert not d.add_events(_events(1, "X"))                     # full: dropped at once, not waited for
            assert d.flush_step() == 0                                   # in-flight limit: nothing taken
            st = d.stats()
            assert (st["dropped"], st["pending"], st["queued"]) == (1, 10, 15)
            cluster.network.release(cluster.broker_addrs["broker-a"])
            assert wait_until(lambda: d.stats()["pending"] == 0 and d.stats()["in_flight"] == 0, 10)
            assert (d.stats()["sent"], d.stats()["failed"]) == (15, 0)
        finally:
            d.close(1)
            producer.shutdown()


def test_no_route_counts_failures_and_a_bad_builder_is_dropped():
    d = TraceDispatcher("127.0.0.1:1", interval_s=0.01)   # nothing answers there
    try:
        def broken():
            raise ValueError("cannot build")
        d.add(1, broken)
        d.add_events(_events(3))
        assert wait_until(lambda: d.stats()["failed"] == 3, 15)
        assert d.stats()["unencodable"] == 1 and d.stats()["sent"] == 0
    finally:
        d.close(0)
    assert not d.add_events(_events(1))   # closed: dropped, counted
    assert d.stats()["dropped"] == 1


def test_closed_dispatcher_sends_what_was_queued():
    with stub_cluster() as cluster:
        producer = cluster.client(Producer, "tp").start()
        d = TraceDispatcher(cluster.namesrv, producer=producer, interval_s=60)   # only close() flushes
        ct = ClientTrace(d, "g", "client-1")
        ct.end_transaction("T", "broker-a", [("M1", "COMMIT"), ("M2", "ROLLBACK")], from_check=True)
        d.close(5)
        rows = cluster.admin().trace("M2")
        producer.shutdown()
    assert [(r["type"], r["status"], r["from_check"], r["client"]) for r in rows] == \
        [("EndTransaction", "ROLLBACK", True, "client-1")]


def test_push_consumer_traces_before_and_after_each_listener_call():
    with stub_cluster() as cluster:
        cluster.admin().create_topic("Orders", queues=1)
        done = threading.Event()
        pc = cluster.client(PushConsumer, "billing", consume_from="first", trace=True)
        pc.subscribe("Orders")
        pc.register(lambda msgs: done.set() or ConsumeResult.RECONSUME_LATER)
        with pc, cluster.client(Producer, "shop") as p:   # the producer is not traced: the consumer still is
            r = p.send(Message("Orders", b"o", keys=["k"]))
            assert done.wait(10)
        rows = cluster.admin().trace(r.msg_id)
    assert [(x["type"], x["status"], x["group"], x["keys"]) for x in rows][:2] == \
        [("SubBefore", "CONSUMING", "billing", "k"), ("SubAfter", "FAILED", "billing", "k")]


def test_pub_keeps_no_send_result_and_builds_the_same_rows():
    """The queue holds ids and facts, not the SendResults (old objects for the garbage collector);
    the Pub it builds later names each message with its offset, keys and tags."""
    from quiver.client.message import SendResult, SendStatus
    d = TraceDispatcher("127.0.0.1:1", interval_s=60)   # its thread never gets to it: flushed by hand
    try:
        results = [SendResult(SendStatus.SEND_OK, f"ID{i}", "broker-a", 2, 40 + i, "T") for i in range(3)]
        props = ["UNIQ_KEY\x01ID0\x02TRACE_ON\x01true\x02", "UNIQ_KEY\x01ID1\x02TAGS\x01paid\x02KEYS\x01k1 k2\x02",
                 "UNIQ_KEY\x01ID2\x02ITEMS\x01x\x02"]   # ITEMS ends like KEYS: the exact parse decides
        refs = sys.getrefcount(results), [sys.getrefcount(r) for r in results]
        ClientTrace(d, "pg", "client-1").pub(results, props, time.monotonic())
        assert (sys.getrefcount(results), [sys.getrefcount(r) for r in results]) == refs
        events = [ev for build, args in d._items for ev in build(*args)]
        rows = [r for body, _ in trace.pack(events, 400) for r in trace.decode(body)]
        assert [(r["msg_id"], r["queue_offset"], r["keys"], r["tags"]) for r in rows] == [
            ("ID0", 40, None, None), ("ID1", 41, "k1 k2", "paid"), ("ID2", 42, None, None)]
        assert {(r["type"], r["status"], r["group"], r["client"], r["broker"], r["queue_id"]) for r in rows} == {
            ("Pub", "SEND_OK", "pg", "client-1", "broker-a", 2)}
    finally:
        d.close(0)
