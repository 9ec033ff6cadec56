"""The PullConsumer RPCs (PullMessage, UpdateOffset, GetOffset, QueryOffset) and ForwardMessageToDeadLetterQueue
across proxies, called through a raw gRPC stub: no Python 5.x client calls them (Java's PullConsumer does).

One cluster (name server, broker, filter server, two proxies) serves the module; each test
uses its own topics and groups. Messages are sent with Quiver's SDK, so their queue offsets
are known (one-queue topics).
"""

import time

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2 as d
from rocketmq.grpc_protocol import service_pb2 as s
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub

from quiver import Admin
from quiver import Message as QMessage
from quiver import Producer as QProducer
from quiver.tools.local import LocalCluster
from support.waiting import wait_for

pytestmark = pytest.mark.slow

MD = (("x-mq-client-id", "pull-test"),)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    c = LocalCluster(str(tmp_path_factory.mktemp("proxy-pull")))
    try:
        c.add_core()
        c.add_service("filter", "quiver_filter", "--register-interval-ms", "1000", data=False)
        flags = ("--pop-consume-from", "first", "--request-timeout-ms", "1000", "--max-long-polling-ms", "5000")
        proxies = [c.add_proxy(*flags), c.add_proxy(*flags)]
        c.wait()
        admin = Admin(namesrv=c.namesrv)
        admin.start()
        channels = [grpc.insecure_channel(p.url) for p in proxies]
        yield c, admin, [MessagingServiceStub(ch) for ch in channels]
        for ch in channels:
            ch.close()
        admin.shutdown()
    finally:
        c.stop()


def _send(c, topic, *specs):
    """Send (body, tag, properties) messages in order; their offsets are 0, 1, ... of queue 0."""
    with QProducer("pull-test", namesrv=c.namesrv) as p:
        for body, tag, props in specs:
            p.send(QMessage(topic, body, tags=tag, properties=props or {}))


def _queue(msg, topic, broker="broker-a", qid=0):
    msg.topic.name, msg.broker.name, msg.id = topic, broker, qid


def _pull(stub, topic, offset, group="pl-cg", batch=32, tag=None, sql=None, poll_s=0, **queue):
    """(status, messages, next_offset or None) of one PullMessage."""
    req = s.PullMessageRequest(offset=offset, batch_size=batch)
    req.group.name = group
    _queue(req.message_queue, topic, **queue)
    if tag is not None or sql is not None:
        req.filter_expression.type = d.FilterType.SQL if sql else d.FilterType.TAG
        req.filter_expression.expression = sql or tag
    if poll_s:
        req.long_polling_timeout.FromSeconds(poll_s)
    answer, msgs, nxt = None, [], None
    for r in stub.PullMessage(req, metadata=MD, timeout=15):
        kind = r.WhichOneof("content")
        if kind == "status":
            answer = r.status
        elif kind == "message":
            msgs.append(r.message)
        else:
            nxt = r.next_offset
    return answer, msgs, nxt


def test_pull_streams_a_queue_from_an_offset_then_the_next_offset(env):
    c, admin, (stub, _) = env
    admin.create_topic("PlPull", queues=1)
    _send(c, "PlPull", *[(b"m-%d" % i, "A" if i % 2 == 0 else "B", {"i": str(i)}) for i in range(10)])
    st, msgs, nxt = _pull(stub, "PlPull", 0, batch=4)
    assert st.code == d.Code.OK and nxt == 4
    assert [m.body for m in msgs] == [b"m-0", b"m-1", b"m-2", b"m-3"]
    assert [m.system_properties.queue_offset for m in msgs] == [0, 1, 2, 3]
    first = msgs[0]
    assert first.system_properties.tag == "A" and first.user_properties["i"] == "0"
    assert not first.system_properties.HasField("receipt_handle")                   # a pull is not a delivery
    st, msgs, nxt = _pull(stub, "PlPull", 3, tag="A")
    assert st.code == d.Code.OK and nxt == 10
    assert [m.body for m in msgs] == [b"m-4", b"m-6", b"m-8"]                       # the other tag left out
    st, msgs, nxt = _pull(stub, "PlPull", 99)
    assert (st.code, msgs, nxt) == (d.Code.ILLEGAL_OFFSET, [], 10)                  # where to pull instead
    t0 = time.monotonic()
    st, msgs, nxt = _pull(stub, "PlPull", 10, poll_s=1)
    assert (st.code, nxt) == (d.Code.MESSAGE_NOT_FOUND, 10) and time.monotonic() - t0 >= 0.9   # it waited
    _send(c, "PlPull", (b"late", None, None))
    st, msgs, nxt = _pull(stub, "PlPull", 10)
    assert st.code == d.Code.OK and [m.body for m in msgs] == [b"late"] and nxt == 11


