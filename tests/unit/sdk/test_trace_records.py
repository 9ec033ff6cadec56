"""quiver.wire.trace (the record format), quiver.tools.trace_view, and Admin.trace's merge and sort."""

import orjson
import pytest

from quiver.client.access import broker_access
from quiver import Message, Producer
from quiver.wire import trace
from quiver.client.trace_dispatcher import TraceDispatcher
from quiver.errors import QuiverError
from quiver.testing import stub_cluster, wait_until
from quiver.tools.trace_view import format_trace
from quiver_broker.tracing import trace_topic


def _event(type_="Pub", t=1000, ids=("M1",), **kw):
    rows = [trace.msg_entry(i, kw.get("keys"), kw.get("tags"), 0, n, kw.get("x")) for n, i in enumerate(ids)]
    return trace.event(type_, t, kw.get("cost", 1.5), kw.get("status", "SEND_OK"), kw.get("topic", "T"),
                       "broker-a", kw.get("group", "g"), "c1", kw.get("extra"), trace.columns(rows))


def test_round_trip_with_non_ascii_and_extras():
    ev = _event(ids=("M1", "M2"), keys="ключ 键", tags="тег", x={"reconsume_times": 2}, extra={"from_check": True})
    rows = trace.decode(trace.encode([ev]))
    assert [r["msg_id"] for r in rows] == ["M1", "M2"]
    r = rows[0]
    assert (r["type"], r["time_ms"], r["cost_ms"], r["status"], r["topic"], r["broker"], r["group"], r["client"]) \
        == ("Pub", 1000, 1.5, "SEND_OK", "T", "broker-a", "g", "c1")
    assert (r["keys"], r["tags"], r["queue_id"], r["queue_offset"]) == ("ключ 键", "тег", 0, 0)
    assert r["reconsume_times"] == 2 and r["from_check"] is True
    assert rows[1]["queue_offset"] == 1


def test_consecutive_offsets_column_and_empty_batch():
    msgs = {"id": ["A", "B", "C"], "k": None, "tg": None, "q": 3, "o": 10, "x": None}
    rows = trace.decode(trace.encode([trace.event("Pub", 5, None, "SEND_OK", "T", "b", "g", None, None, msgs)]))
    assert [(r["queue_id"], r["queue_offset"], r["cost_ms"]) for r in rows] == [(3, 10, None), (3, 11, None),
                                                                                 (3, 12, None)]
    assert trace.decode(trace.encode([])) == []
    assert trace.pack([], 10) == []


def test_pack_splits_events_by_ids_and_keeps_offsets():
    msgs = {"id": [f"M{i}" for i in range(1000)], "k": None, "tg": None, "q": 0, "o": 500, "x": None}
    ev = trace.event("Pub", 5, 1, "SEND_OK", "T", "b", "g", "c", None, msgs)
    packed = trace.pack([ev, _event(ids=("X",))], 300)
    assert [len(keys) for _, keys in packed] == [300, 300, 300, 101]
    rows = [r for body, _ in packed for r in trace.decode(body)]
    assert [r["msg_id"] for r in rows] == [f"M{i}" for i in range(1000)] + ["X"]
    assert [r["queue_offset"] for r in rows[:1000]] == list(range(500, 1500))
    assert all(" " not in k and k for _, keys in packed for k in keys)


def test_an_extra_never_overrides_a_field():
    rows = trace.decode(trace.encode([_event(extra={"type": "DLQ", "topic": "X", "why": 1})]))
    assert rows[0]["type"] == "Pub" and rows[0]["topic"] == "T" and rows[0]["why"] == 1


@pytest.mark.parametrize("body", [
    b"", b"not json", b"[]", b'{"v": 2, "ev": []}', b'{"v": 1}', b'{"v": 1, "ev": [1]}',
    b'{"v": 1, "ev": [["Nope", 1, null, "s", "t", null, null, null, null, {"id": ["a"]}]]}',
    b'{"v": 1, "ev": [["Pub", "1", null, "s", "t", null, null, null, null, {"id": ["a"]}]]}',
    b'{"v": 1, "ev": [["Pub", 1, true, "s", "t", null, null, null, null, {"id": ["a"]}]]}',
    b'{"v": 1, "ev": [["Pub", 1, null, "s", 5, null, null, null, null, {"id": ["a"]}]]}',
    b'{"v": 1, "ev": [["Pub", 1, null, "s", "t", null, null, null, [], {"id": ["a"]}]]}',
    b'{"v": 1, "ev": [["Pub", 1, null, "s", "t", null, null, null, null, {"id": [1]}]]}',
    b'{"v": 1, "ev": [["Pub", 1, null, "s", "t", null, null, null, null, {"id": ["a"], "k": ["x", "y"]}]]}',
    b'{"v": 1, "ev": [["Pub", 1, null, "s", "t", null, null, null, null, {"id": ["a"], "o": ["x"]}]]}',
    b'{"v": 1, "ev": [["Pub", 1, null, "s", "t", null, null, null, null, {"id": ["a"], "x": [5]}]]}',
    b'{"v": 1, "ev": [["Pub", 1, null, "s", "t", null, null, null, null, []]]}',
])
def test_malformed_bodies_raise_trace_format_error(body):
    with pytest.raises(trace.TraceFormatError):
        trace.decode(body)


