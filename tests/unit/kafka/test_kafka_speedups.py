"""The Fetch path's compiled twins (kafka_records, kafka_pulled in _speedups.c) against their
Python references: the same bytes and counts on generated rows and pull answers, or a decline."""

import random

import pytest

from quiver.wire import record, speedups
from quiver.wire.properties import KEYS
from quiver.wire.property_string import format_properties
from quiver_kafka import mapping, records

needs_c = pytest.mark.skipif(not speedups.ACTIVE, reason=speedups.REASON or "no compiled twins")


def _bytes(rnd: random.Random, n: int) -> bytes | None:
    return None if n < 0 else rnd.randbytes(n)


def _rows(rnd: random.Random) -> list[tuple]:
    base, base_ts = rnd.choice([0, 5, 1 << 40, (1 << 63) - 100]), rnd.choice([0, 1_700_000_000_000, -1])
    return [(base + i * rnd.choice([1, 100, 10_000]), base_ts + rnd.choice([0, 1, -5, 1 << 40]),
             _bytes(rnd, rnd.choice([-1, 0, 5, 9000])), _bytes(rnd, rnd.choice([-1, 0, 1024, 20_000])),
             [(rnd.choice(["a", "é", "", "x" * 200]), _bytes(rnd, rnd.choice([-1, 0, 300])))
              for _ in range(rnd.choice([0, 1, 3]))])
            for i in range(rnd.randint(1, 6))]


@needs_c
def test_kafka_records_lays_out_rows_as_its_reference():
    rnd = random.Random(7)
    for _ in range(400):
        rows, room = _rows(rnd), rnd.choice([1 << 40, 0, -100, 3000, 30_000])
        assert records.kafka_records(rows, room, 61) == records.kafka_records.reference(rows, room, 61)


@needs_c
def test_kafka_records_declines_what_it_does_not_know_and_the_reference_raises():
    from quiver import _speedups
    for rows, exc in (([(0, 0, "str key", b"v", [])], TypeError),
                      ([(0, 0, None, b"v", [("\udc80", b"x")])], UnicodeEncodeError),
                      ([(0, 0, None, b"v", [("a", "str value")])], TypeError)):
        assert _speedups.kafka_records(rows, 1 << 30, 0) is NotImplemented
        with pytest.raises(exc):
            records.encode_rows(rows)


def _props(rnd: random.Random) -> dict:
    props = {"UNIQ_KEY": f"ID{rnd.randrange(1000)}"}
    for _ in range(rnd.choice([0, 0, 1, 3])):
        props[rnd.choice(["region", "TAGS", "n", "a" * 40, "CLUSTER", "ünï"])] = rnd.choice(["eu", "", "x" * 300, "é"])
    if rnd.random() < 0.5:
        props[KEYS] = rnd.choice(["k1", "a b", ""])
    if rnd.random() < 0.05:
        props["kafka.ts"] = rnd.choice(["12", "1x", ""])
    if rnd.random() < 0.05:
        props["kafka.seq"] = "7,0,3,5"
    return props


def _stored(rnd: random.Random, first: int) -> bytes:
    """A pull answer's body: records as the broker stores them, some with the store's __CRC32# property."""
    out = b""
    for i in range(rnd.randint(0, 8)):
        props = format_properties(_props(rnd))
        if rnd.random() < 0.2:
            props += "__CRC32#\x01" + "1234567890" + "\x02"
        out += record.encode(_bytes(rnd, rnd.choice([0, 10, 1024])), topic=b"T", props=props.encode(),
                             queue_offset=first + i, born_ts=rnd.choice([1000, 1000 + i, 5]))
    return out


@needs_c
def test_kafka_pulled_reads_pull_answers_as_its_reference():
    rnd = random.Random(11)
    args = (mapping.NOT_HEADERS, KEYS)
    from quiver import _speedups
    compiled = 0
    for _ in range(600):
        body, offset = _stored(rnd, 10), rnd.choice([0, 10, 12, 30])
        room = rnd.choice([1 << 30, 0, 2000])
        got = _speedups.kafka_pulled(body, offset, room, 61, *args)
        want = mapping.kafka_pulled.reference(body, offset, room, 61, *args)
        if got is not NotImplemented:
            assert got == want
            compiled += got[1] > 0
    assert compiled > 100   # the ASCII ones are read by the twin, not declined


@needs_c
def test_kafka_pulled_reads_the_gateways_own_timestamp_and_declines_its_other_properties():
    """What a Kafka producer's batch stores: each record after the first with kafka.ts (its own
    time), an idempotent batch's first with kafka.seq (not a header), read by the twin;
    kafka.key / kafka.value / kafka.headers are left to the reference."""
    from quiver import _speedups
    args = (mapping.NOT_HEADERS, KEYS)
    body = b"".join(record.encode(b"v" * 100, topic=b"T", queue_offset=i, born_ts=1000,
                                  props=format_properties({"UNIQ_KEY": f"ID{i}", **({"kafka.ts": str(1000 + 3 * i)}
                                                                                    if i else {"kafka.seq": "7,0,0,5"})}).encode())
                    for i in range(5))
    got = _speedups.kafka_pulled(body, 0, 1 << 20, 61, *args)
    assert got is not NotImplemented and got == mapping.kafka_pulled.reference(body, 0, 1 << 20, 61, *args)
    assert got[3:] == (1000, 4, 1012)   # base timestamp, last offset, max timestamp: kafka.ts taken
    for props in ({"kafka.key": "AA=="}, {"kafka.value": "null"}, {"kafka.ts": "1x"}, {"kafka.ts": "9" * 19}):
        one = record.encode(b"v", topic=b"T", queue_offset=0, born_ts=1, props=format_properties(props).encode())
        assert _speedups.kafka_pulled(one, 0, 1 << 20, 61, *args) is NotImplemented


@needs_c
def test_kafka_pulled_declines_a_body_it_cannot_walk_and_the_reference_says_why():
    body = record.encode(b"v", topic=b"T", props=b"UNIQ_KEY\x01a\x02", queue_offset=0, born_ts=1)
    from quiver import _speedups
    assert _speedups.kafka_pulled(body[:-3], 0, 1 << 20, 0, mapping.NOT_HEADERS, KEYS) is NotImplemented
    with pytest.raises(Exception):
        mapping.kafka_pulled(body[:-3], 0, 1 << 20, 0, mapping.NOT_HEADERS, KEYS)


def test_pulled_batch_is_the_batch_of_pulled_rows():
    rnd = random.Random(3)
    for _ in range(50):
        body = _stored(rnd, 0)
        rows = mapping.pulled_rows(record.decode_fields(body), 2)
        data, used, last = mapping.pulled_batch(body, 2, 1 << 20)
        assert (bytes(data), used) == ((bytes(records.encode_rows(rows)[0]), len(rows)) if rows else (b"", 0))
        assert last == (rows[-1][0] if rows else -1)
