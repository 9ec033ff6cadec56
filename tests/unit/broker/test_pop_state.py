"""POP domain modules (pop_state, pop, pop_revive) on a real MessageStore: handles, revive, FIFO
gating, DLQ and the replay of the revive log after a "restart" (a new book over the same store)."""

import collections

import pytest

from quiver.runtime.service import reply_ext
from quiver.client.message import SHARDING_KEY, decode_messages
from quiver.wire import requests as rq
from quiver.wire.codes import ResponseCode
from quiver.wire.receipt_handle import ReceiptHandle
from quiver_broker.pop import PopRequests
from quiver_broker.pop_revive import Revive, ReviveLog
from quiver_broker.pop_state import REVIVE_GROUP, PopBook, QueueState, ack_record, ck_record, decode, encode
from quiver_broker.store import MessageStore

T = "PopT"


class Topics:
    def __init__(self):
        self.rows = {T: {"read": 2, "write": 2, "perm": 6, "order": False}}

    def get(self, topic):
        return self.rows.get(topic)

    def config(self, topic, create=False, system=False, queues=None):
        return self.rows.setdefault(topic, {"read": queues or 1, "write": queues or 1, "perm": 6, "order": False})


class Meta:
    def __init__(self):
        self.offsets, self.groups = {}, {}

    def get_offset(self, g, t, q):
        return self.offsets.get((g, t, q))

    def set_offset(self, g, t, q, off):
        self.offsets[(g, t, q)] = off


class Req:
    def __init__(self, args):
        self.args, self.answered, self.code, self.ext, self.bodies, self.remark = args, False, None, {}, (), ""
        self.denied = None       # what the ACL says now (Request.denied_now)

    def denied_now(self):
        return self.denied

    def reply(self, code=0, remark="", ext=None, bodies=()):
        ext = reply_ext(self.args.CODE, ext) if ext is not None else {}   # as Request.reply sends it
        self.answered, self.code, self.remark, self.ext, self.bodies = True, code, remark, ext, bodies


class Broker:
    """One broker's POP parts over `store`, with a settable clock (epoch ms)."""

    def __init__(self, store, topics, meta, now=1_000_000):
        self.now = now
        self.counters = collections.Counter()
        self.book = book = PopBook(None)
        self.log = ReviveLog(store, topics, "C1")
        limit = lambda g: meta.groups.get(g, {}).get("retry_max_times", 16)   # noqa: E731
        self.pop = PopRequests("b1", store, topics, book, self.log, limit, self.counters, 1000,
                               clock_ms=lambda: self.now)
        self.revive = Revive(book, self.log, store, topics, meta, self.counters, limit, self.pop.wake,
                             self.pop.expire_held, clock_ms=lambda: self.now)
        book.start = self.revive.start_of

    def receive(self, n=8, invisible_ms=1000, group="g", **kw):
        req = Req(rq.PopMessage(group=group, topic=T, max_msgs=n, invisible_ms=invisible_ms, consume_from="first",
                                **kw))
        self.pop.pop(req)
        handles = rq.PopReply.decode(req.ext).handles
        msgs = decode_messages(req.bodies[0], "b1") if handles else []
        return [(m.body, h) for m, h in zip(msgs, handles)]

    def ack(self, *handles, group="g"):
        req = Req(rq.AckMessage(group=group, topic=T, handles=list(handles)))
        self.pop.ack(req)
        return req


@pytest.fixture
def world(tmp_path):
    store = MessageStore(str(tmp_path), segment_bytes=1 << 20, cq_entries_per_file=1000, index_slots=1000,
                         index_entries=4000)
    store.open()
    topics, meta = Topics(), Meta()
    yield store, topics, meta
    store.close()


def put(store, bodies, queue_id=0, props=None):
    props = props or [""] * len(bodies)
    store.put_batch(T, queue_id, list(bodies), props, [0] * len(bodies), 0, 1, b"\x7f\0\0\x01\0\0\0\0")


def test_receipt_handle_round_trip_and_every_malformed_part():
    h = ReceiptHandle("broker-a.1", T, 3, 2 ** 40, 1_700_000_000_000, 5000, 7)
    assert ReceiptHandle.parse(h.encode()) == h and h.deadline_ms == 1_700_000_005_000
    for bad in ("", "1", "x" * 700, "1 b T 0 0 0 100", "1 b T 0 0 0 100 0 0", "2 b T 0 0 0 100 0", "1 b T -1 0 0 100 0",
                "1 b T 1024 0 0 100 0", "1 b T 0 0 0 43200001 0", "1 b T/x 0 0 0 100 0", "1 b T 0 0 0 100 ٣",
                "1 b  T 0 0 0 100 0", "1 b T 0 99999999999999999999 0 100 0", None, 12, b"1 b T 0 0 0 100 0"):
        with pytest.raises(ValueError):
            ReceiptHandle.parse(bad)


