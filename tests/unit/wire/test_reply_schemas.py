"""Servers build replies through their schemas (quiver.wire.replies), and what they send reads as before.

Three holds: every reply schema is tied to the request codes it answers
(`REPLIES`); `Request.reply` refuses any other ext for those codes, so a handler
that answers with a hand-written map fails its first test; no server code
writes a reply's ext as a map literal (a new reply gets a schema). The
schema-built replies decode, by the client's reader, as the maps servers sent
before did, byte for byte where peers read them as plain maps.
"""

import ast
import inspect
import pathlib

import pytest

from quiver.errors import SystemError_
from quiver.runtime.acl import Acl, Rule, User
from quiver.runtime.service import Service, reply_ext
from quiver.testing import FakeNetwork
from quiver.wire import protocol, replies
from quiver.wire import requests as rq
from quiver.wire.codes import RequestCode, ResponseCode
from quiver.wire.schema import SCHEMAS, Schema

ROOT = pathlib.Path(__file__).resolve().parents[3]
ADDR = "192.0.2.9:3"
PARTS = {"QueueData", "BrokerData", "RouteData", "LiveBroker", "ClusterData", "GroupConfig", "AclData",
         "ConsumeStatsRow"}   # nested in replies, never a reply of their own


def test_every_reply_schema_is_tied_to_a_request_code():
    defined = {name for name, cls in vars(replies).items()
               if inspect.isclass(cls) and issubclass(cls, Schema) and cls.__module__ == replies.__name__}
    tied = {cls.__name__ for forms in replies.REPLIES.values() for cls in forms if issubclass(cls, Schema)}
    assert defined - PARTS - tied == set(), "reply schemas no request code is tied to (reply_to)"
    assert PARTS <= defined and not PARTS & tied
    assert set(replies.REPLIES) <= set(SCHEMAS), "reply_to names a code that has no request schema"


@pytest.fixture
def toy():
    def offset(req):   # the shape of every handler: the reply schema of the code
        req.reply(ResponseCode.SUCCESS, "", rq.OffsetReply(offset=req.args.queue_id))

    def hand_written(req):
        req.reply(ResponseCode.SUCCESS, "", {"offset": 1})

    def wrong_schema(req):
        req.reply(ResponseCode.SUCCESS, "", rq.ConsumerListReply(ids=["c"]))

    def untied(req):   # a code with no reply schema answers without an ext
        req.reply(ResponseCode.SUCCESS, "", rq.OffsetReply(offset=1))

    net = FakeNetwork()
    net.serve(Service(ADDR, {RequestCode.GET_MAX_OFFSET: offset, RequestCode.GET_MIN_OFFSET: hand_written,
                             RequestCode.QUERY_CONSUMER_OFFSET: wrong_schema, RequestCode.UNLOCK_BATCH_MQ: untied},
                      "toy"))
    yield net
    net.close()


def test_a_reply_not_built_by_its_schema_is_refused(toy):
    assert toy.call(ADDR, rq.GetMaxOffset(topic="T", queue_id=3)).ext == {"offset": 3}
    with pytest.raises(SystemError_, match=r"GET_MIN_OFFSET is built by OffsetReply .*not sent as dict"):
        toy.call(ADDR, rq.GetMinOffset(topic="T", queue_id=0))
    with pytest.raises(SystemError_, match=r"QUERY_CONSUMER_OFFSET is built by OffsetReply .*ConsumerListReply"):
        toy.call(ADDR, rq.QueryConsumerOffset(group="g", topic="T", queue_id=0))
    with pytest.raises(SystemError_, match=r"UNLOCK_BATCH_MQ is built by a reply schema tied to it"):
        toy.call(ADDR, rq.UnlockBatchMq(group="g", client_id="c", queues=[("T", 0)]))
    env = toy.call(ADDR, rq.Ping())   # the service's own replies too
    assert rq.PingReply.decode(env.ext).service == "toy"


def test_a_sync_state_set_change_is_answered_with_the_assignment():
    # the master reads the controller's answer to its SyncStateSet change as a ControllerAssignment
    a = rq.ControllerAssignment(role="master", epoch=2, master_addr=ADDR, sync_state_set=[ADDR], term=3)
    assert rq.ControllerAssignment.decode(reply_ext(RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, a)) == a


