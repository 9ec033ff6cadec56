"""The one pull engine (quiver.client.queue_puller): requests, answers, and a consumer's targets and failover."""

import time
import types

import pytest

from quiver.client.access import broker_access
from quiver.client import queue_puller
from quiver.wire import record
from quiver.wire import requests as rq
from quiver.client.base import ClientBase, MessageQueue, Route
from quiver.wire.codes import ResponseCode
from quiver.errors import ClientError, FieldError, RequestTimeoutError, SystemBusyError, TopicNotExistError
from quiver.client.message import MessageSelector, PullStatus
from quiver.client.options import ConsumerOptions
from quiver.wire.protocol import Envelope
from quiver.wire.property_string import format_properties
from quiver.client.queue_puller import QueuePuller, read, request

MASTER, SLAVE, BROKER_B = "127.0.0.1:10911", "127.0.0.1:10921", "127.0.0.1:10912"
FILTERS = ["127.0.0.1:10941", "127.0.0.1:10942"]
MQ = MessageQueue("T", "a", 0)
HOST = b"\x7f\0\0\x01\0\0\0\0"


def _records(*tag_list, first=0):
    return b"".join(record.encode(f"m{i}".encode(), topic=b"T",
                                  props=format_properties({"TAGS": t, "UNIQ_KEY": f"U{i}"}).encode(),
                                  queue_offset=first + i, phys_offset=100 + i, born_ts=1, born_host=HOST, store_ts=2,
                                  store_host=HOST)
                    for i, t in enumerate(tag_list))


def _reply(code=ResponseCode.SUCCESS, bodies=(), remark="", **pos):
    return Envelope(code, 1, rq.PullReply(**{"next": 0, **pos}).ext(), list(bodies), remark)


# ---- request -------------------------------------------------------------------------------------


def test_request_shapes():
    assert request("T", 1, 5) == rq.PullMessage(topic="T", queue_id=1, offset=5)
    assert request("T", 1, 5, selector="A || B", group="G", max_msgs=8, suspend_ms=100, commit_offset=3) == \
        rq.PullMessage(topic="T", queue_id=1, offset=5, group="G", max_msgs=8, suspend_ms=100, commit_offset=3,
                       expression="A || B")
    assert request("T", 0, 0, selector=MessageSelector.tags("")).expression == "*"
    sql = request("T", 0, 0, selector=MessageSelector.sql("a > 1"), broker_addr=MASTER, max_bytes=1024)
    assert (sql.expression, sql.expression_type, sql.broker_addr, sql.max_bytes) == ("a > 1", "SQL92", MASTER, 1024)
    assert rq.PullMessage.decode(sql.ext()) == sql


# ---- answers -------------------------------------------------------------------------------------


@pytest.mark.parametrize("code, bodies, status", [
    (ResponseCode.SUCCESS, [b"x"], PullStatus.FOUND),
    (ResponseCode.SUCCESS, [], PullStatus.NO_MATCHED_MSG),         # nothing to hand over; the position moves
    (ResponseCode.PULL_NOT_FOUND, [], PullStatus.NO_NEW_MSG),
    (ResponseCode.PULL_RETRY_IMMEDIATELY, [], PullStatus.NO_MATCHED_MSG),
    (ResponseCode.PULL_OFFSET_MOVED, [], PullStatus.OFFSET_ILLEGAL)])
def test_read_statuses(code, bodies, status):
    pulled = read(_reply(code, bodies, next=7, min=2, max=9))
    assert (pulled.status, pulled.next, pulled.min, pulled.max) == (status, 7, 2, 9)
    assert (pulled.body is not None) == (status is PullStatus.FOUND)


def test_read_raises_what_went_wrong():
    with pytest.raises(SystemBusyError, match="busy"):
        read(Envelope(ResponseCode.SYSTEM_BUSY, 1, {}, [], "busy"))
    with pytest.raises(TopicNotExistError):
        read(Envelope(ResponseCode.TOPIC_NOT_EXIST, 1, {}, [], ""))
    with pytest.raises(FieldError):       # no "next": read as 0 it would rewind a consumer
        read(Envelope(ResponseCode.PULL_NOT_FOUND, 1, {"nxt": 5}, [], ""))
    lost = RequestTimeoutError("late")
    with pytest.raises(RequestTimeoutError):
        read(lost)
    # duck-typed envelopes (the services' fakes) read the same
    assert read(types.SimpleNamespace(code=ResponseCode.PULL_NOT_FOUND, remark="", ext={"next": 3}, bodies=[])).next == 3


def test_messages_and_records_keep_the_subscribed_tags():
    pulled = read(_reply(bodies=[_records("A", "B", "C")], next=3))
    assert [m.body for m in pulled.messages("a")] == [b"m0", b"m1", b"m2"]
    assert [m.tags for m in pulled.messages("a", MessageSelector.tags("A || C"))] == ["A", "C"]
    assert [m.broker for m in pulled.messages("a", "*")] == ["a"] * 3
    assert [m.body for m in pulled.messages("a", MessageSelector.sql("x > 1"))] == [b"m0", b"m1", b"m2"]
    assert [r.queue_offset for r in pulled.records("B")] == [1]
    assert read(_reply(ResponseCode.PULL_NOT_FOUND)).messages("a") == []


