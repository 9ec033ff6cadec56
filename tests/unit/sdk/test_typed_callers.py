"""The SDK's clients send typed requests (quiver.wire.requests) and read replies through their schemas (issue 13).

No sockets: a fake transport records what each client hands it and answers from
typed replies, so the wire form is always the one a schema made.
"""

import ast
import pathlib
import threading
import time
from concurrent.futures import Future
from types import SimpleNamespace

import pytest

from quiver.client.access import broker_access
from quiver.wire import protocol, record, replies, schema
from quiver.wire import requests as rq
from quiver.client.base import ClientBase, MessageQueue, Route
from quiver.wire.codes import ResponseCode
from quiver.client.consumer import PullConsumer
from quiver.errors import FieldError, QueryNotFoundError
from quiver.client.message import MessageSelector
from quiver.client.process_queue import ProcessQueue
from quiver.client.pull_buffer import QueueState
from quiver.client.producer import Producer
from quiver.client.push_consumer import PushConsumer
from quiver.client.queue_puller import QueuePuller
from quiver.client.transaction_producer import TransactionProducer
from quiver.wire.validation import SCHEDULE_TOPIC, TIMER_TOPIC
from quiver.wire.property_string import NAME_SEP, PROP_SEP, format_properties

NS = "127.0.0.1:1"
ADDR = "127.0.0.1:10911"
MQ = MessageQueue("T", "a", 0)


class FakeTransport:
    """Records (how, addr, request, ext, bodies); answers `replies[schema class]` (a typed reply,
    an exception to raise, or a callable request -> either)."""

    def __init__(self, answers=None):
        self.sent: list[tuple] = []
        self.callbacks: list = []   # of `send`, in order: call one with a reply
        self.answers = answers or {}

    def _answer(self, req):
        ans = self.answers.get(type(req), rq.Ping())
        ans = ans(req) if callable(ans) and not isinstance(ans, rq.Schema) else ans
        if isinstance(ans, Exception):
            raise ans
        if isinstance(ans, protocol.Envelope):
            return ans
        code = ResponseCode.SUCCESS
        if isinstance(ans, tuple):
            code, ans = ans
        return protocol.Envelope(code, 1, ans.ext() if isinstance(ans, rq.Schema) else ans, [], "")

    def call(self, addr, req, ext=None, bodies=(), timeout=3.0, ok=(ResponseCode.SUCCESS,)):
        self.sent.append(("call", addr, req, ext, list(bodies)))
        return self._answer(req)

    def call_future(self, addr, req, ext=None, bodies=(), timeout=3.0):
        self.sent.append(("future", addr, req, ext, list(bodies)))
        fut = Future()
        try:
            fut.set_result(self._answer(req))
        except Exception as exc:
            fut.set_exception(exc)
        return fut

    def send(self, addr, req, ext, bodies, callback, timeout=3.0):
        self.sent.append(("send", addr, req, ext, list(bodies)))
        self.callbacks.append(callback)
        return 1

    def oneway(self, addr, req, ext=None, bodies=()):
        self.sent.append(("oneway", addr, req, ext, list(bodies)))

    def requests(self):
        return [s[2] for s in self.sent]


def _started(client, answers=None):
    client._transport = FakeTransport(answers)
    client._started = True
    client._hb_stop = threading.Event()
    return client


class _Timer:
    """A consumer's DelayedCalls that records what it is asked to run later."""

    def __init__(self):
        self.calls: list[tuple] = []

    def call_later(self, delay_s, fn, *args):
        self.calls.append((delay_s, fn, args))


def _pulling(client, answers=None):
    """`client` started on a fake transport, with the pull engine a real start() gives it."""
    _started(client, answers)
    client._timer = _Timer()
    client._puller = QueuePuller(broker_access(client), client.group, client.options, client._timer.call_later)
    return client


def _route(topic="T"):
    return Route(topic, {"brokers": [{"cluster": "C", "broker_name": "a", "addrs": {"0": ADDR}}],
                         "queues": [{"broker_name": "a", "read": 1, "write": 1, "perm": 6}]})


# ---- heartbeats ---------------------------------------------------------------------------------


def _pull_consumer():
    c = PullConsumer("G", namesrv=NS, consume_from="first")
    c._subscriptions = {"T": MessageSelector.tags("A || B"), "S": MessageSelector.sql("a > 1")}
    return c


def _push_consumer():
    c = PushConsumer("G", namesrv=NS)
    c._subscriptions = {"T": MessageSelector.tags("*")}
    return c


