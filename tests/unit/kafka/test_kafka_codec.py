"""The Kafka gateway's codec and mapping: record batch v2, request/response frames, Kafka record <-> Quiver message."""

import datetime
import gzip
import io
import struct

import cramjam
import pytest
from crc32c import crc32c
from kio.schema.produce.v8.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.request_header.v1.header import RequestHeader
from kio.serial import entity_writer

from quiver.client.message import MessageExt
from quiver_kafka import mapping, protocol, records
from quiver_kafka.records import Record


def _rec(offset, ts, key=b"k", value=b"v", headers=()):
    return Record(offset, ts, key, value, list(headers))


def test_batch_round_trip_keeps_every_field_exactly():
    recs = [_rec(10, 1_700_000_000_123, b"k1", b"v1", [("a", b"1"), ("b", None)]),
            _rec(11, 1_700_000_000_120, None, None),                 # an earlier timestamp: a negative delta
            _rec(12, 1_700_000_009_999, b"", b"", [("a", b"\x00\xff")])]
    [batch] = records.decode(records.encode(recs))
    assert batch.base_offset == 10 and batch.records == recs


def test_batch_round_trip_across_varint_widths():
    # lengths and deltas each side of the one- and two-byte varints and of the writer's lookup table
    sizes = [0, 1, 63, 64, 65, 8191, 8192, 20_000]
    recs = [_rec(5 + i * 70, 1_700_000_000_000 + d, b"k" * n, b"v" * sizes[-1 - i], [("h", b"x" * n)] if i % 2 else [])
            for i, (n, d) in enumerate(zip(sizes, [0, -1, 64, -9000, 8191, 8192, 10**9, -(10**9)]))]
    recs.append(_rec(recs[-1].offset + 9000, 0, None, None))
    [batch] = records.decode(records.encode(recs))
    assert batch.base_offset == 5 and batch.records == recs


def test_several_batches_decode_in_order():
    data = records.encode([_rec(0, 5), _rec(1, 6)]) + _compressed(records.GZIP, [_rec(2, 7)], gzip.compress)
    assert [r.offset for b in records.decode(data) for r in b.records] == [0, 1, 2]


@pytest.mark.parametrize("damage, error", [
    (lambda b: b[:-1], records.Corrupt),                              # truncated
    (lambda b: b[:30] + bytes([b[30] ^ 1]) + b[31:], records.Corrupt),  # a flipped bit: CRC32C mismatch
    (lambda b: b[:16] + b"\x01" + b[17:], records.Unsupported),       # magic 1
    (lambda b: b[:8] + struct.pack(">i", 10**6) + b[12:], records.Corrupt),   # length past the end
])
def test_bad_batches_are_refused_saying_why(damage, error):
    good = records.encode([_rec(0, 1, headers=[("h", b"v")])])
    with pytest.raises(error):
        records.decode(damage(good))


def _compressed(codec, recs, compress):
    """A batch of `recs` with its records compressed by `compress` under `codec`, CRC anew."""
    plain = records.encode(recs)
    tail = bytearray(plain[records.HEAD_BYTES:records.BATCH_OVERHEAD]) + compress(plain[records.BATCH_OVERHEAD:])
    struct.pack_into(">h", tail, 0, codec)
    return struct.pack(">qiibI", recs[0].offset, len(tail) + 9, 0, 2, crc32c(bytes(tail))) + bytes(tail)


def _xerial(data):
    block = bytes(cramjam.snappy.compress_raw(data))
    return b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + struct.pack(">i", len(block)) + block


@pytest.mark.parametrize("codec, compress", [
    (records.GZIP, gzip.compress),
    (records.SNAPPY, lambda d: bytes(cramjam.snappy.compress_raw(d))),
    (records.SNAPPY, _xerial),
    (records.LZ4, lambda d: bytes(cramjam.lz4.compress(d))),
    (records.ZSTD, lambda d: bytes(cramjam.zstd.compress(d))),
])
def test_every_kafka_codec_decodes(codec, compress):
    recs = [_rec(5, 7, value=b"x" * 300, headers=[("h", b"v")]), _rec(6, 8)]
    [batch] = records.decode(_compressed(codec, recs, compress))
    assert batch.records == recs
    with pytest.raises(records.Corrupt, match="inflates* past"):
        records.decode(_compressed(codec, recs, compress), max_uncompressed=100)


