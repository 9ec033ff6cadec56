"""AlterConfigs and IncrementalAlterConfigs (nothing a Quiver topic could change is refused), DescribeCluster,
and a transaction coordinator asked for."""

import types

from quiver.client.base import MessageQueue
from quiver_kafka import protocol
from quiver_kafka.configs import APPEND, DELETE, INVALID_CONFIG, SET, SUBTRACT, Configs
from quiver_kafka.offsets import Offsets
from quiver_kafka.topics import BROKER_RESOURCE, TOPIC_RESOURCE, Topics

from tests.unit.kafka.test_kafka_handlers import _gateway

S = types.SimpleNamespace


def _configs():
    g = _gateway({"T": [MessageQueue("T", "a", 0)]})
    g.config.max_message_bytes = 4096
    return Configs(Topics(g))


def _incremental(cfg, *ops, name="T", kind=TOPIC_RESOURCE, validate_only=False):
    body = S(validate_only=validate_only, resources=[S(resource_type=kind, resource_name=name, configs=[
        S(name=n, config_operation=op, value=v) for n, op, v in ops])])
    [out] = cfg.incremental_alter_configs(body)["responses"]
    return out["error_code"], out["error_message"]


def test_an_alteration_that_changes_nothing_is_taken_and_any_other_refused_whole():
    cfg = _configs()
    assert _incremental(cfg, ("cleanup.policy", SET, "delete"), ("max.message.bytes", SET, "4096")) == (0, None)
    assert _incremental(cfg, ("max.message.bytes", DELETE, None), ("cleanup.policy", APPEND, "delete"),
                        ("cleanup.policy", SUBTRACT, "compact")) == (0, None)
    err, msg = _incremental(cfg, ("cleanup.policy", SET, "delete"), ("max.message.bytes", SET, "10"))
    assert err == INVALID_CONFIG and "fixed at '4096'" in msg
    assert _incremental(cfg, ("cleanup.policy", APPEND, "compact"))[0] == INVALID_CONFIG
    assert _incremental(cfg, ("cleanup.policy", SUBTRACT, "delete"))[0] == INVALID_CONFIG
    assert _incremental(cfg, ("max.message.bytes", APPEND, "1"))[0] == INVALID_CONFIG     # not a list
    err, msg = _incremental(cfg, ("retention.ms", SET, "1000"), validate_only=True)
    assert err == INVALID_CONFIG and "retention.ms" in msg
    assert _incremental(cfg, ("cleanup.policy", 7, "delete"))[0] == protocol.INVALID_REQUEST
    assert _incremental(cfg, ("cleanup.policy", SET, "delete"), name="U")[0] == protocol.UNKNOWN_TOPIC_OR_PARTITION
    assert _incremental(cfg, ("cleanup.policy", SET, "delete"), name="bad name!")[0] == protocol.INVALID_TOPIC_EXCEPTION
    assert _incremental(cfg, ("log.retention.ms", SET, "1"), name="0", kind=BROKER_RESOURCE)[0] == protocol.INVALID_REQUEST
    body = S(validate_only=False, resources=[S(resource_type=TOPIC_RESOURCE, resource_name="T", configs=[
        S(name="message.timestamp.type", value="CreateTime"), S(name="compression.type", value="gzip")])])
    [out] = cfg.alter_configs(body)["responses"]
    assert out["error_code"] == INVALID_CONFIG and "compression.type" in out["error_message"]
    assert cfg.gw.counts[("incremental_alter_configs", 0)] == 2


def test_describe_cluster_names_the_gateway_as_its_one_broker_and_controller():
    out = _gateway({}).describe_cluster(None)
    assert (out["cluster_id"], out["controller_id"], out["brokers"][0]["broker_id"]) == ("quiver", 0, 0)
    assert (out["brokers"][0]["host"], out["brokers"][0]["port"]) == ("h", 9092)


def test_a_transaction_coordinator_is_refused_with_the_code_clients_take_as_final():
    out = Offsets(_gateway({})).find_coordinator(S(key_type=1, key="tx"))
    assert out["error_code"] == protocol.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert "transactions are not served" in out["error_message"]
