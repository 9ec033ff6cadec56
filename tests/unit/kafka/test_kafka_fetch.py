"""The Kafka gateway's Fetch path: a pull answer straight to a record batch, the byte budget, read-ahead."""

import concurrent.futures
import datetime
import threading
import time
import types

from quiver.client.base import MessageQueue
from quiver.client.message import decode_messages
from quiver.wire import record
from quiver.wire.codes import ResponseCode
from quiver.wire.property_string import format_properties
from quiver_kafka import mapping, records
from quiver_kafka.holding import STANDING_MS
from quiver_kafka.readahead import AHEAD_TTL_S, MAX_AHEAD, ReadAhead
from quiver_kafka.records import Record

from tests.support.waiting import wait_for
from tests.unit.kafka.test_kafka_handlers import _gateway

KAFKA_RECORDS = [
    Record(0, 1000, b"order-1", b"v", [("color", b"blue"), ("size", b"L")]),
    Record(0, 1005, b"two words", b"v"),
    Record(0, 1000, b"\xff\x00", None, [("bin", b"\x00\xff"), ("n", None)]),
    Record(0, 1000, None, b"", [("a", b"1"), ("a", b"2"), ("KEYS", b"x"), ("kafka.ts", b"9")]),
    Record(0, 1000, None, b"x" * 3000, []),
]


def _stored(msgs, first_offset=0) -> bytes:
    """A pull answer's body: the records as the broker stores them (KEYS and UNIQ_KEY added as a send does)."""
    out = b""
    for i, (m, born) in enumerate(msgs):
        props = dict(m.properties, UNIQ_KEY=f"ID{i}")
        if m.keys:
            props["KEYS"] = " ".join(m.keys)
        out += record.encode(m.body, topic=m.topic.encode(), props=format_properties(props).encode(),
                             queue_offset=first_offset + i, born_ts=born)
    return out


def _sdk_and_kafka_messages():
    msgs = [(mapping.to_message("T", r, 1000), 1000) for r in KAFKA_RECORDS]
    msgs.append((mapping.Message("T", b"body", keys=["a", "b"], properties={"region": "eu"}), 42))
    msgs.append((mapping.Message("T", b"plain"), 43))
    return msgs


def test_pulled_rows_read_as_the_message_mapping_does():
    body = _stored(_sdk_and_kafka_messages(), first_offset=10)
    by_message = [mapping.to_record(m) for m in decode_messages(body, "b")]
    rows = mapping.pulled_rows(record.decode_fields(body), 10)
    assert [Record(*row) for row in rows] == by_message
    assert [Record(*row) for row in mapping.pulled_rows(record.decode_fields(body), 13)] == by_message[3:]
    assert records.encode_rows(rows)[0] == records.encode(by_message)
    assert by_message[5] == Record(15, 42, b"a b", b"body", [("region", b"eu")])


def test_encode_rows_keeps_what_fits_the_byte_budget_and_always_the_first_record():
    rows = [(i, 1000, None, b"x" * 1000, []) for i in range(10)]
    whole, n = records.encode_rows(rows)
    assert n == 10
    data, n = records.encode_rows(rows, len(whole) - 1)
    assert n == 9 and len(data) < len(whole)
    assert [r.offset for r in records.decode(data)[0].records] == list(range(9))
    data, n = records.encode_rows(rows, 10)     # not even one fits: the first goes alone
    assert n == 1 and records.decode(data)[0].records[0].value == b"x" * 1000


def test_read_ahead_hands_a_pull_over_once_and_drops_old_or_surplus_ones():
    now = [0.0]
    ahead = ReadAhead(clock=lambda: now[0])
    ahead.put("T", 0, 5, "pull-5")
    assert ahead.take("T", 0, 6) is None and ahead.take("T", 1, 5) is None
    assert ahead.take("T", 0, 5) == "pull-5" and ahead.take("T", 0, 5) is None
    ahead.put("T", 0, 7, "pull-7")
    now[0] += AHEAD_TTL_S + 1
    assert ahead.take("T", 0, 7) is None
    for i in range(MAX_AHEAD + 3):
        ahead.put("T", i, 0, i)
    assert ahead.take("T", 0, 0) is None and ahead.take("T", MAX_AHEAD + 2, 0) == MAX_AHEAD + 2