def test_long_poll_answers_as_soon_as_a_message_arrives(env):
    import threading
    c, admin, (stub, _) = env
    admin.create_topic("PlWait", queues=1)
    out = {}

    def pull():
        t0 = time.monotonic()
        out["got"] = _pull(stub, "PlWait", 0, poll_s=4)
        out["s"] = time.monotonic() - t0
    t = threading.Thread(target=pull)
    t.start()
    time.sleep(0.5)
    _send(c, "PlWait", (b"wake", None, None))
    t.join(10)
    st, msgs, nxt = out["got"]
    assert st.code == d.Code.OK and [m.body for m in msgs] == [b"wake"] and nxt == 1
    assert out["s"] < 3.5, f"the held pull answered after {out['s']:.1f} s, not when the message came"


def test_offsets_commit_read_back_and_seen_by_quiver(env):
    c, admin, (stub, other) = env
    admin.create_topic("PlOff", queues=1)
    _send(c, "PlOff", *[(b"a-%d" % i, None, None) for i in range(5)])
    time.sleep(0.05)
    _send(c, "PlOff", *[(b"b-%d" % i, None, None) for i in range(5)])
    stored = [m.system_properties.store_timestamp.ToMilliseconds() for m in _pull(stub, "PlOff", 0)[1]]
    assert stored[4] < stored[5]

    get = s.GetOffsetRequest()
    get.group.name = "pl-off-cg"
    _queue(get.message_queue, "PlOff")
    reply = stub.GetOffset(get, metadata=MD, timeout=10)
    assert reply.status.code == d.Code.OFFSET_NOT_FOUND                 # the Java client then asks for END
    upd = s.UpdateOffsetRequest(offset=7)
    upd.group.name = "pl-off-cg"
    _queue(upd.message_queue, "PlOff")
    assert stub.UpdateOffset(upd, metadata=MD, timeout=10).status.code == d.Code.OK
    reply = other.GetOffset(get, metadata=MD, timeout=10)                # the brokers hold it, not a proxy
    assert (reply.status.code, reply.offset) == (d.Code.OK, 7)
    rows = admin.consumer_progress("pl-off-cg", ["PlOff"])
    assert [(r["queue_id"], r["consumer_offset"]) for r in rows] == [(0, 7)]   # what `quiver consumer progress` shows

    def query(policy, ts_ms=None):
        q = s.QueryOffsetRequest(query_offset_policy=policy)
        _queue(q.message_queue, "PlOff")
        if ts_ms is not None:
            q.timestamp.FromMilliseconds(ts_ms)
        r = stub.QueryOffset(q, metadata=MD, timeout=10)
        return r.status.code, r.offset
    assert query(d.QueryOffsetPolicy.BEGINNING) == (d.Code.OK, 0)
    assert query(d.QueryOffsetPolicy.END) == (d.Code.OK, 10)
    assert query(d.QueryOffsetPolicy.TIMESTAMP, stored[5]) == (d.Code.OK, 5)      # the first stored at or after
    assert query(d.QueryOffsetPolicy.TIMESTAMP)[0] == d.Code.BAD_REQUEST   # TIMESTAMP names no time
    assert query(7)[0] == d.Code.BAD_REQUEST                               # no such policy


def test_sql92_pull_goes_through_the_filter_server(env):
    c, admin, (stub, _) = env
    admin.create_topic("PlSql", queues=1)
    wait_for(lambda: any(admin.topic_route("PlSql").get("filter_servers", {}).values()), 20,
             "the filter server in the route")
    _send(c, "PlSql", *[(b"r-%d" % i, None, {"region": "eu" if i % 3 == 0 else "us", "qty": str(i)})
                        for i in range(9)])
    st, msgs, nxt = _pull(stub, "PlSql", 0, sql="region = 'eu' AND qty > 0")
    assert st.code == d.Code.OK and [m.body for m in msgs] == [b"r-3", b"r-6"] and nxt == 9
    st, _, _ = _pull(stub, "PlSql", 0, sql="region = ")
    assert st.code == d.Code.ILLEGAL_FILTER_EXPRESSION


