"""SASL through the Kafka gateway on an auth-on cluster: PLAIN and SCRAM users act as their Quiver ACL users,
over plaintext and over TLS (SASL_SSL)."""

import datetime
import ipaddress
import json
import os

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402

from quiver import Admin  # noqa: E402
from quiver.tools.local import LocalCluster, free_port  # noqa: E402
from quiver.wire.curve import init_auth_dir, write_credentials  # noqa: E402
from support.waiting import wait_for  # noqa: E402

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


secured_tls: list = []   # the SASL_SSL gateway's address and CA file, set by the fixture


def _self_signed(root):
    """A certificate for 127.0.0.1 and its key, PEM files under `root`."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = str(root / "tls.crt"), str(root / "tls.key")
    with open(cert_path, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(os.open(key_path, os.O_WRONLY | os.O_CREAT, 0o600), "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    return cert_path, key_path


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
        cert, key = _self_signed(root)
        tls_bootstrap = f"127.0.0.1:{free_port()}"
        c.add_service("kafka", "quiver_kafka", "--kafka-listen", tls_bootstrap, "--sasl-users", path,
                      "--tls-cert", cert, "--tls-key", key, data=False)
        c.wait()
    except BaseException:
        c.stop()
        raise
    secured_tls[:] = [tls_bootstrap, cert]
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


def test_sasl_ssl_scram_produces_and_consumes(secured):
    c, gw, admin, bootstrap = secured
    tls_bootstrap, ca = secured_tls
    alice = {**_conf(tls_bootstrap, "SCRAM-SHA-512", "alice", "alice-secret"), "security.protocol": "SASL_SSL",
             "ssl.ca.location": ca}
    assert _produce(alice, "KsOpen", b"over TLS") == [None]
    cons = Consumer({**alice, "group.id": "ks-alice", "fetch.wait.max.ms": 100})
    try:
        cons.assign([TopicPartition("KsOpen", 0, confluent_kafka.OFFSET_BEGINNING)])
        seen = []
        wait_for(lambda: seen.extend(m.value() for m in cons.consume(50, 0.5) if m.error() is None)
                 or b"over TLS" in seen, 20, "the message sent over TLS")
    finally:
        cons.close()