def test_queue_state_ack_only_the_delivery_in_flight_and_base_advances():
    st = QueueState(10, 10)
    st.popped([(10, 0), (11, 0), (12, 0)], pop_ts=5, invisible_ms=100, ck=0)
    assert st.next == 13 and st.expired(104) == [] and st.expired(105) == [10, 11, 12]
    assert not st.ack(11, pop_ts=4) and st.ack(11, pop_ts=5) and st.base == 10
    assert st.ack(10, 5) and st.base == 12 and st.oldest_ck() == 0
    st.popped([(12, 1)], pop_ts=200, invisible_ms=100, ck=3)       # redelivered: the old handle goes stale
    assert not st.ack(12, 5) and st.ack(12, 200) and st.base == st.next == 13 and st.oldest_ck() is None


def test_revive_records_decode_strictly():
    rec = ck_record("g", T, 1, 5, 100, None, [(3, 0)], [4])
    assert decode(encode(rec)) == rec and decode(encode(ack_record("g", T, 1, [(3, 5)])))["k"] == "ack"
    for bad in (b"", b"{", b"[]", b'{"k":"ck"}', encode({**rec, "o": [[1]]}), encode({**rec, "q": -1}),
                encode({**rec, "d": ["x"]}), encode({**rec, "k": "nope"}), encode({**rec, "m": 2 ** 40})):
        with pytest.raises(ValueError):
            decode(bad)


def test_pop_ack_revive_and_stale_handle(world):
    store, topics, meta = world
    b = Broker(store, topics, meta)
    put(store, [b"a", b"b"], 0)
    put(store, [b"c"], 1)
    got = b.receive()
    assert sorted(body for body, _ in got) == [b"a", b"b", b"c"] and all(h.reconsume == 0 for _, h in got)
    assert b.receive() == []                                        # all invisible
    by = dict(got)
    assert b.ack(by[b"a"]).code == ResponseCode.SUCCESS
    again = b.ack(by[b"a"])
    assert again.code == ResponseCode.RECEIPT_HANDLE_EXPIRED and rq.AckReply.decode(again.ext).acked == 0
    b.now += 1000
    back = b.receive()
    assert sorted((body, h.reconsume) for body, h in back) == [(b"b", 1), (b"c", 1)]
    assert b.ack(by[b"b"]).code == ResponseCode.RECEIPT_HANDLE_EXPIRED   # the first delivery's handle
    assert b.ack(*(h for _, h in back)).code == ResponseCode.SUCCESS
    b.revive.step()
    assert meta.offsets[("g", T, 0)] == 2 and meta.offsets[("g", T, 1)] == 1
    assert meta.offsets[(REVIVE_GROUP, b.log.topic, 0)] == b.log.max_offset()   # nothing left to replay


def test_tag_filter_skips_and_advances(world):
    store, topics, meta = world
    b = Broker(store, topics, meta)
    put(store, [b"x", b"y", b"z"], 0, ["TAGS\x01A\x02", "TAGS\x01B\x02", "TAGS\x01A\x02"])
    got = b.receive(expression="A")
    assert sorted(body for body, _ in got) == [b"x", b"z"]
    b.ack(*(h for _, h in got))
    assert b.book.queues[("g", T, 0)].base == 3


def test_fifo_one_in_flight_per_message_group_and_redelivery_first(world):
    store, topics, meta = world
    topics.rows[T]["order"] = True
    b = Broker(store, topics, meta)
    key = [f"{SHARDING_KEY}\x01{k}\x02" for k in ("a", "b", "a", "b", "a")]
    put(store, [b"a0", b"b0", b"a1", b"b1", b"a2"], 0, key)
    first = dict(b.receive())
    assert sorted(first) == [b"a0", b"b0"] and b.receive() == []
    b.ack(first[b"a0"])
    nxt = dict(b.receive())
    assert list(nxt) == [b"a1"]                                     # b0 still in flight blocks b1
    b.now += 1000                                                   # b0 and a1 expire
    again = b.receive()
    assert [(body, h.reconsume) for body, h in again] == [(b"b0", 1), (b"a1", 1)]


