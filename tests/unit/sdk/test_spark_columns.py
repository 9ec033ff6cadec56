"""The Spark source's column building (quiver.spark.columns): pull reply bodies -> Arrow batches.

record_columns has a compiled twin (quiver._speedups): it must return exactly what the
Python reference returns or NotImplemented, on well-formed and hostile bodies. to_arrow
is checked against rows built record by record from record.decode_many (the row shape
the source had before it went column-wise), so both paths yield the same DataFrame.
CI runs this file again with QUIVER_NO_SPEEDUPS=1, where record_columns is the reference.
"""

import importlib
import importlib.util

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

pytest.importorskip("pyspark")
pa = pytest.importorskip("pyarrow")

from quiver.wire import tags as tag_expr  # noqa: E402
from quiver.client.message import offset_msg_id  # noqa: E402
from quiver.spark import columns  # noqa: E402
from quiver.wire import record, speedups  # noqa: E402
from quiver.wire.properties import KEYS, TAGS, UNIQ_KEY
from quiver.wire.property_string import NAME_SEP, PROP_SEP, format_properties

C = importlib.util.find_spec("quiver._speedups") and importlib.import_module("quiver._speedups")
if C and not speedups.ACTIVE:
    speedups.hand_over(C)   # QUIVER_NO_SPEEDUPS: the record's layout went to no twin
FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
HOST = b"\x7f\x00\x00\x01\x00\x00\x2a\x9f"

text = st.text(st.sampled_from("aZ09 _#é名😀"), max_size=12)
prop_text = st.text(st.sampled_from("aZ09 _#é名😀\x01\x02"), max_size=30)
NAMES = st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "seq", "k", "é名", ""])


@st.composite
def props(draw) -> str:
    """A properties string: named pairs (repeats allowed), now and then raw text with stray separators."""
    if draw(st.integers(0, 5)) == 0:
        return draw(prop_text)
    pairs = draw(st.lists(st.tuples(NAMES, text), max_size=5))
    return format_properties(dict(pairs)) if draw(st.booleans()) else \
        "".join(f"{k}{NAME_SEP}{v}{PROP_SEP}" for k, v in pairs)


@st.composite
def bodies(draw) -> bytes:
    """A pull reply body: records (v1/v2 topics, __CRC32# or not, any properties), maybe BLANKs."""
    parts = []
    qoff = draw(st.integers(0, 2**40))
    for _ in range(draw(st.integers(0, 6))):
        if draw(st.integers(0, 7)) == 0:
            parts.append(record.blank(draw(st.integers(record.FIXED_SIZE, 120))))   # decode_fields reads 88 bytes first
            continue
        topic = draw(st.sampled_from([b"Orders", "名前".encode(), b"t" * 130]))
        parts.append(record.encode(draw(st.binary(max_size=64)), topic=topic, props=draw(props()).encode(),
                                   queue_id=draw(st.integers(0, 7)), queue_offset=qoff,
                                   phys_offset=draw(st.integers(0, 2**50)), born_ts=draw(st.integers(0, 2**42)),
                                   born_host=HOST, store_ts=draw(st.integers(0, 2**42)), store_host=HOST,
                                   prop_crc=draw(st.booleans())))
        qoff += 1
    return b"".join(parts)


@st.composite
def hostile(draw) -> bytes:
    """A body cut short or with a byte flipped (lengths, magic, UTF-8 of topic or properties)."""
    body = draw(bodies())
    if not body:
        return body
    if draw(st.booleans()):
        return body[:draw(st.integers(0, len(body) - 1))]
    i = draw(st.integers(0, len(body) - 1))
    return body[:i] + bytes([body[i] ^ draw(st.integers(1, 255))]) + body[i + 1:]


def _outcome(fn, *args):
    try:
        return "ok", fn(*args)
    except Exception as exc:  # noqa: BLE001 - the type and text are what is compared
        return "raised", type(exc), str(exc)


