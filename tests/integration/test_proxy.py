"""RocketMQ 5 clients (rocketmq-python-client from PyPI) against Quiver through the gRPC proxy.

One cluster (name server, broker, scheduler, txn-checker, proxy) serves the whole module;
each test uses its own topics and groups.
"""

import threading
import time

import pytest
from rocketmq import ConsumeResult, FilterExpression, Message, PushConsumer, TransactionChecker
from rocketmq.grpc_protocol import TransactionResolution
from rocketmq.v5.consumer.push import MessageListener

from quiver import Message as QMessage
from quiver import Producer as QProducer
from quiver import SimpleConsumer as QSimpleConsumer
from support.proxy import config, producer, proxy_cluster, receive_until, simple_consumer
from support.waiting import wait_for

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    c, proxy, admin = proxy_cluster(str(tmp_path_factory.mktemp("proxy")))
    yield c, proxy, admin
    admin.shutdown()
    c.stop()


def _msg(topic, body, tag=None, keys=None, props=None, group=None, deliver_at_s=None):
    m = Message()
    m.topic, m.body = topic, body
    if tag:
        m.tag = tag
    if keys:
        m.keys = keys
    for k, v in (props or {}).items():
        m.add_property(k, v)
    if group:
        m.message_group = group
    if deliver_at_s:
        m.delivery_timestamp = deliver_at_s
    return m


def test_send_receive_ack_change_invisible_and_redelivery(env):
    c, proxy, admin = env
    admin.create_topic("PxBasic", queues=2)
    with producer(proxy, "PxBasic") as p:
        sent = p.send(_msg("PxBasic", b"tagged", tag="TagA", keys="k1", props={"color": "blue"}))
        p.send(_msg("PxBasic", b"plain"))
    with simple_consumer(proxy, "px-basic", "PxBasic") as sc:
        got = receive_until(sc, 2, 20, invisible_s=2, ack=False)
        assert sorted(m.body for m in got) == [b"plain", b"tagged"]
        tagged = next(m for m in got if m.body == b"tagged")
        assert tagged.tag == "TagA" and tagged.keys == {"k1"} and tagged.properties == {"color": "blue"}
        assert tagged.message_id == sent.message_id and tagged.delivery_attempt == 1
        sc.ack(tagged)
        plain = next(m for m in got if m.body == b"plain")
        sc.change_invisible_duration(plain, 3)       # more time: not back after the first 2 s
        assert not sc.receive(4, 2)
        again = wait_for(lambda: sc.receive(4, 30), 20, "the unacked message again")
        assert [m.body for m in again] == [b"plain"] and again[0].delivery_attempt == 2
        sc.ack(again[0])
        assert not sc.receive(4, 30)                  # the acked one never comes back


def test_tag_filter_and_eight_consumers_share_two_queues_each_message_once(env):
    c, proxy, admin = env
    admin.create_topic("PxShare", queues=2)
    bodies = [b"s-%d" % i for i in range(80)]
    with producer(proxy, "PxShare") as p:
        for b in bodies:
            p.send(_msg("PxShare", b, tag="Keep"))
        p.send(_msg("PxShare", b"dropped", tag="Other"))
    got, per, lock = [], [0] * 8, threading.Lock()

    def run(i):
        with simple_consumer(proxy, "px-share", "PxShare", tag="Keep") as sc:
            deadline = time.monotonic() + 40
            while time.monotonic() < deadline:
                with lock:
                    if len(got) >= len(bodies):
                        return
                for m in sc.receive(1, 30):
                    time.sleep(0.05)                  # some work: the others get their turn
                    sc.ack(m)
                    with lock:
                        got.append(m.body)
                        per[i] += 1
    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(got) == sorted(bodies)              # each exactly once, the other tag filtered out
    assert all(per), f"every consumer received: {per}"


def test_fifo_order_per_message_group_and_type_mismatch(env):
    c, proxy, admin = env
    admin.create_topic("PxFifo", queues=2, order=True)
    groups = ["g-a", "g-b", "g-c"]
    with producer(proxy, "PxFifo") as p:
        for i in range(10):
            for g in groups:
                p.send(_msg("PxFifo", f"{g}:{i}".encode(), group=g))
        with pytest.raises(Exception, match="not match"):
            p.send(_msg("PxFifo", b"no group"))       # a NORMAL message on a FIFO topic
    with simple_consumer(proxy, "px-fifo", "PxFifo") as sc:
        got = receive_until(sc, 30, 40)
    seen = {g: [int(m.body.split(b":")[1]) for m in got if m.body.startswith(g.encode())] for g in groups}
    assert seen == {g: list(range(10)) for g in groups}
    assert all(m.message_group in groups for m in got)


