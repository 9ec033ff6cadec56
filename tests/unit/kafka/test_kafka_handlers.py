"""The Kafka gateway's handlers over a fake SDK: partition order, answers when a topic or partition is missing."""

import struct
import threading
import types

from crc32c import crc32c

from quiver.client.base import MessageQueue
from quiver.errors import TopicNotExistError
from quiver.wire.codes import ResponseCode
from quiver_kafka import protocol
from quiver_kafka import records
from quiver_kafka.handlers import Gateway
from quiver_kafka.idempotence import INVALID_PRODUCER_EPOCH, OUT_OF_ORDER_SEQUENCE, Idempotence
from quiver_kafka.readahead import ReadAhead


class _Admin:
    def __init__(self, queues):
        self.queues = queues

    def route(self, topic, refresh=False):
        if topic not in self.queues:
            raise TopicNotExistError(f"no route of {topic}")
        return types.SimpleNamespace(read_queues=self.queues[topic])


class _Sender:
    """Stores each batch at the next offset of a single queue."""

    def __init__(self):
        self.stored = []

    def submit(self, mq, msgs, born_ts, wait=True):
        first = len(self.stored)
        self.stored += msgs
        return types.SimpleNamespace(offset=lambda: first)


def _gateway(queues):
    g = Gateway.__new__(Gateway)
    g.config, g.host, g.port = types.SimpleNamespace(max_request_bytes=1 << 20), "h", 9092
    g.admin, g.sender, g.counts, g.idempotence = _Admin(queues), _Sender(), {}, Idempotence()
    g._lock, g.ahead, g._log_start = threading.Lock(), ReadAhead(), {}
    g.fetched = {"pulls": 0, "pulled": 0, "answered": 0}
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


def _idempotent_batch(seq, count=2, pid=7, epoch=0):
    data = bytearray(records.encode([records.Record(i, 1000 + i, None, b"v%d" % i) for i in range(count)]))
    struct.pack_into(">qhi", data, 43, pid, epoch, seq)           # producerId, producerEpoch, baseSequence
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    return bytes(data)


def _produce(g, data):
    part = types.SimpleNamespace(index=0, records=data)
    body = types.SimpleNamespace(acks=-1, transactional_id=None,
                                 topic_data=[types.SimpleNamespace(name="T", partition_data=[part])])
    [resp] = g.produce(body)()["responses"]
    r = resp["partition_responses"][0]
    return r["error_code"], r["base_offset"]


def test_idempotent_produce_stores_a_retried_batch_once_and_checks_sequence_and_epoch():
    g = _gateway({"T": [MessageQueue("T", "a", 0)]})
    assert _produce(g, _idempotent_batch(0)) == (0, 0)
    assert _produce(g, _idempotent_batch(2)) == (0, 2)
    assert _produce(g, _idempotent_batch(0)) == (0, 0)        # a retry: the first send's offset, not stored again
    assert len(g.sender.stored) == 4
    assert _produce(g, _idempotent_batch(9))[0] == OUT_OF_ORDER_SEQUENCE
    assert _produce(g, _idempotent_batch(0, epoch=1)) == (0, 4)   # a new epoch starts over
    assert _produce(g, _idempotent_batch(6, epoch=0))[0] == INVALID_PRODUCER_EPOCH
    assert _produce(g, _idempotent_batch(0, pid=-1)) == (0, 6)    # not idempotent: always stored
    assert _produce(g, _idempotent_batch(0, pid=-1)) == (0, 8)


def test_init_producer_id_gives_distinct_ids_bumps_epochs_and_refuses_transactions():
    i = Idempotence()
    plain = types.SimpleNamespace(transactional_id=None, transaction_timeout=None)
    a, b = i.init_producer_id(plain), i.init_producer_id(plain)
    assert a["producer_id"] != b["producer_id"] and a["producer_id"] >= 0 and a["producer_epoch"] == 0
    bumped = i.init_producer_id(types.SimpleNamespace(transactional_id=None, producer_id=a["producer_id"],
                                                      producer_epoch=0))
    assert (bumped["producer_id"], bumped["producer_epoch"]) == (a["producer_id"], 1)
    assert i.init_producer_id(types.SimpleNamespace(transactional_id="tx"))["error_code"] == protocol.UNSUPPORTED_VERSION


