"""The proxy's checks at the door and its conversions, without processes."""

import os
import time

import pytest
from rocketmq.grpc_protocol.definition_pb2 import Code, Encoding, MessageType
from rocketmq.grpc_protocol.definition_pb2 import Message as PbMessage

from quiver.client.message import SHARDING_KEY, MessageExt
from quiver_proxy.config import Config
from quiver_proxy.messages import inbound, outbound
from quiver_proxy.statuses import Refused
from quiver_proxy.transactions import encode_id, parse_id


def pb(body=b"x", topic="T", **sp):
    m = PbMessage(body=body)
    m.topic.name = topic
    for k, v in sp.items():
        setattr(m.system_properties, k, v)
    return m


def code_of(fn, *args):
    with pytest.raises(Refused) as exc:
        fn(*args)
    return exc.value.code


def test_inbound_maps_tag_keys_group_delay_and_properties():
    m = pb("héllo 🚀".encode(), tag="TagA", message_group="order-1", message_type=MessageType.FIFO)
    m.system_properties.keys.extend(["k1", "k2"])
    m.user_properties["colour"] = "blé"
    got = inbound(m, 1024)
    assert got.kind == MessageType.FIFO and got.group == "order-1"
    assert got.msg.tags == "TagA" and got.msg.keys == ["k1", "k2"]
    assert got.msg.properties == {"colour": "blé", SHARDING_KEY: "order-1"}
    d = pb(message_type=MessageType.DELAY)
    d.system_properties.delivery_timestamp.FromMilliseconds(int(time.time() * 1000) + 5000)
    assert inbound(d, 1024).msg.deliver_at == d.system_properties.delivery_timestamp.ToMilliseconds()
    t = inbound(pb(message_type=MessageType.TRANSACTION), 1024)
    assert t.kind == MessageType.TRANSACTION


def test_inbound_refuses_with_the_v2_codes():
    assert code_of(inbound, pb(topic="no spaces"), 1024) == Code.ILLEGAL_TOPIC
    assert code_of(inbound, pb(body=b""), 1024) == Code.MESSAGE_BODY_EMPTY
    assert code_of(inbound, pb(body=b"x" * 1025), 1024) == Code.MESSAGE_BODY_TOO_LARGE
    assert code_of(inbound, pb(tag="a|b"), 1024) == Code.ILLEGAL_MESSAGE_TAG
    assert code_of(inbound, pb(tag="  "), 1024) == Code.ILLEGAL_MESSAGE_TAG
    assert code_of(inbound, pb(message_group="x" * 65), 1024) == Code.ILLEGAL_MESSAGE_GROUP
    assert code_of(inbound, pb(message_type=MessageType.FIFO), 1024) == Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    assert code_of(inbound, pb(body=b"not gzip", body_encoding=Encoding.GZIP), 1024) == Code.MESSAGE_CORRUPTED
    bad_key = pb()
    bad_key.system_properties.keys.append("a b")
    assert code_of(inbound, bad_key, 1024) == Code.ILLEGAL_MESSAGE_KEY
    reserved = pb()
    reserved.user_properties["UNIQ_KEY"] = "forged"
    assert code_of(inbound, reserved, 1024) == Code.ILLEGAL_MESSAGE_PROPERTY_KEY
    far = pb()
    far.system_properties.delivery_timestamp.FromMilliseconds(int(time.time() * 1000) + 41 * 86400_000)
    assert code_of(inbound, far, 1024) == Code.ILLEGAL_DELIVERY_TIME
    far.system_properties.delivery_timestamp.seconds = 2 ** 50     # past protobuf's range, as a client can set
    assert code_of(inbound, far, 1024) == Code.ILLEGAL_DELIVERY_TIME