class _Pulls:
    """The broker behind a fake transport: a queue of `stored` records, each pull answered at once."""

    def __init__(self, g, stored: int):
        self.body, self.stored, self.sent = _stored([(mapping.Message("T", b"v%d" % i), 1000) for i in range(stored)]), \
            stored, []
        g.admin.read_addr, g.admin.request_timeout = (lambda topic, broker: "127.0.0.1:1"), 1.0
        g.admin._io = lambda: types.SimpleNamespace(call_future=self.call_future)

    def call_future(self, addr, req, ext, bodies, timeout):
        self.sent.append(req.offset)
        starts = [0]   # where each record starts: its first 4 bytes are its size
        while starts[-1] < len(self.body):
            starts.append(starts[-1] + int.from_bytes(self.body[starts[-1]:starts[-1] + 4], "big"))
        start, end = starts[min(self.stored, req.offset)], starts[min(self.stored, req.offset + 2)]   # two a pull
        found = end > start
        env = types.SimpleNamespace(code=ResponseCode.SUCCESS if found else ResponseCode.PULL_NOT_FOUND, remark="",
                                    bodies=(self.body[start:end],) if found else (),
                                    ext={"next": min(self.stored, req.offset + 2), "min": 0, "max": self.stored})
        return types.SimpleNamespace(result=lambda timeout=None: env)


def _fetch(g, offset):
    body = types.SimpleNamespace(max_bytes=1 << 20, topics=[types.SimpleNamespace(topic="T", partitions=[
        types.SimpleNamespace(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)])])
    total, [answer] = g._fetch_round(body)
    [part] = answer["partitions"]
    return [r.offset for b in records.decode(part["records"]) for r in b.records]


def test_a_fetch_pulls_the_next_records_ahead_and_the_next_fetch_takes_them():
    g = _gateway({"T": [MessageQueue("T", "a", 0)]})
    broker = _Pulls(g, 5)
    assert _fetch(g, 0) == [0, 1] and broker.sent == [0, 2]        # offset 2 pulled ahead at once
    assert _fetch(g, 2) == [2, 3] and broker.sent == [0, 2, 4]     # taken, not pulled again; 4 ahead
    assert _fetch(g, 4) == [4] and broker.sent == [0, 2, 4]        # the last: nothing more to pull ahead
    assert g.ahead.taken == 2
    assert g.fetched == {"pulls": 3, "pulled": 5, "answered": 5}   # no record read twice


def test_a_read_ahead_that_found_nothing_is_pulled_again():
    g = _gateway({"T": [MessageQueue("T", "a", 0)]})
    broker = _Pulls(g, 2)
    empty = types.SimpleNamespace(code=ResponseCode.PULL_NOT_FOUND, remark="", bodies=(),
                                  ext={"next": 2, "min": 0, "max": 2})
    g.ahead.put("T", 0, 0, types.SimpleNamespace(result=lambda timeout=None: empty))
    g.admin.call_broker = lambda addr, req, timeout=None, ok=None: broker.call_future(addr, req, None, (), 1).result()
    g.admin.broker_addr = lambda broker_name, topic: "127.0.0.1:1"
    assert _fetch(g, 0) == [0, 1]
    assert g.fetched["pulled"] == g.fetched["answered"] == 2


class _HeldPulls:
    """A broker that holds a pull with a suspend time (a real Future, answered by `store`) and
    answers any other at once with what is stored."""

    def __init__(self, g):
        self.stored, self.at, self.held, self.sent = {}, {}, [], []   # queue id -> body, its offset; (req, future) held
        g.admin.read_addr, g.admin.request_timeout = (lambda topic, broker: "127.0.0.1:1"), 1.0
        g.admin._io = lambda: types.SimpleNamespace(call_future=self.call_future)
        g.admin.call_broker = lambda addr, req, timeout=None, ok=None: self.call_future(addr, req, None, (), 1).result()
        g.admin.broker_addr = lambda broker_name, topic: "127.0.0.1:1"

    def _env(self, req):
        body = self.stored.get(req.queue_id) if self.at.get(req.queue_id) == req.offset else None
        ext = {"next": req.offset + (1 if body else 0), "min": 0, "max": req.offset + (1 if body else 0)}
        return types.SimpleNamespace(code=ResponseCode.SUCCESS if body else ResponseCode.PULL_NOT_FOUND, remark="",
                                     bodies=(body,) if body else (), ext=ext)

    def call_future(self, addr, req, ext, bodies, timeout):
        self.sent.append((req.queue_id, req.offset, req.suspend_ms))
        fut = concurrent.futures.Future()
        if req.suspend_ms and self.at.get(req.queue_id) != req.offset:
            self.held.append((req, fut))
        else:
            fut.set_result(self._env(req))
        return fut

    def store(self, queue_id: int, offset: int) -> None:
        """A put to the queue: its held pulls are answered now."""
        self.stored[queue_id] = _stored([(mapping.Message("T", b"new"), 1000)], first_offset=offset)
        self.at[queue_id] = offset
        for req, fut in [h for h in self.held if h[0].queue_id == queue_id]:
            self.held.remove((req, fut))
            fut.set_result(self._env(req))