def _same(buf) -> bool:
    """The twin agrees with the reference (or declines) and the selected function behaves
    as the reference; returns whether the twin answered itself."""
    if C is None:
        pytest.skip("quiver._speedups is not built (tests/unit/sdk/test_speedups.py fails for that)")
    ref = columns.record_columns.reference
    want = _outcome(ref, buf)
    got = C.record_columns(buf)
    if got is not NotImplemented:
        assert want == ("ok", got)
    assert _outcome(columns.record_columns, buf) == want
    return got is not NotImplemented


def test_the_twin_is_chosen_unless_forced_off():
    f = columns.record_columns
    assert (f is f.reference) == (not speedups.ACTIVE)   # QUIVER_NO_SPEEDUPS=1 or not built


@FUZZ
@given(bodies())
@example(b"")
def test_record_columns_twin_matches_and_answers_every_well_formed_body(buf):
    assert _same(buf)


@FUZZ
@given(hostile())
def test_record_columns_twin_matches_on_hostile_bodies(buf):
    _same(buf)


def test_record_columns_twin_takes_a_memoryview_and_declines_what_is_not_bytes():
    buf = record.encode(b"x", topic=b"T", props=b"TAGS\x01a\x02", queue_id=1, queue_offset=5, born_ts=1,
                        born_host=HOST, store_ts=2, store_host=HOST)
    assert _same(memoryview(buf))
    if C is not None:
        assert C.record_columns("text") is NotImplemented and C.record_columns(buf, 1) is NotImplemented


def _rows_record_by_record(buf, broker):
    """The rows as the source built them before it went column-wise: per record, via dicts."""
    rows = []
    for r in record.decode_many(buf):
        items = [i.partition(NAME_SEP) for i in record.strip_prop_crc(r.props).split(PROP_SEP) if i]
        p = {k: v for k, _, v in items}
        rows.append({"topic": r.topic, "broker": broker, "queue_id": r.queue_id, "queue_offset": r.queue_offset,
                     "msg_id": p.get(UNIQ_KEY) or offset_msg_id(r.store_host, r.phys_offset),
                     "tags": p.get(TAGS), "keys": p[KEYS].split(" ") if p.get(KEYS) else [],
                     "properties": [(k, v) for k, _, v in items], "body": r.body,
                     "born_timestamp": r.born_ts * 1000, "store_timestamp": r.store_ts * 1000})
    return rows


def _pylist(batch):
    rows = batch.to_pylist()
    for row in rows:   # timestamps as epoch microseconds, comparable to the record's milliseconds * 1000
        for k in ("born_timestamp", "store_timestamp"):
            row[k] = round(row[k].timestamp() * 1_000_000)
    return rows


@FUZZ
@given(bodies())
def test_to_arrow_holds_the_rows_of_the_record_by_record_build(buf):
    batch = columns.to_arrow(columns.record_columns(buf), "broker-é")
    assert batch.schema.equals(columns.ARROW_SCHEMA)
    assert _pylist(batch) == _rows_record_by_record(buf, "broker-é")


def test_to_arrow_of_nothing_is_an_empty_batch_of_the_schema():
    batch = columns.to_arrow(columns.record_columns(b""), "b")
    assert batch.num_rows == 0 and batch.schema.equals(columns.ARROW_SCHEMA)


def test_select_keeps_the_offsets_asked_for_and_the_tags_by_string():
    msgs = [(10, "a"), (11, "b"), (12, None), (13, "a"), (14, "c")]
    buf = b"".join(record.encode(b"x", topic=b"T", props=(f"TAGS\x01{t}\x02" if t else "").encode(), queue_offset=q,
                                 phys_offset=100 + q, born_ts=1, born_host=HOST, store_ts=2, store_host=HOST)
                   for q, t in msgs)
    batch = columns.to_arrow(columns.record_columns(buf), "b")
    assert columns.select(batch, 11, 14, None).column("queue_offset").to_pylist() == [11, 12, 13]
    kept = columns.select(batch, 0, 100, tag_expr.parse("a || c"))
    assert kept.column("queue_offset").to_pylist() == [10, 13, 14]
    assert columns.select(batch, 15, 20, None).num_rows == 0
