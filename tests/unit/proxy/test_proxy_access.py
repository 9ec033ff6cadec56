"""The proxy's own access decisions without processes: signature dates, client ids bound to their
access key, settings and check-backs against the ACL, and the caps on streams and calls."""

import hmac
from datetime import datetime, timezone
from hashlib import sha1

import pytest
from rocketmq.grpc_protocol.definition_pb2 import ClientType, Code, Settings

from quiver.client.message import MessageExt
from quiver.runtime.acl import Acl, Rule, User
from quiver.wire.curve import Credentials, KeyPair
from quiver_proxy.clients import Clients
from quiver_proxy.config import Config
from quiver_proxy.grants import Grants
from quiver_proxy.limits import Limits
from quiver_proxy.statuses import Refused
from quiver_proxy.users import signed_access_key

NOW = datetime(2026, 11, 28, 12, 0, 0, tzinfo=timezone.utc).timestamp()


def _creds(name):
    pair = KeyPair.generate()
    return Credentials(name, pair.public_key, pair.secret_key, KeyPair.generate().public_key)


def _md(ak, secret, date):
    sig = hmac.new(secret, date.encode(), sha1).hexdigest()
    return [("x-mq-date-time", date),
            ("authorization", f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, Signature={sig}")]


def _code(fn, *args):
    with pytest.raises(Refused) as exc:
        fn(*args)
    return exc.value


def test_a_signature_is_accepted_only_within_its_window():
    keys = {"AK": (b"sk", None)}
    assert signed_access_key(_md("AK", b"sk", "20261128T120500Z"), keys, 900, NOW) == "AK"
    assert signed_access_key(_md("AK", b"sk", "20261128T114600Z"), keys, 900, NOW) == "AK"
    for date in ("20261128T121600Z", "20261128T113000Z", "20250101T000000Z", "yesterday", "20261328T120000Z"):
        refused = _code(signed_access_key, _md("AK", b"sk", date), keys, 900, NOW)
        assert refused.code == Code.UNAUTHORIZED and "x-mq-date-time" in refused.message, date
    assert _code(signed_access_key, _md("AK", b"no", "20261128T120000Z"), keys, 900, NOW).code == Code.UNAUTHORIZED


class _Client:
    """The proxy's own ClientBase as Grants uses it: one broker answering ACL_SNAPSHOT."""

    def __init__(self, acl):
        self.acl, self.calls = acl, 0

    def all_broker_addrs(self):
        return {"broker-a": "127.0.0.1:1"}

    def call_broker(self, addr, req):
        self.calls += 1

        class Env:
            ext = self.acl.snapshot()
        return Env()


def _world():
    payer, mallory = _creds("payer"), _creds("mallory")
    acl = Acl([User("payer", payer.public_key), User("mallory", mallory.public_key)],
              [Rule("payer", "topic:Pay", frozenset({"PUB"})), Rule("mallory", "topic:Mine", frozenset({"PUB", "SUB"})),
               Rule("mallory", "group:g", frozenset({"SUB"}))], version="1")
    client = _Client(acl)
    grants = Grants(client, {"PAYER": (b"s", payer), "MALLORY": (b"s", mallory)})
    grants.refresh()
    return grants, client


def _settings(*topics, group=None, sub=()):
    s = Settings(client_type=ClientType.PRODUCER if topics else ClientType.SIMPLE_CONSUMER)
    for t in topics:
        s.publishing.topics.add(name=t)
    if group:
        s.subscription.group.name = group
        for t in sub:
            s.subscription.subscriptions.add().topic.name = t
    return s


def test_settings_need_pub_on_published_topics_and_sub_on_group_and_topics():
    grants, _ = _world()
    clients = Clients(lambda t: False, 5000, 1024, grants)
    mallory = clients.session("m-1", "MALLORY")
    refused = _code(clients.settings, mallory, _settings("Pay"))
    assert refused.code == Code.FORBIDDEN and "'topic:Pay'" in refused.message and "MALLORY" in refused.message
    assert mallory.topics == set()
    assert _code(clients.settings, mallory, _settings(group="other", sub=["Mine"])).code == Code.FORBIDDEN
    assert _code(clients.settings, mallory, _settings(group="g", sub=["Pay"])).code == Code.FORBIDDEN
    assert clients.settings(mallory, _settings(group="g", sub=["Mine"])).status.code == Code.OK
    payer = clients.session("p-1", "PAYER")
    assert clients.settings(payer, _settings("Pay")).status.code == Code.OK and payer.topics == {"Pay"}


def test_a_client_id_is_bound_to_its_access_key():
    clients = Clients(lambda t: False, 5000, 1024)
    clients.session("c-1", "PAYER")
    assert _code(clients.session, "c-1", "MALLORY").code == Code.FORBIDDEN
    assert _code(clients.drop, "c-1", "MALLORY").code == Code.FORBIDDEN
    assert _code(clients.owned, "c-1", "MALLORY").code == Code.FORBIDDEN
    clients.owned("c-1", "PAYER")
    clients.drop("c-1", "PAYER")
    clients.session("c-1", "MALLORY")          # gone: a new client may take the id


def _producer(clients, cid, ak, topic):
    s = clients.session(cid, ak)
    s.client_type, s.streaming = ClientType.PRODUCER, True
    s.topics.add(topic)
    return s


def test_check_backs_go_to_keys_that_may_publish_and_to_the_sender_first():
    grants, _ = _world()
    clients = Clients(lambda t: False, 5000, 1024, grants)
    thief = _producer(clients, "m-1", "MALLORY", "Pay")        # e.g. declared before a revoke
    msg = MessageExt("Pay", b"secret", None, [], {}, "ID", None, "broker-a", 0, 0, 0, 0, 0, 0)
    for _ in range(20):
        assert not clients.forward_check("Pay", "q1:broker-a:0:0:ID1", msg)
    assert thief.out.empty()
    others = [_producer(clients, f"p-{i}", "PAYER", "Pay") for i in range(5)]
    clients.published("p-3", "Pay", "PAYER", "ID2")
    for _ in range(20):
        assert clients.forward_check("Pay", "q1:broker-a:9:9:ID2", msg)
    assert others[3].out.qsize() == 20 and thief.out.empty()
    others[3].streaming = False                                # the sender left: another of its key
    assert clients.forward_check("Pay", "q1:broker-a:9:9:ID2", msg) and thief.out.empty()


def test_grants_ask_the_brokers_again_when_refused_at_most_twice_a_second():
    grants, client = _world()
    assert grants.check("PAYER", "topic:Pay", "PUB") is None and client.calls == 1
    assert grants.check("MALLORY", "topic:Pay", "PUB") and client.calls == 2
    assert grants.check("MALLORY", "topic:Pay", "PUB") and client.calls == 2      # within RECHECK_S
    assert not Grants(client, {"PAYER": (b"s", _creds("payer"))}).allowed("PAYER", "topic:Pay", "PUB")  # no ACL
    assert Grants(client, {}).allowed("", "topic:Pay", "PUB")                      # no access keys: the proxy


def test_caps_on_streams_and_calls_per_key_and_in_all():
    limits = Limits(2, 3, 1, 2)
    limits.open_stream("A")
    limits.open_stream("A")
    refused = _code(limits.open_stream, "A")
    assert refused.code == Code.TOO_MANY_REQUESTS and "'A'" in refused.message
    limits.open_stream("B")
    assert "all clients" in _code(limits.open_stream, "C").message
    limits.close_stream("A")
    limits.open_stream("C")
    with limits.call("A"):
        assert _code(limits.call("A").__enter__).code == Code.TOO_MANY_REQUESTS
        with limits.call(""):                   # no access key: the totals only
            assert _code(limits.call("B").__enter__).code == Code.TOO_MANY_REQUESTS
    with limits.call("B"):
        pass
    assert limits.counts() == {"open_streams": 3, "calls_in_flight": 0, "refused_over_caps": 4}
    c = Config(grpc_threads=48)
    assert (c.streams_cap, c.calls_cap, c.calls_per_key_cap) == (24, 24, 12)
    assert Limits.of(c).streams_per_key == 16
    for bad in (dict(grpc_threads=8, max_streams=8), dict(grpc_threads=8, max_streams=4, max_calls_per_key=5)):
        with pytest.raises(ValueError):
            Config(**bad)