def _reply_calls(tree):
    """(line, ext node) of every `x.reply(code, remark, ext, ...)`, `protocol.reply(code, id, remark, ext)`
    and `post(x.reply, code, remark, ext)` call."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func, args = node.func, None
        if isinstance(func, ast.Attribute) and func.attr == "reply":
            args = node.args[1:] if isinstance(func.value, ast.Name) and func.value.id == "protocol" else node.args
        elif node.args and isinstance(node.args[0], ast.Attribute) and node.args[0].attr == "reply":
            args = node.args[1:]
        if args is not None:
            ext = args[2] if len(args) > 2 else next((k.value for k in node.keywords if k.arg == "ext"), None)
            yield node.lineno, ext


def test_no_server_writes_a_reply_as_a_map_literal():
    files = [p for d in ("services", "sdk/quiver/runtime") for p in (ROOT / d).rglob("*.py") if "tests" not in p.parts]
    found, literal = 0, []
    for path in files:
        for line, ext in _reply_calls(ast.parse(path.read_text(), str(path))):
            found += 1
            if isinstance(ext, ast.Dict) and ext.keys:
                literal.append(f"{path.relative_to(ROOT)}:{line}")
    assert found > 50   # the scan sees the handlers
    assert literal == [], "replies written as maps: build them with their schema (quiver.wire.replies)"


def test_hot_path_wire_maps_equal_their_schemas():
    for topic, qid, off, phys in [("T", 0, 0, [0]), ("%RETRY%g", 1023, 2 ** 63 - 1, list(range(100)))]:
        fast = rq.SendReply.wire(topic, qid, off, phys)
        assert fast == rq.SendReply(topic=topic, queue_id=qid, queue_offset=off, phys_offsets=phys).ext()
        assert fast == {"t": topic, "q": qid, "o": off, "p": phys}   # what the broker sent before
        assert reply_ext(RequestCode.SEND_BATCH_MESSAGE, fast) is fast
    for nxt, lo, hi in [(0, 0, 0), (5, 2, 9)]:
        fast = rq.PullReply.wire(nxt, lo, hi)
        assert fast == rq.PullReply(next=nxt, min=lo, max=hi).ext() == {"next": nxt, "min": lo, "max": hi}
    with pytest.raises(TypeError):   # a Wire map answers only the codes of its schema
        reply_ext(RequestCode.PULL_MESSAGE, rq.SendReply.wire("T", 0, 0, [0]))


def _same(schema, built: Schema, before: dict, raw: bool = False) -> None:
    """The built reply decodes as the map sent before; `raw`: a peer reads it as a plain map, so the
    bytes are the same too."""
    sent = protocol.decode(protocol.reply(0, 1, "", built.ext())).ext
    assert schema.decode(sent) == schema.decode(before)
    if raw:
        assert sent == before


def test_replies_decode_as_the_maps_sent_before(tmp_path):
    from quiver_namesrv.route_table import RouteTable
    table = RouteTable(clock=lambda: 10.0)
    reg = rq.RegisterBroker.decode({"cluster": "C", "broker_name": "b", "broker_addr": "h:1", "filter_servers": ["f:1"],
                                    "topics": {"T": {"read": 2, "write": 2, "order": True}}})
    _same(rq.RegisterBrokerReply, table.register(reg), {"master_addr": "h:1", "ha_addr": ""}, raw=True)
    queue = {"broker_name": "b", "read": 2, "write": 2, "perm": 6, "sysflag": 0, "order": True}
    broker = {"cluster": "C", "broker_name": "b", "addrs": {"0": "h:1"}}
    _same(rq.RouteReply, rq.RouteReply(route=table.route("T")),
          {"route": {"topic": "T", "queues": [queue], "brokers": [broker], "filter_servers": {"h:1": ["f:1"]},
                     "cluster_filter_servers": ["f:1"]}}, raw=True)
    _same(rq.ClusterReply, rq.ClusterReply(cluster=table.cluster_info()),
          {"cluster": {"brokers": {"b": broker}, "clusters": {"C": ["b"]},
                       "live": {"h:1": {"broker_name": "b", "broker_id": 0, "age_ms": 0, "filter_servers": ["f:1"]}}}},
          raw=True)
    acl = Acl([User("u", "k" * 40, "NORMAL")], [Rule("u", "topic:T", frozenset({"PUB"}), False, "")], "v1")
    snap = acl.snapshot()
    _same(rq.AclSnapshotReply, rq.AclSnapshotReply(**snap), snap, raw=True)
    assert Acl.from_snapshot(rq.AclSnapshotReply(**snap).ext()).snapshot() == snap
    row = {"topic": "T", "queue_id": 1, "broker_offset": 9, "consumer_offset": None, "lag": 9,
           "last_consume_time": None, "client_id": "c1"}
    _same(rq.ConsumeStatsReply, rq.ConsumeStatsReply(rows=[rq.ConsumeStatsRow(**row)], clients=["c1"], conflicts={}),
          {"rows": [row], "clients": ["c1"], "conflicts": {}})
    _same(rq.ControllerAssignment, rq.ControllerAssignment(role="slave", epoch=3, master_addr="h:1", master_ha_addr="h:2",
                                                           broker_id=2, sync_state_set=["h:1"], lease_ms=900, term=4),
          {"role": "slave", "ep": 3, "master": "h:1", "master_ha": "h:2", "id": 2, "sss": ["h:1"], "lease_ms": 900,
           "term": 4})
    conf = {"read": 4, "write": 4, "perm": 6, "sysflag": 0, "order": False}
    _same(rq.TopicConfigReply, rq.TopicConfigReply(topic="T", config=rq.TopicConfig(**conf)), {"topic": "T", "config": conf})
    _same(rq.TopicConfigsReply, rq.TopicConfigsReply(topics={"T": conf}), {"topics": {"T": conf}}, raw=True)
    group = {"retry_max_times": 16, "consume_enable": True}
    _same(rq.GroupConfigReply, rq.GroupConfigReply(group="g", config=rq.GroupConfig(**group)),
          {"group": "g", "config": group})
    _same(rq.HaSyncMetadataReply, rq.HaSyncMetadataReply(topics={"T": rq.TopicConfig(**conf)},
                                                         groups={"g": rq.GroupConfig(**group)},
                                                         offsets=[("g", "T", 0, 5)], max_offset=7,
                                                         acl=rq.AclData(**snap)),
          {"topics": {"T": conf}, "groups": {"g": group}, "offsets": [["g", "T", 0, 5]], "max_offset": 7, "acl": snap})
    _same(rq.LockBatchReply, rq.LockBatchReply(locked=[("T", 0)]), {"locked": [["T", 0]]}, raw=True)
    _same(rq.ScheduleReputReply, rq.ScheduleReputReply(count=2, dropped=[1], store_ts=5), {"n": 2, "dropped": [1], "ts": 5},
          raw=True)
    _same(rq.TransactionCheckReply, rq.TransactionCheckReply(results=["ok"]), {"r": ["ok"]}, raw=True)