def test_delayed_message_arrives_late_and_recalled_one_never(env):
    c, proxy, admin = env
    admin.create_topic("PxDelay", queues=1)
    with producer(proxy, "PxDelay") as p:
        due = int(time.time()) + 3
        p.send(_msg("PxDelay", b"late", deliver_at_s=due))
        recalled = p.send(_msg("PxDelay", b"recalled", deliver_at_s=due))
        assert recalled.recall_handle
        assert p.recall_message("PxDelay", recalled.recall_handle) == recalled.message_id
    with simple_consumer(proxy, "px-delay", "PxDelay") as sc:
        assert not sc.receive(4, 10)                  # not before its time
        got = receive_until(sc, 1, 20)
        assert [m.body for m in got] == [b"late"] and time.time() >= due - 0.5
        time.sleep(1.5)
        assert not sc.receive(4, 10)                  # the recalled one never arrives


class _Checker(TransactionChecker):
    def __init__(self):
        self.asked = []

    def check(self, message):
        self.asked.append(message.body)
        return TransactionResolution.COMMIT if message.body == b"checked" else TransactionResolution.ROLLBACK


def test_transactions_commit_rollback_and_check_answered_by_the_client(env):
    c, proxy, admin = env
    admin.create_topic("PxTx", queues=2)
    checker = _Checker()
    with producer(proxy, "PxTx", checker=checker) as p:
        for body, end in ((b"committed", "commit"), (b"rolled back", "rollback"), (b"checked", None)):
            tx = p.begin_transaction()
            p.send(_msg("PxTx", body), tx)
            if end:
                getattr(tx, end)()
        with simple_consumer(proxy, "px-tx", "PxTx") as sc:
            got = receive_until(sc, 2, 30)            # the check needs the txn-checker's round
            time.sleep(1)
            got += sc.receive(4, 10)
    assert sorted(m.body for m in got) == [b"checked", b"committed"]
    assert b"checked" in checker.asked


def test_push_consumer_with_a_listener_gets_everything(env):
    c, proxy, admin = env
    admin.create_topic("PxPush", queues=2)
    got, lock = [], threading.Lock()

    class Listener(MessageListener):
        def consume(self, message):
            with lock:
                got.append(message.body)
            return ConsumeResult.SUCCESS
    pc = PushConsumer(config(proxy), "px-push", Listener(), {"PxPush": FilterExpression()})
    pc.startup()
    try:
        bodies = [b"p-%d" % i for i in range(20)]
        with producer(proxy, "PxPush") as p:
            for b in bodies:
                p.send(_msg("PxPush", b))
        wait_for(lambda: len(set(got)) >= len(bodies), 30, "every message at the push consumer")
        assert sorted(set(got)) == sorted(bodies)
    finally:
        pc.shutdown()


def test_quiver_sdk_and_rocketmq5_client_see_the_same_messages(env):
    c, proxy, admin = env
    admin.create_topic("PxBoth", queues=2)
    with QProducer("px-both", namesrv=c.namesrv) as qp:
        ids = {qp.send(QMessage("PxBoth", b"q-%d" % i, tags="T")).msg_id for i in range(5)}
    with producer(proxy, "PxBoth") as p:
        ids |= {p.send(_msg("PxBoth", b"r-%d" % i, tag="T")).message_id for i in range(5)}
    with simple_consumer(proxy, "px-both-v5", "PxBoth") as sc:
        v5 = receive_until(sc, 10, 20)
    with QSimpleConsumer("px-both-q", namesrv=c.namesrv, consume_from="first", await_duration_s=0.5) as qc:
        qc.subscribe("PxBoth")
        q = []
        deadline = time.monotonic() + 20
        while len(q) < 10 and time.monotonic() < deadline:
            for m in qc.receive(16, 20):
                qc.ack(m)
                q.append(m)
    assert {m.message_id for m in v5} == {m.msg_id for m in q} == ids
    assert sorted(m.body for m in v5) == sorted(m.body for m in q)