def test_max_reconsume_goes_to_dlq_by_the_revive_step(world):
    store, topics, meta = world
    meta.groups["g"] = {"retry_max_times": 1}
    b = Broker(store, topics, meta)
    put(store, [b"doomed"], 0)
    assert b.receive()[0][1].reconsume == 0
    b.now += 1000
    assert b.receive()[0][1].reconsume == 1
    b.now += 1000
    assert b.receive() == []                                        # at its max: left for the revive step
    b.revive.step()
    assert b.counters["pop_dlq_messages"] == 1 and store.max_offset("%DLQ%g", 0) == 1
    assert b.book.queues[("g", T, 0)].base == 1


def test_replay_rebuilds_in_flight_acked_and_changed(world):
    store, topics, meta = world
    b = Broker(store, topics, meta)
    put(store, [b"m%d" % i for i in range(6)], 0)
    got = dict(b.receive(n=3, invisible_ms=1000))
    b.ack(got[b"m0"])
    b.revive.step()                                                  # snapshot: base 1, replay start
    more = dict(b.receive(n=3, invisible_ms=1000))
    req = Req(rq.ChangeInvisibleDuration(group="g", topic=T, handle=got[b"m1"], invisible_ms=60_000))
    b.pop.change_invisible(req)
    changed = rq.ChangeInvisibleReply.decode(req.ext).handle
    b.ack(more[b"m3"])
    b2 = Broker(store, topics, meta, now=b.now)                      # a restart: same store and metadata
    b2.revive.replay()
    old, new = b.book.queues[("g", T, 0)], b2.book.queues[("g", T, 0)]
    assert (new.base, new.next, new.inflight, new.done) == (old.base, old.next, old.inflight, old.done)
    assert b2.ack(got[b"m1"]).code == ResponseCode.RECEIPT_HANDLE_EXPIRED and b2.ack(changed).code == 0
    b2.now += 1000
    assert sorted(body for body, _ in b2.receive()) == [b"m2", b"m4", b"m5"]


def test_a_held_pop_is_answered_by_a_put_or_its_deadline(world):
    store, topics, meta = world
    b = Broker(store, topics, meta)
    req = Req(rq.PopMessage(group="g", topic=T, max_msgs=4, poll_ms=1000, consume_from="first"))
    b.pop.pop(req)
    assert not req.answered and b.pop.held_count() == 1
    put(store, [b"late"], 1)
    b.pop.notify(T, 1)
    assert req.answered and len(rq.PopReply.decode(req.ext).handles) == 1
    req2 = Req(rq.PopMessage(group="g", topic=T, max_msgs=4, poll_ms=1000, consume_from="first"))
    b.pop.pop(req2)
    b.pop.expire_held(now=float("inf"))
    assert req2.answered and req2.code == ResponseCode.SUCCESS and rq.PopReply.decode(req2.ext).handles == []


def test_a_new_group_starts_where_rocketmq_pop_does(world):
    """'last': at 0 while the queue's first message is in memory, else at the last message; 'first'
    and a retry topic at the min offset; a group with an offset resumes there."""
    store, topics, meta = world
    b = Broker(store, topics, meta)
    put(store, [b"a", b"b", b"c"], 0)
    start = b.revive.start_of
    assert start("new", T, 0, "last") == 0                         # the quickstart: send, then receive
    b.revive.in_memory_bytes = 0                                   # the first message long out of memory
    assert start("new", T, 0, "last") == 2                         # the last one (max - 1)
    assert start("new", T, 0, "first") == 0
    assert start("new", T, 1, "last") == 0                         # an empty queue
    store.put_batch("%RETRY%new", 0, [b"r1", b"r2"], ["", ""], [0, 0], 0, 1, b"\x7f\0\0\x01\0\0\0\0")
    assert start("new", "%RETRY%new", 0, "last") == 0              # a retry topic: always from its start
    meta.offsets[("old", T, 0)] = 1
    assert start("old", T, 0, "last") == 1
    req = Req(rq.PopMessage(group="quick", topic=T, max_msgs=8, invisible_ms=1000))   # the wire's default
    b.revive.in_memory_bytes = 1 << 30
    b.pop.pop(req)
    assert [m.body for m in decode_messages(req.bodies[0], "b1")] == [b"a", b"b", b"c"]
