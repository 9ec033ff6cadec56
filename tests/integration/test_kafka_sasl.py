"""SASL through the Kafka gateway on an auth-on cluster: PLAIN and SCRAM users act as their Quiver ACL users."""

import json
import os

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402

from quiver import Admin  # noqa: E402
from quiver.tools.local import LocalCluster, free_port  # noqa: E402
from quiver.wire.curve import init_auth_dir, write_credentials  # noqa: E402
from support.waiting import wait_for  # noqa: E402

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    root = tmp_path_factory.mktemp("kafka-sasl")
    auth = str(root / "auth")
    admin_creds = init_auth_dir(auth)
    c = LocalCluster(str(root / "cluster"), auth_dir=auth)
    try:
        c.add_core()
        admin = Admin(c.namesrv, credentials=admin_creds)
        admin.create_topic("KsOpen", queues=1)
        admin.create_topic("KsClosed", queues=1)
        users = {}
        for name, grants in (("alice", [("topic:KsOpen", ["PUB", "SUB"]), ("group:ks-alice", ["SUB"])]),
                             ("bob", [("topic:KsOpen", ["SUB"]), ("group:ks-bob", ["SUB"])])):
            creds = admin.acl_add_user(name)
            for resource, actions in grants:
                admin.acl_grant(name, resource, actions)
            key = str(root / f"{name}.key")
            write_credentials(key, creds)
            users[name] = {"password": f"{name}-secret", "credentials": key}
        path = str(root / "sasl-users.json")
        with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            json.dump(users, f)
        bootstrap = f"127.0.0.1:{free_port()}"
        gw = c.add_service("kafka", "quiver_kafka", "--kafka-listen", bootstrap, "--sasl-users", path, data=False)
        c.wait()
    except BaseException:
        c.stop()
        raise
    yield c, gw, admin, bootstrap
    admin.shutdown()
    c.stop()


def _conf(bootstrap, mechanism, user, password):
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
            "sasl.username": user, "sasl.password": password}


def _produce(conf, topic, value):
    errors = []
    p = Producer({**conf, "message.timeout.ms": 10_000})
    p.produce(topic, value, partition=0, on_delivery=lambda err, msg: errors.append(err))
    p.flush(20)
    return errors


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_a_granted_user_produces_and_consumes_a_refused_one_gets_kafkas_errors(secured, mechanism):
    c, gw, admin, bootstrap = secured
    alice = _conf(bootstrap, mechanism, "alice", "alice-secret")
    assert _produce(alice, "KsOpen", f"from {mechanism}".encode()) == [None]
    [err] = _produce(alice, "KsClosed", b"refused")                 # no PUB on KsClosed
    assert err.code() == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED
    bob = _conf(bootstrap, mechanism, "bob", "bob-secret")
    [err] = _produce(bob, "KsOpen", b"bob has SUB only")
    assert err.code() == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED
    cons = Consumer({**bob, "group.id": "ks-bob", "fetch.wait.max.ms": 100})
    try:
        cons.assign([TopicPartition("KsOpen", 0, confluent_kafka.OFFSET_BEGINNING)])
        m = wait_for(lambda: cons.poll(0.5), 20, "bob's first message")
        assert m.error() is None and m.value().startswith(b"from ")
    finally:
        cons.close()


def test_a_wrong_password_fails_authentication_and_stores_nothing(secured):
    c, gw, admin, bootstrap = secured
    [q] = admin.queues("KsOpen")
    before = admin.max_offset(q)
    p = Producer({**_conf(bootstrap, "SCRAM-SHA-256", "alice", "wrong"), "message.timeout.ms": 5000})
    errors = []
    p.produce("KsOpen", b"x", partition=0, on_delivery=lambda err, msg: errors.append(err))
    p.flush(15)
    assert errors and errors[0] is not None
    assert admin.max_offset(q) == before
