"""CreateTopics with cleanup.policy=compact makes a compacted Quiver topic; without it, an ordinary one."""

import types

from quiver_kafka.topics import Topics

from tests.unit.kafka.test_kafka_handlers import _gateway

S = types.SimpleNamespace


def test_cleanup_policy_compact_creates_a_compacted_topic():
    g = _gateway({})
    made = []
    g.admin.all_broker_addrs = lambda: {"broker-a": "127.0.0.1:1"}
    g.admin.create_topic = lambda topic, queues, brokers, compact=None: made.append((topic, queues, compact))
    body = S(validate_only=False, topics=[
        S(name="Table", num_partitions=2, configs=[S(name="cleanup.policy", value="compact")]),
        S(name="Log", num_partitions=1, configs=[S(name="retention.ms", value="1000")]),
        S(name="Both", num_partitions=1, configs=[S(name="cleanup.policy", value="compact,delete")])])
    out = Topics(g).create_topics(body)
    assert [t["error_code"] for t in out["topics"]] == [0, 0, 0]
    assert made == [("Table", 2, True), ("Log", 1, None), ("Both", 1, True)]