@pytest.mark.parametrize("make", [_pull_consumer, _push_consumer,
                                  lambda: TransactionProducer("PG", namesrv=NS)])
def test_heartbeats_are_typed_and_round_trip(make):
    client = make()
    hb = client._heartbeat_payload()
    assert isinstance(hb, rq.HeartBeat) and hb.client_id == client.client_id
    assert client._heartbeat() == hb
    assert rq.HeartBeat.decode(hb.ext()) == hb


def test_pull_consumer_heartbeat_names_its_subscriptions():
    consumers = _pull_consumer()._heartbeat().consumers
    assert [(c.group, c.consume_type, c.consume_from) for c in consumers] == [("G", "PULL", "first")]
    assert {t: (s.type, s.expression) for t, s in consumers[0].subscriptions.items()} == {
        "T": ("TAG", "A || B"), "S": ("SQL92", "a > 1")}


def test_a_plain_producer_heartbeats_its_group():
    p = Producer("pg", namesrv=NS)
    assert p._heartbeat() == rq.HeartBeat(client_id=p.client_id, producers=["pg"])


class _DictHeartbeat(ClientBase):
    """A subclass that still answers the wire form (as services' clients may)."""

    def _heartbeat_payload(self):
        return {"consumers": [{"group": "SCHED", "subscriptions": {"T": {"type": "TAG", "expression": "*"}},
                               "model": "CLUSTERING", "type": "ignored by the schema"}]}


def test_a_wire_form_payload_is_decoded_and_gets_this_clients_id():
    client = _DictHeartbeat(NS)
    hb = client._heartbeat()
    assert isinstance(hb, rq.HeartBeat) and hb.client_id == client.client_id
    assert [c.group for c in hb.consumers] == ["SCHED"] and hb.consumers[0].subscriptions["T"].expression == "*"


def test_a_typed_payload_with_another_id_is_sent_under_this_clients_id():
    class Other(ClientBase):
        def _heartbeat_payload(self):
            return rq.HeartBeat(client_id="someone-else", producers=["P"])
    client = Other(NS)
    assert client._heartbeat() == rq.HeartBeat(client_id=client.client_id, producers=["P"])


def test_heartbeats_and_leaving_send_typed_requests():
    client = _started(_DictHeartbeat(NS))
    client._heartbeat_brokers = lambda: {"a": ADDR}
    client._send_heartbeats()
    client._before_close()
    reqs = client._transport.requests()
    assert reqs == [client._heartbeat(), rq.UnregisterClient(client_id=client.client_id, consumer_group="SCHED")]


def test_a_bad_wire_form_payload_skips_the_heartbeat_instead_of_raising(caplog):
    class Bad(ClientBase):
        def _heartbeat_payload(self):
            return {"consumers": [{"group": ""}]}
    client = _started(Bad(NS))
    client._send_heartbeats()
    client._before_close()
    assert client._transport.sent == [] and "heartbeat skipped" in caplog.text


# ---- producer -----------------------------------------------------------------------------------


def test_send_request_packs_several_bodies_and_round_trips():
    p = Producer("PG", namesrv=NS)
    bodies = [b"one", "два".encode(), b""]
    req, frames = p._request(MQ, ["p1", "p2", "p3"], [0, 1, 2], bodies)
    back = rq.SendMessage.decode(req.ext())
    assert (back.topic, back.queue_id, back.group, back.metas) == ("T", 0, "PG", ([0, 1, 2], ["p1", "p2", "p3"]))
    assert [bytes(b) for b in back.bodies(frames)] == bodies and len(frames) == 1
    req, frames = p._request(MQ, ["p"], [0], [b"x"], wait=False)
    back = rq.SendMessage.decode(req.ext())
    assert back.lengths is None and frames == [b"x"] and back.wait is False and back.bodies(frames) == [b"x"]


def test_send_results_come_from_the_send_reply():
    p = Producer("PG", namesrv=NS)
    env = protocol.Envelope(ResponseCode.SUCCESS, 1, rq.SendReply(topic="T", queue_id=0, queue_offset=10,
                                                                   phys_offsets=[100, 200]).ext(), [], "")
    res = p._result(env, MQ, ADDR, ["m1", "m2"])
    assert [(r.msg_id, r.queue_offset, r.commit_log_offset) for r in res] == [("m1", 10, 100), ("m2", 11, 200)]
    env.ext = {rq.SendReply.key("queue_offset"): 10}
    with pytest.raises(FieldError, match="SendReply"):
        p._result(env, MQ, ADDR, ["m1"])