def _fetch_body(offsets, max_wait_s):
    return types.SimpleNamespace(max_bytes=1 << 20, min_bytes=1, max_wait=datetime.timedelta(seconds=max_wait_s),
                                 topics=[types.SimpleNamespace(topic="T", partitions=[
                                     types.SimpleNamespace(partition=i, fetch_offset=o, partition_max_bytes=1 << 20)
                                     for i, o in enumerate(offsets)])])


def test_a_fetch_finding_nothing_is_held_at_the_broker_and_answered_when_a_put_lands():
    g = _gateway({"T": [MessageQueue("T", "a", 0), MessageQueue("T", "a", 1)]})
    broker = _HeldPulls(g)
    threading.Timer(0.3, broker.store, (1, 7)).start()
    t0 = time.monotonic()
    out = g.fetch(_fetch_body([5, 7], 30))
    assert time.monotonic() - t0 < 10   # the put answered it, not the 30 s max wait
    p0, p1 = out["responses"][0]["partitions"]
    assert p0["records"] == b"" and [r.offset for b in records.decode(p1["records"]) for r in b.records] == [7]
    # both held, suspend time given; partition 1, read to its end, has a pull standing at offset 8
    assert {(q, o) for q, o, s in broker.sent if s > 0} == {(0, 5), (1, 7), (1, 8)}
    # the pull of partition 0 is still held: kept for the next Fetch of offset 5, which waits on it
    broker.store(0, 5)
    sent = len(broker.sent)
    out = g.fetch(_fetch_body([5, 8], 30))
    assert [r.offset for b in records.decode(out["responses"][0]["partitions"][0]["records"]) for r in b.records] == [5]
    assert (0, 5) not in {(q, o) for q, o, s in broker.sent[sent:]}   # not pulled again


def test_a_fetch_waits_on_the_pull_standing_since_the_last_one_and_sends_none():
    g = _gateway({"T": [MessageQueue("T", "a", 0)]})
    broker = _HeldPulls(g)
    broker.store(0, 3)
    first = g.fetch(_fetch_body([3], 30))["responses"][0]["partitions"][0]
    assert first["high_watermark"] == 4 and broker.sent[-1] == (0, 4, STANDING_MS[1])   # read to its end: a pull stands at 4
    sent = len(broker.sent)
    threading.Timer(0.3, broker.store, (0, 4)).start()
    t0 = time.monotonic()
    part = g.fetch(_fetch_body([4], 30))["responses"][0]["partitions"][0]
    assert time.monotonic() - t0 < 10 and [r.offset for b in records.decode(part["records"]) for r in b.records] == [4]
    assert (0, 4) not in {(q, o) for q, o, s in broker.sent[sent:]}   # the standing pull answered it


def test_a_fetch_held_until_max_wait_answers_empty_records():
    g = _gateway({"T": [MessageQueue("T", "a", 0)]})
    broker = _HeldPulls(g)
    out = g.fetch(_fetch_body([0], 0.2))
    assert out["responses"][0]["partitions"][0]["records"] == b""
    [(req, fut)] = broker.held   # its suspend time runs out at the broker: nothing found
    fut.set_result(broker._env(req))
    broker.held.clear()
    broker.store(0, 0)   # stored since: the next Fetch does not take the empty answer for it
    part = g.fetch(_fetch_body([0], 0.2))["responses"][0]["partitions"][0]
    assert [r.offset for b in records.decode(part["records"]) for r in b.records] == [0]