def test_fetch_is_a_blocking_pull_through_the_client():
    calls = []

    class Client:
        def call_broker(self, addr, req, timeout=None, ok=()):
            calls.append((addr, req, timeout, ok))
            return _reply(ResponseCode.PULL_OFFSET_MOVED, next=4)
    pulled = queue_puller.fetch(Client(), MASTER, request("T", 0, 9), timeout=2.0)
    assert pulled.status is PullStatus.OFFSET_ILLEGAL and pulled.next == 4
    assert calls == [(MASTER, request("T", 0, 9), 2.0, queue_puller.ANSWERS)]


# ---- a consumer's pulls ------------------------------------------------------------------------------


class _Transport:
    def __init__(self, fail=None):
        self.sent, self.callbacks, self.fail = [], [], fail

    def send(self, addr, req, ext, bodies, callback, timeout=3.0):
        if self.fail:
            raise self.fail
        self.sent.append((addr, req, timeout))
        self.callbacks.append(callback)


class _Client(ClientBase):
    def __init__(self, route=None):
        super().__init__("127.0.0.1:1")
        self._transport = _Transport()
        self.refreshed = []
        if route is not None:
            self._routes["T"] = (time.monotonic(), route)

    def _route(self, topic, refresh=False):
        self.refreshed.append(topic)
        return self._routes[topic][1]


def _route(slave=False, filters=()):
    addrs = {"0": MASTER, **({"1": SLAVE} if slave else {})}
    return Route("T", {"brokers": [{"broker_name": "a", "addrs": addrs}],
                       "queues": [{"broker_name": "a", "read": 1, "write": 1, "perm": 6}],
                       "filter_servers": {MASTER: list(filters)} if filters else {}})


def _puller(client, **opts):
    later = []
    p = QueuePuller(broker_access(client), "G", ConsumerOptions(**opts), lambda d, fn, *a: later.append((d, fn, a)))
    return p, later


def _queue():
    return types.SimpleNamespace(mq=MQ, addr=MASTER)


def _pull(p, q, selector=None, **kw):
    got = []
    p.pull(q, 5, selector, lambda pulled, retry_s: got.append((pulled, retry_s)), **kw)
    return got


def test_a_tag_pull_goes_to_the_broker_and_answers_once():
    c = _Client(_route())
    p, _ = _puller(c, pull_batch_size=16, suspend_ms=1000)
    got = _pull(p, _queue(), MessageSelector.tags("A"), commit_offset=3)
    (addr, req, timeout), = c._transport.sent
    assert addr == MASTER and timeout == 1 + queue_puller.REPLY_GRACE_S
    assert req == rq.PullMessage(topic="T", queue_id=0, offset=5, group="G", max_msgs=16, suspend_ms=1000,
                                 expression="A", commit_offset=3)
    c._transport.callbacks[0](_reply(bodies=[_records("A")], next=6))
    (pulled, retry_s), = got
    assert pulled.status is PullStatus.FOUND and pulled.next == 6 and retry_s == 0


def test_an_unreachable_master_sends_the_next_pull_to_its_slave_and_back():
    c = _Client(_route(slave=True))
    p, _ = _puller(c)
    q = _queue()
    got = _pull(p, q)
    c._transport.callbacks[0](ClientError("connection lost"))
    assert got == [(None, queue_puller.READ_FAILED_RETRY_S)]
    _pull(p, q)
    assert c._transport.sent[-1][0] == SLAVE and q.addr == SLAVE    # reads (and commits) follow
    c._read_down.clear()                                            # the master is back
    _pull(p, q)
    assert c._transport.sent[-1][0] == MASTER and q.addr == MASTER


def test_a_refused_pull_waits_the_error_delay():
    c = _Client(_route())
    p, _ = _puller(c, pull_delay_on_error_ms=2500)
    got = _pull(p, _queue())
    c._transport.callbacks[0](Envelope(ResponseCode.SYSTEM_BUSY, 1, {}, [], "busy"))
    assert got == [(None, 2.5)]
    got = _pull(p, _queue())
    c._transport.callbacks[1](Envelope(ResponseCode.PULL_NOT_FOUND, 1, {}, [], ""))   # garbled
    assert got == [(None, 2.5)]


def test_a_sql_pull_goes_through_a_filter_server_and_fails_over():
    c = _Client(_route(filters=FILTERS))
    p, _ = _puller(c)
    sel = MessageSelector.sql("a > 1")
    got = _pull(p, _queue(), sel)
    first, req, _ = c._transport.sent[0]
    assert first in FILTERS and req.expression_type == "SQL92" and req.broker_addr == MASTER
    c._transport.callbacks[0](RequestTimeoutError("gone"))
    assert got == [(None, 0.0)]                                      # at once, elsewhere
    _pull(p, _queue(), sel)
    assert c._transport.sent[1][0] == next(a for a in FILTERS if a != first)


def test_a_sql_pull_without_a_filter_server_refreshes_the_route_and_waits():
    c = _Client(_route())
    p, later = _puller(c)
    q = _queue()
    assert _pull(p, q, MessageSelector.sql("a > 1")) == [(None, queue_puller.NO_FILTER_RETRY_S)]
    _pull(p, q, MessageSelector.sql("a > 1"))
    assert c._transport.sent == [] and len(later) == 1               # one refresh per topic at a time
    delay, fn, args = later[0]
    fn(*args)
    assert c.refreshed == ["T"]
    _pull(p, q, MessageSelector.sql("a > 1"))
    assert len(later) == 2


def test_a_shut_down_transport_is_a_failed_pull():
    c = _Client(_route())
    c._transport.fail = ClientError("transport is shut down")
    p, _ = _puller(c)
    assert _pull(p, _queue()) == [(None, 1.0)]