def test_outbound_carries_handle_attempt_group_and_a_checksum_the_client_accepts():
    from rocketmq.v5.model import Message
    m = MessageExt("T", "é".encode(), "TagA", ["k"], {"UNIQ_KEY": "ABC", SHARDING_KEY: "g", "p": "v"}, "ABC", None,
                   "broker-a", 1, 7, 2, 1000, 2000, 99, receipt_handle="1 broker-a T 1 7 5 1000 2")
    got = Message().fromProtobuf(outbound(m, 1000))
    assert not got.corrupted
    assert (got.body, got.tag, got.keys, got.properties) == ("é".encode(), "TagA", {"k"}, {"p": "v"})
    assert got.message_group == "g" and got.delivery_attempt == 3 and got.receipt_handle == m.receipt_handle


def test_transaction_ids_round_trip_and_refuse_forgeries():
    tid = encode_id("broker-a", 123, 4, "7F0000011C7F")
    assert parse_id(tid) == ("broker-a", 123, 4, "7F0000011C7F")
    for bad in ("", "q1:broker-a:1:2", "q1:bad/name:1:2:AB", "q1:b:x:2:AB", "q2:b:1:2:AB", "q1:b:1:2:A B", "é" * 10):
        assert code_of(parse_id, bad) == Code.INVALID_TRANSACTION_ID


def test_config_checks_its_settings():
    assert Config().message_types() == {}
    assert Config(topic_message_types="Pay=transaction; Later=DELAY").message_types() == \
        {"Pay": "TRANSACTION", "Later": "DELAY"}
    for bad in (dict(topic_message_types="Pay=FIFO"), dict(topic_message_types="bad topic=NORMAL"),
                dict(grpc_listen="nowhere"), dict(pop_consume_from="middle"), dict(long_polling_ms=60_000)):
        with pytest.raises(ValueError):
            Config(**bad)


def test_auth_on_closes_the_proxy_unless_told_to_serve_unverified_clients():
    assert not Config().closed
    assert Config(auth_dir="/srv/auth").closed and Config(credentials="/k.key").closed
    assert not Config(auth_dir="/srv/auth", serve_unverified=True).closed
    assert Config(auth_dir="/srv/auth").key_file == "/srv/auth/admin.key"


def test_access_keys_file_and_signatures(tmp_path):
    import json
    from rocketmq import ClientConfiguration, Credentials
    from rocketmq.v5.util.signature import Signature

    from quiver.wire.curve import KeyPair, write_credentials
    from quiver.wire.curve import Credentials as QCredentials
    from quiver_proxy.users import load_access_keys, signed_access_key
    kp, server = KeyPair.generate(), KeyPair.generate()
    write_credentials(str(tmp_path / "bob.key"), QCredentials("bob", kp.public_key, kp.secret_key, server.public_key))
    path = tmp_path / "keys.json"
    path.write_text(json.dumps({"AK1": {"secret": "s3cret", "credentials": str(tmp_path / "bob.key")}}))
    os.chmod(path, 0o644)
    with pytest.raises(ValueError, match="chmod 600"):                 # secrets others may read
        load_access_keys(str(path))
    os.chmod(path, 0o600)
    keys = load_access_keys(str(path))
    assert keys["AK1"][1].user == "bob"
    md = Signature.metadata(ClientConfiguration("127.0.0.1:8081", Credentials("AK1", "s3cret")), "cid")
    assert signed_access_key(md, keys) == "AK1"
    for ak, sk in (("AK1", "wrong"), ("AK2", "s3cret")):
        bad = Signature.metadata(ClientConfiguration("127.0.0.1:8081", Credentials(ak, sk)), "cid")
        assert code_of(signed_access_key, bad, keys) == Code.UNAUTHORIZED
    assert code_of(signed_access_key, [("x-mq-client-id", "cid")], keys) == Code.UNAUTHORIZED
    for bad in ("[]", "{}", '{"A K": {"secret": "s", "credentials": "x"}}', '{"AK": {"secret": ""}}', "not json"):
        path.write_text(bad)
        with pytest.raises(ValueError):
            load_access_keys(str(path))
    assert not Config(auth_dir="/srv/auth", access_keys=str(path)).closed