def test_unknown_codec_and_garbage_compressed_data():
    with pytest.raises(records.Unsupported, match="codec 5"):
        records.decode(_compressed(5, [_rec(0, 1)], lambda d: d))
    with pytest.raises(records.Corrupt, match="do not decompress"):
        records.decode(_compressed(records.ZSTD, [_rec(0, 1)], lambda d: b"not zstd at all"))


def _ext(msg, offset=3, born=1000):
    return MessageExt(msg.topic, msg.body, None, msg.key_list(), dict(msg.properties), "id", None, "b", 0, offset, 0,
                      born, born, 0)


@pytest.mark.parametrize("rec", [
    _rec(3, 1000, b"order-1", b"v", [("color", b"blue"), ("size", b"L")]),     # plain: key and properties
    _rec(3, 1005, b"two words", b"v"),                                         # spaces; another timestamp
    _rec(3, 1000, b"\xff\x00", None, [("bin", b"\x00\xff"), ("n", None)]),     # binary, null value and header
    _rec(3, 1000, None, b"", [("a", b"1"), ("a", b"2"), ("KEYS", b"x"), ("kafka.ts", b"9")]),
])
def test_record_to_message_and_back_is_exact(rec):
    msg = mapping.to_message("T", rec, 1000)
    assert msg.body                                     # a Quiver body is never empty
    assert mapping.to_record(_ext(msg)) == rec


def test_utf8_key_is_a_quiver_key_and_headers_are_properties():
    msg = mapping.to_message("T", _rec(0, 1000, b"order-1", b"v", [("color", b"blue")]), 1000)
    assert msg.keys == ["order-1"] and msg.properties == {"color": "blue"}


def test_quiver_message_reads_as_record():
    m = _ext(mapping.Message("T", b"body", keys=["a", "b"], properties={"region": "eu"}), offset=9, born=42)
    m.properties["UNIQ_KEY"] = "X"
    assert mapping.to_record(m) == Record(9, 42, b"a b", b"body", [("region", b"eu")])


def _produce_frame(version=8):
    buf = io.BytesIO()
    entity_writer(RequestHeader)(buf, RequestHeader(request_api_key=0, request_api_version=version,
                                                    correlation_id=5, client_id="c"))
    body = ProduceRequest(transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=1),
                          topic_data=(TopicProduceData(name="T", partition_data=(
                              PartitionProduceData(index=0, records=records.encode([_rec(0, 1)])),)),))
    entity_writer(ProduceRequest)(buf, body)
    return buf.getvalue()


def test_parse_request_and_build_response_of_any_version():
    req = protocol.parse(_produce_frame())
    assert (req.api_key, req.version, req.correlation_id, req.client_id) == (0, 8, 5, "c")
    assert req.body.topic_data[0].partition_data[0].index == 0
    out = protocol.response_frame(req, protocol.response(req, {"responses": [{"name": "T", "partition_responses": [
        {"index": 0, "error_code": 0, "base_offset": 7}]}]}))
    size, corr = struct.unpack_from(">ii", out)
    assert size == len(out) - 4 and corr == 5


def test_garbled_or_unserved_requests():
    with pytest.raises(protocol.BadRequest):
        protocol.parse(b"\x00\x00")
    with pytest.raises(protocol.BadRequest):
        protocol.parse(_produce_frame()[:-3])
    unserved = protocol.parse(struct.pack(">hhih", 0, 99, 6, -1))
    assert unserved.body is None
    assert struct.unpack_from(">ih", protocol.unsupported(unserved), 4) == (6, protocol.UNSUPPORTED_VERSION)
    versions = protocol.unsupported(protocol.parse(struct.pack(">hhih", 18, 99, 7, -1)))
    assert struct.unpack_from(">ih", versions, 4) == (7, protocol.UNSUPPORTED_VERSION)


def test_every_served_version_has_kio_types():
    from kio.index import load_request_schema, load_response_schema
    for key, (lo, hi) in protocol.SUPPORTED.items():
        for version in range(lo, hi + 1):
            assert load_request_schema(key, version) and load_response_schema(key, version), (key, version)
