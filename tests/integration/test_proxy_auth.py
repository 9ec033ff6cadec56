"""Auth on: RocketMQ 5 clients' AK/SK signatures checked by the proxy, each access key served as its Quiver user."""

import json
import os

import pytest
from rocketmq import ClientConfiguration, Credentials, FilterExpression, Producer, SimpleConsumer

from quiver.wire.curve import write_credentials
from support.proxy import receive_until, started
from support.secure import add_user, secure_cluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    root = tmp_path_factory.mktemp("proxy-secure")
    with secure_cluster(root, topics=("SecOrders", "SecPay")) as (c, admin, _):
        bob = add_user(admin, "bob", ("topic:SecOrders", ["PUB", "SUB"]), ("group:sec-cg", ["SUB"]))
        write_credentials(str(root / "bob.key"), bob)
        keys = root / "access-keys.json"
        keys.write_text(json.dumps({"BOB_AK": {"secret": "bob-secret", "credentials": str(root / "bob.key")}}))
        os.chmod(keys, 0o600)
        closed = c.add_proxy()                                     # auth on, no access keys: serves nobody
        proxy = c.add_proxy("--access-keys", str(keys), "--pop-consume-from", "first")
        c.wait()
        yield proxy, closed


def _message(topic, body):
    from rocketmq import Message
    m = Message()
    m.topic, m.body = topic, body
    return m


def test_a_signed_client_acts_as_its_user_and_the_acl_decides(secure):
    proxy, _ = secure
    cfg = ClientConfiguration(proxy.url, Credentials("BOB_AK", "bob-secret"), request_timeout=5)
    with started(Producer(cfg, ("SecOrders",))) as p:
        sent = p.send(_message("SecOrders", b"granted"))
        with pytest.raises(Exception, match="SecPay"):
            p.send(_message("SecPay", b"not granted"))             # bob may not even see its route
    with started(SimpleConsumer(cfg, "sec-cg", {"SecOrders": FilterExpression()}, await_duration=1)) as sc:
        got = receive_until(sc, 1, 20)
    assert [m.message_id for m in got] == [sent.message_id]


def test_a_wrong_secret_or_no_access_keys_is_unauthorized(secure):
    proxy, closed = secure
    import grpc
    from rocketmq.grpc_protocol import definition_pb2 as d
    from rocketmq.grpc_protocol import service_pb2 as s
    from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub
    from rocketmq.v5.util.signature import Signature
    req = s.QueryRouteRequest()
    req.topic.name = "SecOrders"
    req.endpoints.addresses.add(host="127.0.0.1", port=8081)
    for svc, sk in ((proxy, "not-bob's"), (closed, "bob-secret")):
        md = Signature.metadata(ClientConfiguration(svc.url, Credentials("BOB_AK", sk)), "auth-test")
        with grpc.insecure_channel(svc.url) as ch:
            reply = MessagingServiceStub(ch).QueryRoute(req, metadata=md, timeout=10)
        assert reply.status.code == d.Code.UNAUTHORIZED, reply.status
    with grpc.insecure_channel(proxy.url) as ch:
        stub = MessagingServiceStub(ch)
        assert stub.QueryRoute(req, timeout=10).status.code == d.Code.UNAUTHORIZED      # unsigned
        md = Signature.metadata(ClientConfiguration(proxy.url, Credentials("BOB_AK", "bob-secret")), "auth-test")
        req.topic.name = "SecPay"
        reply = stub.QueryRoute(req, metadata=md, timeout=10)
        assert reply.status.code == d.Code.FORBIDDEN and "bob" in reply.status.message                # the ACL's no


def test_pull_and_offsets_need_sub_on_the_topic_and_the_group(secure):
    proxy, _ = secure
    import grpc
    from rocketmq.grpc_protocol import definition_pb2 as d
    from rocketmq.grpc_protocol import service_pb2 as s
    from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub
    from rocketmq.v5.util.signature import Signature
    md = Signature.metadata(ClientConfiguration(proxy.url, Credentials("BOB_AK", "bob-secret")), "pull-auth-test")

    def queue(mq, topic):
        mq.topic.name, mq.broker.name, mq.id = topic, "broker-a", 0

    with grpc.insecure_channel(proxy.url) as ch:
        stub = MessagingServiceStub(ch)

        def pull(topic, group):
            req = s.PullMessageRequest(offset=0, batch_size=8)
            req.group.name = group
            queue(req.message_queue, topic)
            return [r.status for r in stub.PullMessage(req, metadata=md, timeout=10) if r.HasField("status")][0]

        def update(topic, group, offset=1):
            req = s.UpdateOffsetRequest(offset=offset)
            req.group.name = group
            queue(req.message_queue, topic)
            return stub.UpdateOffset(req, metadata=md, timeout=10).status

        assert pull("SecOrders", "sec-cg").code in (d.Code.OK, d.Code.MESSAGE_NOT_FOUND)
        refused = pull("SecOrders", "other-cg")                                  # no grant on that group
        assert refused.code == d.Code.FORBIDDEN and "bob" in refused.message, refused
        assert pull("SecPay", "sec-cg").code == d.Code.FORBIDDEN                  # nor on that topic
        assert update("SecOrders", "sec-cg").code == d.Code.OK
        assert update("SecOrders", "other-cg").code == d.Code.FORBIDDEN
        get = s.GetOffsetRequest()
        get.group.name = "sec-cg"
        queue(get.message_queue, "SecOrders")
        reply = stub.GetOffset(get, metadata=md, timeout=10)
        assert (reply.status.code, reply.offset) == (d.Code.OK, 1)
        q = s.QueryOffsetRequest(query_offset_policy=d.QueryOffsetPolicy.END)
        queue(q.message_queue, "SecPay")
        assert stub.QueryOffset(q, metadata=md, timeout=10).status.code == d.Code.FORBIDDEN
