"""The checker's broker calls without processes: typed requests out, reply schemas in."""

import collections
import time
import types

import pytest

from quiver import MessageExt
from quiver.wire import record
from quiver.wire import requests as rq
from quiver.wire.codes import ResponseCode
from quiver.wire.property_string import format_properties
from quiver.errors import FieldError, QueryNotFoundError, RequestTimeoutError
from quiver_txn.checking import Checker, CheckerClient, _BrokerState
from quiver_txn.config import Config

HALF, OP = "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC"


class _Broker:
    """A client whose broker answers from `answers` (request class -> reply envelope or exception)."""

    def __init__(self, answers):
        self.answers, self.calls = answers, []
        self.client_id = "me"
        self.transport = self

    def call_broker(self, addr, req, timeout=None, ok=(ResponseCode.SUCCESS,)):
        assert isinstance(req, rq.Schema), "requests are typed (quiver.wire.requests), never (code, ext)"
        self.calls.append(req)
        answer = self.answers[type(req)]
        answer = answer(req) if callable(answer) else answer
        if isinstance(answer, Exception):
            raise answer
        return answer

    def call(self, addr, req, timeout=3.0):   # the transport, for STATUS
        return self.call_broker(addr, req, timeout)


def _env(code=ResponseCode.SUCCESS, bodies=(), **ext):
    return types.SimpleNamespace(code=code, remark="", ext=ext, bodies=list(bodies))


def _halves(n):
    host = b"\x7f\0\0\x01\0\0\0\0"
    old = int(time.time() * 1000) - 3_600_000
    return b"".join(record.encode(b"x", topic=HALF.encode(),
                                  props=format_properties({"__transactionId__": f"tx{off}"}).encode(),
                                  queue_offset=off, phys_offset=1000 + off, born_ts=old, born_host=host, store_ts=old,
                                  store_host=host)
                    for off in range(n))


def test_offsets_pull_and_commit_are_typed():
    broker = _Broker({rq.QueryConsumerOffset: QueryNotFoundError("none"), rq.GetMinOffset: _env(offset=3),
                      rq.GetMaxOffset: _env(offset=9), rq.UpdateConsumerOffset: _env(),
                      rq.PullMessage: _env(ResponseCode.PULL_OFFSET_MOVED, next=5)})
    ck = Checker(broker, Config(group="CG"), collections.Counter())
    assert ck._start_offset("a", HALF) == 3
    assert broker.calls == [rq.QueryConsumerOffset(group="CG", topic=HALF, queue_id=0),
                            rq.GetMinOffset(topic=HALF, queue_id=0)]
    assert ck._pull("a", HALF, 3, 0) == (None, 5)
    assert broker.calls[-1] == rq.PullMessage(group="CG", topic=HALF, queue_id=0, offset=3, max_msgs=1)
    ck._commit("a", OP, 7)
    assert broker.calls[-1] == rq.UpdateConsumerOffset(group="CG", topic=OP, queue_id=0, offset=7)
    broker.answers[rq.PullMessage] = _env(ResponseCode.PULL_NOT_FOUND, nxt=5)     # no "next": not trusted
    with pytest.raises(FieldError):
        ck._pull("a", HALF, 3, 10)


def test_round_sends_checks_and_reads_results():
    results = {"checked": 0}

    def check(req):
        assert [e[2] for e in req.entries] == [rq.CHECK_ASK] * len(req.entries)
        results["checked"] += len(req.entries)
        return _env(r=["checked", "resolved"][:len(req.entries)])
    broker = _Broker({rq.QueryConsumerOffset: _env(offset=0), rq.GetMaxOffset: _env(offset=2),
                      rq.UpdateConsumerOffset: _env(), rq.TransactionCheck: check,
                      rq.PullMessage: lambda req: _env(ResponseCode.SUCCESS, [_halves(2)], next=2, max=2)
                      if req.topic == HALF else _env(ResponseCode.PULL_NOT_FOUND, next=req.offset)})
    ck = Checker(broker, Config(transaction_timeout_ms=1000), collections.Counter())
    counts = ck.check_broker("b", "a")
    assert counts == {"checked": 1, "resolved": 1} and results["checked"] == 2
    check_req, = [c for c in broker.calls if isinstance(c, rq.TransactionCheck)]
    assert [e[:2] for e in check_req.entries] == [(1000, 0), (1001, 1)]
    assert "tx1" in ck.brokers["b"].resolved and "tx0" not in ck.brokers["b"].resolved
    assert ck.brokers["b"].half == 2


def test_garbled_check_reply_fails_the_broker_round():
    ck = Checker(_Broker({rq.TransactionCheck: _env(r=["checked", 7])}), Config(), collections.Counter())
    with pytest.raises(FieldError):
        ck._send_checks("a", _BrokerState(), [((1, 2, rq.CHECK_ASK), "t1"), ((3, 4, rq.CHECK_ASK), "t2")],
                        collections.Counter())


def test_peer_alive_reads_its_status_reply():
    ck = Checker(_Broker({rq.Status: _env(status={"client_id": "txn@h:1#1#2"})}), Config(), collections.Counter())
    assert ck._alive("txn@h:1#1#2") and not ck._alive("txn@h:1#9#9")   # the port answers as another instance
    assert ck._alive("someone-else")                                     # no address in the id: alive
    ck.client.answers[rq.Status] = _env(status="up")
    assert not ck._alive("txn@h:1#1#2")
    ck.client.answers[rq.Status] = RequestTimeoutError("silent")
    assert not ck._alive("txn@h:1#1#2")


def test_heartbeat_is_a_typed_consumer_of_the_half_topic():
    client = CheckerClient("127.0.0.1:1", "CG", 1.0, "h:1")
    hb = client._heartbeat()                              # what ClientBase sends (and leaves on close)
    assert hb == rq.HeartBeat.decode(hb.ext()) and hb.client_id == client.client_id
    (me,), = [hb.consumers]
    assert me.group == "CG" and hb.producers == []
    assert {t: (s.type, s.expression) for t, s in me.subscriptions.items()} == {HALF: ("TAG", "*")}


def test_decisions_are_the_request_schemas_actions():
    ck = Checker(types.SimpleNamespace(), Config(transaction_timeout_ms=1000, max_checks=3), collections.Counter())
    now = int(time.time() * 1000)
    st = _BrokerState()

    def msg(props):
        return MessageExt(HALF, b"x", None, [], props, "id", "", "", 0, 0, 0, now - 5000, now - 5000, 0)
    assert ck._decide(msg({"__transactionId__": "a"}), st, now) == rq.CHECK_ASK
    assert ck._decide(msg({"TRANSACTION_CHECK_TIMES": "3"}), st, now) == rq.CHECK_DISCARD
    assert ck._decide(msg({"CHECK_IMMUNITY_TIME_IN_SECONDS": "60"}), st, now) == rq.CHECK_REQUEUE