def test_cancel_scheduled_asks_typed_and_reads_typed_answers():
    p = _started(Producer("PG", namesrv=NS), {
        rq.GetConsumerList: rq.ConsumerListReply(ids=["scheduler|127.0.0.1:7000|x", "other|h:1|y"]),
        rq.ScheduleCancel: rq.ScheduleCancelReply(result="cancelled")})
    broker_access(p).all_broker_addrs = lambda: {"a": ADDR}
    assert p.cancel_scheduled("MSGID", "Orders") is True
    assert p._transport.requests() == [rq.GetConsumerList(group="SCHEDULE_CONSUMER"),
                                      rq.ScheduleCancel(msg_id="MSGID", topic="Orders")]


def _parked(real_topic: str) -> protocol.Envelope:
    """A QUERY_MESSAGE answer: one message parked in the timer topic for `real_topic`."""
    props = f"REAL_TOPIC{NAME_SEP}{real_topic}{PROP_SEP}REAL_QID{NAME_SEP}0".encode()
    rec = record.encode(b"x", topic=TIMER_TOPIC.encode(), props=props)
    return protocol.Envelope(ResponseCode.SUCCESS, 1, {}, [rec], "")


def test_cancel_scheduled_unknown_everywhere_looks_the_id_up():
    p = _started(Producer("PG", namesrv=NS), {
        rq.GetConsumerList: rq.ConsumerListReply(ids=["scheduler|127.0.0.1:7000|x"]),
        rq.ScheduleCancel: rq.ScheduleCancelReply(result="unknown"),
        rq.QueryMessage: lambda req: _parked("Orders") if req.topic == TIMER_TOPIC else QueryNotFoundError("no")})
    broker_access(p).all_broker_addrs = lambda: {"a": ADDR}
    assert p.cancel_scheduled("MSGID", "Orders") is True  # still parked in the timer topic
    lookups = [r for r in p._transport.requests() if isinstance(r, rq.QueryMessage)]
    assert lookups == [rq.QueryMessage(topic=t, key="MSGID", max_msgs=1) for t in (SCHEDULE_TOPIC, TIMER_TOPIC)]
    with pytest.raises(QueryNotFoundError):
        p.cancel_scheduled("MSGID", "Other")  # parked, but for another topic: not this caller's to cancel
    assert p.cancel_scheduled("MSGID") is True  # no topic: read off the parked message


# ---- pull consumer ------------------------------------------------------------------------------


def test_pull_consumer_pulls_with_a_typed_request_and_moves_by_the_pull_reply():
    c = _pulling(_pull_consumer())
    st = QueueState(MQ, ADDR, 5)
    c._queues[MQ] = st
    c._pull(st)
    (how, addr, req, ext, _), = c._transport.sent
    assert how == "send" and addr == ADDR and ext is None
    assert req == rq.PullMessage(group="G", topic="T", queue_id=0, offset=5, max_msgs=32, suspend_ms=15_000,
                                 expression="A || B")
    reply = protocol.Envelope(ResponseCode.PULL_NOT_FOUND, 1, rq.PullReply(next=9).ext(), [], "")
    c._started = False  # no follow-up pull
    c._transport.callbacks[-1](reply)
    assert st.next == 9 and st.consumed == 9 and not st.in_flight


def test_a_garbled_pull_reply_moves_nothing_and_asks_again_later():
    c = _pulling(_pull_consumer())
    st = QueueState(MQ, ADDR, 5)
    c._queues[MQ] = st
    c._pull(st)
    c._transport.callbacks[-1](protocol.Envelope(ResponseCode.PULL_NOT_FOUND, 1, {}, [], ""))
    assert st.next == 5 and st.consumed == 5 and not st.in_flight
    assert c._timer.calls == [(1.0, c._pull, (st,))]   # pull_delay_on_error_ms


def test_pull_consumer_offsets_are_typed_both_ways():
    c = _pulling(_pull_consumer(), {rq.QueryConsumerOffset: QueryNotFoundError("none"),
                                    rq.GetMinOffset: rq.OffsetReply(offset=42)})
    c._routes["T"] = (time.monotonic(), _route())
    assert c._take(MQ)
    st = c._queues[MQ]
    assert st.next == 42 and st.addr == ADDR
    assert c._transport.requests()[:3] == [rq.QueryConsumerOffset(group="G", topic="T", queue_id=0),
                                          rq.GetMinOffset(topic="T", queue_id=0),
                                          rq.PullMessage(group="G", topic="T", queue_id=0, offset=42, max_msgs=32,
                                                         suspend_ms=15_000, expression="A || B")]
    st.consumed = 50
    c.commit()
    assert c._transport.requests()[-1] == rq.UpdateConsumerOffset(group="G", topic="T", queue_id=0, offset=50)
    assert st.committed == 50


