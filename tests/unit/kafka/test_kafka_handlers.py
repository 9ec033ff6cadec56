"""The Kafka gateway's handlers over a fake SDK: partition order, answers when a topic or partition is missing."""

import threading
import types

from quiver.client.base import MessageQueue
from quiver.errors import TopicNotExistError
from quiver_kafka import protocol
from quiver_kafka.handlers import Gateway


class _Admin:
    def __init__(self, queues):
        self.queues = queues

    def route(self, topic, refresh=False):
        if topic not in self.queues:
            raise TopicNotExistError(f"no route of {topic}")
        return types.SimpleNamespace(read_queues=self.queues[topic])


def _gateway(queues):
    g = Gateway.__new__(Gateway)
    g.config, g.host, g.port = types.SimpleNamespace(max_request_bytes=1 << 20), "h", 9092
    g.admin, g.sender, g.counts = _Admin(queues), None, {}
    g._lock = threading.Lock()
    return g


def test_partitions_are_queues_by_broker_name_then_queue_id():
    qs = [MessageQueue("T", b, i) for b, i in (("broker-b", 0), ("broker-a", 1), ("broker-a", 0), ("broker-b", 1))]
    g = _gateway({"T": qs})
    assert [(q.broker, q.queue_id) for q in g.partitions("T")] == [
        ("broker-a", 0), ("broker-a", 1), ("broker-b", 0), ("broker-b", 1)]
    md = g.metadata(types.SimpleNamespace(topics=[types.SimpleNamespace(name="T"), types.SimpleNamespace(name="U")]))
    assert [len(t["partitions"]) for t in md["topics"]] == [4, 0]
    assert [t["error_code"] for t in md["topics"]] == [0, protocol.UNKNOWN_TOPIC_OR_PARTITION]


def test_fetch_of_a_missing_partition_answers_an_error_and_an_empty_record_set():
    g = _gateway({"T": [MessageQueue("T", "a", 0)]})
    for topic, partition in (("T", 1), ("U", 0)):
        out = g._fetch_one(topic, partition, 0, 1024)
        assert out["error_code"] == protocol.UNKNOWN_TOPIC_OR_PARTITION
        assert out["records"] == b""   # librdkafka refuses a null record set
    assert g._fetch_one("T", 0, -1, 1024)["error_code"] == protocol.OFFSET_OUT_OF_RANGE


def test_produce_with_bad_acks_or_to_a_missing_partition():
    g = _gateway({"T": [MessageQueue("T", "a", 0)]})
    part = types.SimpleNamespace(index=3, records=b"")
    body = types.SimpleNamespace(acks=2, transactional_id=None,
                                 topic_data=[types.SimpleNamespace(name="T", partition_data=[part])])
    [resp] = g.produce(body)["responses"]
    assert resp["partition_responses"][0]["error_code"] == protocol.INVALID_REQUIRED_ACKS
    body.acks = -1
    [resp] = g.produce(body)()["responses"]   # a callable: sends may be under way
    assert resp["partition_responses"][0]["error_code"] == protocol.UNKNOWN_TOPIC_OR_PARTITION
    body.acks = 0
    assert g.produce(body) is None        # acks=0: no answer at all