def test_timeline_filters_dedupes_and_orders_same_millisecond_by_life():
    rows = trace.decode(trace.encode([
        _event("SubAfter", 2000, status="SUCCESS"), _event("SubBefore", 2000, status="CONSUMING"),
        _event("Pub", 2000), _event("Pub", 2000), _event("Delayed", 1500, ids=("OTHER",)),
        _event("Retry", 3000), _event("DLQ", 2500)]))
    out = trace.timeline(rows, "M1")
    assert [r["type"] for r in out] == ["Pub", "SubBefore", "SubAfter", "DLQ", "Retry"]


def test_format_trace_lines():
    rows = trace.timeline(trace.decode(trace.encode([
        _event("Pub", 1000), _event("Delayed", 1200, cost=None, x={"due_ms": 1100, "late_ms": 100}),
        _event("SubAfter", 1300, status="FAILED", x={"reconsume_times": 1})])), "M1")
    lines = format_trace(rows)
    assert len(lines) == 3
    assert "Pub" in lines[0] and "+0 ms" in lines[0] and "T@broker-a q0:0" in lines[0] and "cost 1.5 ms" in lines[0]
    assert "late 100 ms" in lines[1] and "cost -" in lines[1]
    assert "FAILED" in lines[2] and "reconsume 1" in lines[2] and "+300 ms" in lines[2]
    assert lines[0].startswith("00:00:01.000Z ")   # UTC, marked, as the console shows times
    assert len(format_trace([])) == 1


def test_admin_trace_merges_every_broker_in_time_order():
    with stub_cluster(brokers=2) as cluster:
        for app in cluster.brokers.values():   # as a Retry or Delayed event there would
            app.service.call_soon_threadsafe(trace_topic, app.topics)
        admin = cluster.admin()

        def routed():
            try:
                return len(broker_access(admin).route("RMQ_SYS_TRACE_TOPIC", refresh=True).addrs) == 2
            except QuiverError:
                return False
        assert wait_until(routed)
        producer = cluster.client(Producer, "tp").start()
        d = TraceDispatcher(cluster.namesrv, producer=producer, max_in_flight=100)
        try:
            # one trace message per event, round-robin over both brokers' trace queues, newest first
            for n, type_ in enumerate(["SubAfter", "SubBefore", "Delayed", "Pub"]):
                d.add_events([_event(type_, 4000 - 1000 * n)])
                d.add_events([_event(type_, 4000 - 1000 * n)])   # stored twice: shown once
                assert wait_until(lambda: d.stats()["pending"] == 0 and d.stats()["in_flight"] == 0)
                d.add_events([_event("Pub", 10, ids=("NOT-MINE",))])
            assert wait_until(lambda: d.stats()["sent"] == 8 and d.stats()["in_flight"] == 0)
            for app in cluster.brokers.values():   # the timeline is spread over both brokers
                assert sum(app.store.max_offset("RMQ_SYS_TRACE_TOPIC", q) for q in range(4)) > 0
            rows = cluster.admin().trace("M1")
        finally:
            d.close()
            producer.shutdown()
    assert [r["type"] for r in rows] == ["Pub", "Delayed", "SubBefore", "SubAfter"]
    assert [r["time_ms"] for r in rows] == [1000, 2000, 3000, 4000]


def test_traced_producer_in_a_stub_cluster_and_env_switch(monkeypatch):
    monkeypatch.setenv("QUIVER_TRACE", "1")
    with stub_cluster() as cluster:
        with cluster.client(Producer, "shop") as p:   # trace=None: QUIVER_TRACE decides
            assert p._traced
            r = p.send(Message("Orders", b"o", tags="t", keys=["k1", "k2"]))
            batch = p.send_batch([Message("Orders", b"a"), Message("Orders", b"b")])
        admin = cluster.admin()
        rows = admin.trace(r.msg_id)
        assert [(x["type"], x["keys"], x["tags"], x["group"]) for x in rows] == [("Pub", "k1 k2", "t", "shop")]
        assert admin.trace(batch[1].msg_id)[0]["queue_offset"] == batch[1].queue_offset
        monkeypatch.setenv("QUIVER_TRACE", "0")
        assert not cluster.client(Producer, "quiet")._traced


def test_rows_are_json_ready():
    rows = trace.decode(trace.encode([_event()]))
    assert orjson.loads(orjson.dumps(rows)) == rows