def test_bad_input_gets_the_status_code_the_clients_expect(env):
    import grpc
    from rocketmq.grpc_protocol import definition_pb2 as d
    from rocketmq.grpc_protocol import service_pb2 as s
    from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub
    c, proxy, admin = env
    admin.create_topic("PxDoor", queues=1, order=True)
    md = (("x-mq-client-id", "door-test"),)
    with grpc.insecure_channel(proxy.url) as ch:
        stub = MessagingServiceStub(ch)

        def send(topic="PxDoor", body=b"x", **sp):
            req = s.SendMessageRequest()
            m = req.messages.add(body=body)
            m.topic.name = topic
            for k, v in sp.items():
                setattr(m.system_properties, k, v)
            return stub.SendMessage(req, metadata=md, timeout=10).status.code
        assert send(topic="bad topic!") == d.Code.ILLEGAL_TOPIC
        assert send(body=b"", message_group="g") == d.Code.MESSAGE_BODY_EMPTY
        assert send(message_type=d.MessageType.NORMAL) == d.Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
        assert send(message_group="g", tag="a|b") == d.Code.ILLEGAL_MESSAGE_TAG
        assert send(message_group="g", message_type=d.MessageType.FIFO) == d.Code.OK
        req = s.SendMessageRequest()
        req.messages.add(body=b"x").topic.name = "PxDoor"
        assert stub.SendMessage(req, timeout=10).status.code == d.Code.CLIENT_ID_REQUIRED

        ack = s.AckMessageRequest()
        ack.group.name, ack.topic.name = "px-door", "PxDoor"
        ack.entries.add(message_id="x", receipt_handle="forged")
        reply = stub.AckMessage(ack, metadata=md, timeout=10)
        assert reply.status.code == reply.entries[0].status.code == d.Code.INVALID_RECEIPT_HANDLE

        change = s.ChangeInvisibleDurationRequest(receipt_handle="1 broker-a PxDoor 0 0 0 1000 0")
        change.group.name, change.topic.name = "px-door", "PxDoor"
        assert stub.ChangeInvisibleDuration(change, metadata=md, timeout=10).status.code == d.Code.ILLEGAL_INVISIBLE_TIME

        end = s.EndTransactionRequest(transaction_id="not-ours", resolution=d.TransactionResolution.COMMIT)
        end.topic.name = "PxDoor"
        assert stub.EndTransaction(end, metadata=md, timeout=10).status.code == d.Code.INVALID_TRANSACTION_ID

        recv = s.ReceiveMessageRequest(batch_size=0)
        recv.group.name, recv.message_queue.topic.name, recv.message_queue.broker.name = "px-door", "PxDoor", "broker-a"
        assert [r.status.code for r in stub.ReceiveMessage(recv, metadata=md, timeout=10)] == [d.Code.BAD_REQUEST]

        pull = s.PullMessageRequest(offset=0, batch_size=1)
        pull.group.name = "px-door"
        pull.message_queue.topic.name, pull.message_queue.broker.name = "PxDoor", "broker-a"
        pull.filter_expression.type, pull.filter_expression.expression = d.FilterType.SQL, "a = 1"
        answers = [r.status.code for r in stub.PullMessage(pull, metadata=md, timeout=10) if r.HasField("status")]
        assert answers == [d.Code.UNSUPPORTED]                          # SQL92 needs a filter server: none here

        route = s.QueryRouteRequest()
        route.topic.name = "PxNoSuchTopic"
        route.endpoints.addresses.add(host="127.0.0.1", port=8081)
        assert stub.QueryRoute(route, metadata=md, timeout=10).status.code == d.Code.TOPIC_NOT_FOUND


def test_forward_to_dead_letter_queue_moves_the_delivery_and_ends_it(env):
    import grpc
    from rocketmq.grpc_protocol import definition_pb2 as d
    from rocketmq.grpc_protocol import service_pb2 as s
    from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub
    c, proxy, admin = env
    admin.create_topic("PxDlq", queues=1)
    with producer(proxy, "PxDlq") as p:
        p.send(_msg("PxDlq", b"poison"))
    md = (("x-mq-client-id", "dlq-test"),)
    with grpc.insecure_channel(proxy.url) as ch:
        stub = MessagingServiceStub(ch)
        recv = s.ReceiveMessageRequest(batch_size=1)
        recv.group.name, recv.message_queue.topic.name, recv.message_queue.broker.name = "px-dlq", "PxDlq", "broker-a"
        recv.invisible_duration.FromSeconds(30)
        recv.long_polling_timeout.FromSeconds(3)
        msgs = wait_for(lambda: [r.message for r in stub.ReceiveMessage(recv, metadata=md, timeout=10)
                                 if r.HasField("message")], 15, "the delivery")
        fwd = s.ForwardMessageToDeadLetterQueueRequest(receipt_handle=msgs[0].system_properties.receipt_handle,
                                                       message_id=msgs[0].system_properties.message_id,
                                                       delivery_attempt=1, max_delivery_attempts=1)
        fwd.group.name, fwd.topic.name = "px-dlq", "PxDlq"
        assert stub.ForwardMessageToDeadLetterQueue(fwd, metadata=md, timeout=10).status.code == d.Code.OK
        again = stub.ForwardMessageToDeadLetterQueue(fwd, metadata=md, timeout=10).status.code
        assert again == d.Code.INVALID_RECEIPT_HANDLE                     # that delivery is over
    dlq = wait_for(lambda: admin.dlq_messages("px-dlq"), 60, "the DLQ copy")
    assert [m.body for m in dlq] == [b"poison"]
    with simple_consumer(proxy, "px-dlq", "PxDlq") as sc:
        assert not sc.receive(4, 30)                                      # acked: never delivered again


def test_quickstart_a_new_group_receives_what_was_sent_before_it_started(env):
    """The 5.x quickstart (send, then start a SimpleConsumer of a new group) through a proxy with the
    default --pop-consume-from: the new group starts at 0 while the queue's first message is in memory."""
    c, _, admin = env
    default = c.add_proxy()
    try:
        c.wait()
        admin.create_topic("PxQuick", queues=2)
        with producer(default, "PxQuick") as p:
            sent = {p.send(_msg("PxQuick", f"q{i}".encode())).message_id for i in range(4)}
        with simple_consumer(default, "px-quick-new", "PxQuick") as sc:
            got = receive_until(sc, 4, 30)
        assert {m.message_id for m in got} == sent
    finally:
        default.stop()
        c.services.remove(default)