def test_consumer_ids_notifications_are_decoded():
    c = _pull_consumer()
    woke = c._rebalance._wake
    for group, woken in (("other", False), ("G", True), (None, True)):
        woke.clear()
        c._on_ids_changed(ADDR, protocol.Envelope(40, 1, rq.NotifyConsumerIdsChanged(group=group).ext()))
        assert woke.is_set() is woken
    woke.clear()
    c._on_ids_changed(ADDR, protocol.Envelope(40, 1, {rq.NotifyConsumerIdsChanged.key("group"): 7}))
    assert not woke.is_set()


def test_push_consumer_pulls_through_the_engine_with_its_commit_and_restores_retried_messages():
    c = _pulling(_push_consumer())
    c._running = True
    pq = ProcessQueue(MessageQueue(c._retry_topic, "a", 0), ADDR, 0)
    c._pqs[pq.mq] = pq
    c._offsets.update(pq.mq, 3)
    dispatched = []
    c._consume = SimpleNamespace(dispatch=lambda pq, msgs: dispatched.extend(msgs), hand_off_first=lambda n: True)
    c._pull(pq)
    assert c._transport.requests() == [rq.PullMessage(group="G", topic="%RETRY%G", queue_id=0, offset=0,
                                                     commit_offset=3, max_msgs=32, suspend_ms=15_000)]
    host = b"\x7f\0\0\x01\0\0\0\0"
    body = record.encode(b"again", topic=b"%RETRY%G",
                         props=format_properties({"RETRY_TOPIC": "Orders", "RECONSUME_TIME": "2"}).encode(),
                         phys_offset=100, born_ts=1, born_host=host, store_ts=2, store_host=host, reconsume=1)
    c._transport.callbacks[-1](protocol.Envelope(ResponseCode.SUCCESS, 1, rq.PullReply(next=1).ext(), [body], ""))
    assert [(m.topic, m.reconsume_times, m.body) for m in dispatched] == [("Orders", 2, b"again")]
    assert pq.next_offset == 1 and list(pq.msgs) == [0]
    assert c._transport.requests()[-1].offset == 1   # the next pull starts past the batch


# ---- nothing spells a wire key ------------------------------------------------------------------

SDK = pathlib.Path(schema.__file__).parent.parent
CALLERS = ["client/base", "client/consumer", "client/push_consumer", "client/producer",
           "client/transaction_producer", "client/admin", "client/range_reader", "spark/planner", "client/filter_route",
           "client/consume_service", "client/queue_puller", "client/rebalance", "client/offset_store",
           "client/options"]
SENDS = {"call_broker", "call_read", "call_namesrv", "_call_broker", "_call_read", "_call_namesrv", "call", "call_future",
         "send", "oneway"}
ALLOWED = {("client/admin", "id")}  # ha_status rows for people: a row's broker id, not a wire key


def _short_keys() -> set[str]:
    schemas = {v for m in (rq, replies, schema) for v in vars(m).values()
               if isinstance(v, type) and issubclass(v, schema.Schema) and v is not schema.Schema}
    return {s.key for cls in schemas for s in cls.FIELDS if len(s.key) <= 3}


@pytest.mark.parametrize("name", CALLERS)
def test_callers_spell_no_wire_key_and_read_no_raw_ext(name):
    short = _short_keys()
    found = []
    for node in ast.walk(ast.parse((SDK / f"{name}.py").read_text())):
        keys = []
        if isinstance(node, ast.Dict):
            keys = node.keys
        elif isinstance(node, ast.Subscript):
            keys = [node.slice]
            if isinstance(node.value, ast.Attribute) and node.value.attr == "ext":
                found.append(f"line {node.lineno}: a raw read of a reply's ext")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr == "get" and node.args:
                keys = node.args[:1]
                if isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "ext":
                    found.append(f"line {node.lineno}: a raw read of a reply's ext")
            if node.func.attr in SENDS and any(isinstance(a, ast.Dict) for a in node.args):
                found.append(f"line {node.lineno}: an ext map built by hand for {node.func.attr}")
        found += [f"line {node.lineno}: wire key {k.value!r}" for k in keys
                  if isinstance(k, ast.Constant) and k.value in short and (name, k.value) not in ALLOWED]
    assert not found, found