def test_sasl_plain_session_and_refusals():
    from quiver_kafka.sasl import ILLEGAL_SASL_STATE, SASL_AUTHENTICATION_FAILED, UNSUPPORTED_SASL_MECHANISM, Session
    s = Session({"alice": ("pw", None)})
    auth = lambda token: s.authenticate(types.SimpleNamespace(auth_bytes=token))["error_code"]  # noqa: E731
    assert auth(b"\0alice\0pw") == ILLEGAL_SASL_STATE                     # no handshake yet
    assert s.handshake(types.SimpleNamespace(mechanism="GSSAPI"))["error_code"] == UNSUPPORTED_SASL_MECHANISM
    assert s.handshake(types.SimpleNamespace(mechanism="PLAIN"))["error_code"] == protocol.NONE
    assert auth(b"\0alice\0wrong") == SASL_AUTHENTICATION_FAILED and s.user is None
    assert auth(b"garbage") == SASL_AUTHENTICATION_FAILED
    assert auth(b"\0alice\0pw") == protocol.NONE and s.user == "alice"
    assert auth(b"\0alice\0pw") == ILLEGAL_SASL_STATE                     # once


def test_a_failing_handler_is_answered_unknown_server_error_and_a_garbled_header_closes():
    from quiver_kafka.app import App

    class Broken:
        counts, _lock = {}, threading.Lock()

        def handle(self, req):
            raise RuntimeError("bug")

        def _count(self, api, err):
            self.counts[(api, err)] = self.counts.get((api, err), 0) + 1
    app = App.__new__(App)
    app.gateway, app.users, app.closed_bad = Broken(), {}, 0
    out = app.answer(struct.pack(">hhih", 18, 2, 9, -1))            # ApiVersions v2
    assert struct.unpack_from(">iih", out) == (len(out) - 4, 9, protocol.UNKNOWN_SERVER_ERROR)
    assert app.answer(b"\x00\x12") is None and app.closed_bad == 1  # the caller closes that connection


def test_a_fetch_round_sends_every_partitions_pull_before_reading_an_answer():
    g = _gateway({"T": [MessageQueue("T", "a", i) for i in range(3)]})
    sent, sent_when_read = [], []
    nothing_new = types.SimpleNamespace(code=ResponseCode.PULL_NOT_FOUND, remark="", bodies=(),
                                        ext={"next": 7, "min": 0, "max": 7})

    class _Pull:
        def result(self, timeout=None):
            sent_when_read.append(len(sent))
            return nothing_new

    io = types.SimpleNamespace(call_future=lambda addr, req, ext, bodies, timeout: sent.append(req.queue_id) or _Pull())
    g.admin.read_addr, g.admin.request_timeout, g.admin._io = (lambda topic, broker: "127.0.0.1:1"), 1.0, lambda: io
    body = types.SimpleNamespace(max_bytes=1 << 20, topics=[types.SimpleNamespace(topic="T", partitions=[
        types.SimpleNamespace(partition=i, fetch_offset=7, partition_max_bytes=1024) for i in range(3)])])
    total, [answer] = g._fetch_round(body)
    assert sent == [0, 1, 2] and sent_when_read == [3, 3, 3] and total == 0
    assert [(p["error_code"], p["high_watermark"]) for p in answer["partitions"]] == [(0, 7)] * 3


def test_a_restarted_gateway_reads_a_producers_sequences_back_from_the_queue():
    g = _gateway({"T": [MessageQueue("T", "a", 0)]})
    assert _produce(g, _idempotent_batch(0)) == (0, 0)
    assert _produce(g, _idempotent_batch(2)) == (0, 2)
    assert [m.properties.get("kafka.seq") for m in g.sender.stored] == ["7:0:0:2", None, "7:0:2:2", None]
    restarted = _gateway({"T": [MessageQueue("T", "a", 0)]})
    restarted.sender = g.sender          # the same queue behind a new gateway: no state in memory
    tails = []
    restarted._stored_sequences = lambda topic, mq: tails.append(topic) or [
        (i, m.properties.get("kafka.seq")) for i, m in enumerate(g.sender.stored)]
    assert _produce(restarted, _idempotent_batch(2)) == (0, 2)    # the retry: its stored offset, not stored again
    assert len(g.sender.stored) == 4 and tails == ["T"]
    assert _produce(restarted, _idempotent_batch(9))[0] == OUT_OF_ORDER_SEQUENCE
    assert _produce(restarted, _idempotent_batch(4)) == (0, 4) and tails == ["T"]   # read once
    fresh = restarted.idempotence.init_producer_id(types.SimpleNamespace(transactional_id=None))["producer_id"]
    assert _produce(restarted, _idempotent_batch(0, pid=fresh)) == (0, 6) and tails == ["T"]   # its own: no look