def test_bad_pull_and_offset_input_gets_the_code_the_clients_expect(env):
    c, admin, (stub, _) = env
    admin.create_topic("PlDoor", queues=2)
    C = d.Code
    assert _pull(stub, "PlDoor", -1)[0].code == C.ILLEGAL_OFFSET
    assert _pull(stub, "PlDoor", 0, group="bad group!")[0].code == C.ILLEGAL_CONSUMER_GROUP
    assert _pull(stub, "bad topic!", 0)[0].code == C.ILLEGAL_TOPIC
    assert _pull(stub, "PlNoSuchTopic", 0)[0].code == C.TOPIC_NOT_FOUND
    assert _pull(stub, "PlDoor", 0, broker="broker-zz")[0].code == C.BAD_REQUEST
    assert _pull(stub, "PlDoor", 0, qid=2)[0].code == C.BAD_REQUEST                 # it has queues 0 and 1
    assert _pull(stub, "PlDoor", 0, batch=0)[0].code == C.BAD_REQUEST
    assert _pull(stub, "PlDoor", 0, poll_s=6)[0].code == C.ILLEGAL_POLLING_TIME     # over --max-long-polling-ms
    assert _pull(stub, "PlDoor", 0, tag="a\x00b")[0].code == C.ILLEGAL_FILTER_EXPRESSION
    st, msgs, nxt = _pull(stub, "PlDoor", 0, qid=1)
    assert (st.code, msgs, nxt) == (C.MESSAGE_NOT_FOUND, [], 0)                     # an empty queue
    upd = s.UpdateOffsetRequest(offset=-5)
    upd.group.name = "pl-door-cg"
    _queue(upd.message_queue, "PlDoor")
    assert stub.UpdateOffset(upd, metadata=MD, timeout=10).status.code == C.ILLEGAL_OFFSET
    upd.offset, upd.group.name = 1, ""
    assert stub.UpdateOffset(upd, metadata=MD, timeout=10).status.code == C.ILLEGAL_CONSUMER_GROUP
    get = s.GetOffsetRequest()
    get.group.name = "pl-door-cg"
    _queue(get.message_queue, "PlDoor", broker="broker-zz")
    assert stub.GetOffset(get, metadata=MD, timeout=10).status.code == C.BAD_REQUEST


def _receive(stub, topic, group, poll_s):
    req = s.ReceiveMessageRequest(batch_size=1)
    req.group.name = group
    _queue(req.message_queue, topic, qid=-1)
    req.invisible_duration.FromSeconds(30)
    req.long_polling_timeout.FromSeconds(poll_s)
    return [r.message for r in stub.ReceiveMessage(req, metadata=MD, timeout=poll_s + 10) if r.HasField("message")]


def test_forward_to_the_dlq_through_another_proxy(env):
    c, admin, (first, second) = env
    admin.create_topic("PlDlq", queues=1)
    _send(c, "PlDlq", (b"poison", None, None))
    msgs = wait_for(lambda: _receive(first, "PlDlq", "pl-dlq-cg", 2), 15, "the delivery")
    fwd = s.ForwardMessageToDeadLetterQueueRequest(receipt_handle=msgs[0].system_properties.receipt_handle,
                                                   message_id=msgs[0].system_properties.message_id,
                                                   delivery_attempt=1, max_delivery_attempts=16)
    fwd.group.name, fwd.topic.name = "pl-dlq-cg", "PlDlq"
    reply = second.ForwardMessageToDeadLetterQueue(fwd, metadata=MD, timeout=10)   # a proxy that never saw it
    assert reply.status.code == d.Code.OK, reply.status
    again = first.ForwardMessageToDeadLetterQueue(fwd, metadata=MD, timeout=10).status.code
    assert again == d.Code.INVALID_RECEIPT_HANDLE                                   # that delivery is over
    dlq = wait_for(lambda: admin.dlq_messages("pl-dlq-cg"), 60, "the DLQ copy")
    assert [m.body for m in dlq] == [b"poison"]
    # the forward held the delivery 3 s (2 x --request-timeout-ms + 1 s): acked, it does not come back after
    assert not _receive(first, "PlDlq", "pl-dlq-cg", 4)
    assert len(admin.dlq_messages("pl-dlq-cg")) == 1


def test_a_pull_consumer_is_greeted_like_the_java_client_expects(env):
    c, admin, (stub, _) = env
    hb = s.HeartbeatRequest(client_type=d.ClientType.PULL_CONSUMER)
    hb.group.name = "pl-java-cg"
    assert stub.Heartbeat(hb, metadata=MD, timeout=10).status.code == d.Code.OK
    settings = d.Settings(client_type=d.ClientType.PULL_CONSUMER)   # what PullSubscriptionSettings sends
    settings.subscription.group.name = "pl-java-cg"
    settings.request_timeout.FromSeconds(3)
    replies = stub.Telemetry(iter([s.TelemetryCommand(settings=settings)]), metadata=MD, timeout=10)
    first = next(replies)
    replies.cancel()
    assert first.status.code == d.Code.OK and first.settings.WhichOneof("pub_sub") == "subscription"
    assert first.settings.subscription.long_polling_timeout.ToMilliseconds() > 0   # what its pulls then ask for
