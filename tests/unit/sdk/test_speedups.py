"""quiver._speedups against the Python references it stands in for.

Each compiled twin must either return exactly what its reference returns or return
NotImplemented (the reference then runs): checked on generated inputs, well-formed and
hostile (truncated, flipped bytes, bad magic, lengths and counts out of range, bad UTF-8,
lone surrogates, values past struct ranges). The selected function must then behave as
the reference does, exceptions included. The extension must be built in this venv: a
broken build fails here, not silently slower. CI also runs the unit tests once with
QUIVER_NO_SPEEDUPS=1 (.ci/run), which this file checks too.
"""

import os
import struct
import typing
import zlib

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from quiver.client import message
from quiver.wire import record, record_checks, speedups
from quiver.wire.property_string import parse_properties
from quiver_broker import consume_queue, index_file, queue_entries

try:  # built even when QUIVER_NO_SPEEDUPS turns it off: the twins are tested either way
    from quiver import _speedups as C
except ImportError:
    C = None
FORCED_OFF = os.environ.get("QUIVER_NO_SPEEDUPS", "") not in ("", "0")
if C is not None and FORCED_OFF:
    speedups.hand_over(C)   # no twin runs in this process, the owners' layouts went nowhere
FUZZ = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
HOST = b"\x7f\x00\x00\x01\x00\x00\x2a\x9f"
I32 = st.integers(-(2**31), 2**31 - 1)
WIDE = st.one_of(I32, st.integers(-(2**70), 2**70))  # in and past struct's 'i' / 'q'
TWINS = {"encode_run": record.encode_run, "check_run": record_checks.check_run, "decode_fields": record.decode_fields,
         "settled_run": record_checks.settled_run,
         "parse_properties": parse_properties, "java_hash": message.java_hash,
         "index_run": queue_entries.index_run, "pack_entries": consume_queue.pack_entries,
         "put_entries": index_file.put_entries}


def test_the_extension_is_built_and_chosen_unless_forced_off():
    if FORCED_OFF:
        assert not speedups.ACTIVE and speedups.IMPLEMENTATION == "python"
        assert "QUIVER_NO_SPEEDUPS" in speedups.REASON
        assert all(f is f.reference for f in TWINS.values())
    else:
        assert speedups.ACTIVE, f"quiver._speedups did not load: {speedups.REASON}"
        assert speedups.IMPLEMENTATION == "c" and speedups.REASON == ""
        assert all(f is not f.reference for f in TWINS.values())


def _c():
    if C is None:
        pytest.skip("quiver._speedups is not built (the test above fails for that)")
    return C


def _outcome(fn, *args):
    try:
        return "ok", fn(*args)
    except Exception as exc:  # noqa: BLE001 - the type and text are what is compared
        return "raised", type(exc), str(exc)


def _same(name, *args):
    """The twin agrees with the reference (or declines), and the selected function
    behaves exactly as the reference; returns whether the twin answered itself."""
    ref = TWINS[name].reference
    want = _outcome(ref, *args)
    got = getattr(_c(), name)(*args)
    if got is not NotImplemented:
        assert want == ("ok", got), f"{name}: the twin answered where the reference says {want}"
    assert _outcome(TWINS[name], *args) == want
    return got is not NotImplemented


def test_the_constants_are_the_records():
    c = _c()
    assert (c.CRC_PROP_BYTES, c.SYSFLAG_PROP_CRC) == (record.CRC_PROP_BYTES, record.SYSFLAG_PROP_CRC)
    assert c.MAGICS == (record.MAGIC_V1, record.MAGIC_V2, record.MAGIC_BLANK)
    assert (c.TX_MASK, c.TX_NOT, c.TX_COMMIT) == (record.TX_MASK, record.TX_NOT, record.TX_COMMIT)


def test_every_layout_was_handed_over_and_taken():
    """The twins' byte positions are the Python tables' (record._LAYOUT, the ConsumeQueue and
    IndexFile entries): each owner handed its table over at import and none was refused."""
    _c()
    assert speedups.REFUSED == {}
    assert speedups.positions(record._LAYOUT) == (record.FIXED_SIZE, tuple(
        (name, record.AT[name], struct.calcsize(">" + fmt)) for name, fmt in record._LAYOUT))


def _handed(name, table, **extra):
    """Hand `table` over as layout `name`, then the owner's again; the error, if refused."""
    try:
        _c().layout(name, *speedups.positions(table), extra)
    except (ValueError, TypeError) as exc:
        return str(exc)
    return None


def _restore():
    speedups.hand_over(_c(), "record", "consume_queue")


def test_the_twins_write_where_the_table_says():
    """Offsets come from the table, not from the C file: with two fields of the record swapped
    and the ConsumeQueue entry reordered, the twins write the new order."""
    table = list(record._LAYOUT)
    i, j = [k for k, (name, _) in enumerate(table) if name in ("born_ts", "store_ts")]
    table[i], table[j] = table[j], table[i]
    try:
        assert _handed("record", tuple(table), run_head=record.RunHead, fields=record.Fields) is None
        head = record.RunHead(b"T", 1, 5, 100, 0, born_ts=111, born_host=HOST, store_ts=222, store_host=HOST)
        data, _, _ = _c().encode_run(head, [b"body"], [0], [b""])
        assert struct.unpack_from(">q", data, record.AT["born_ts"])[0] == 222   # store_ts where born_ts was
        got = _c().decode_fields(data)[0]
        assert (got.born_ts, got.store_ts) == (111, 222) and type(got) is record.Fields
        assert _handed("consume_queue", (("size", "i"), ("tags_code", "q"), ("phys_offset", "q"))) is None
        assert _c().pack_entries([1], [2], [3]) == struct.pack(">iqq", 2, 3, 1)
    finally:
        _restore()
    assert _c().encode_run(head, [b"body"], [0], [b""]) == record.encode_run.reference(head, [b"body"], [0], [b""])


@pytest.mark.parametrize("change", ["a field more", "a field less", "a wider field", "a renamed field",
                                    "a RunHead with a field renamed", "a plain tuple for Fields"])
def test_a_layout_the_twins_cannot_write_is_refused_and_they_decline(change):
    table, extra = list(record._LAYOUT), {"run_head": record.RunHead, "fields": record.Fields}
    if change == "a field more":
        table.append(("extra", "i"))
    elif change == "a field less":
        table.pop(5)
    elif change == "a wider field":
        table[3] = (table[3][0], "q")
    elif change == "a renamed field":
        table[3] = ("queue", table[3][1])
    elif change == "a RunHead with a field renamed":
        extra["run_head"] = typing.NamedTuple("RunHead", [("queue", int), *record.RunHead.__annotations__.items()][:-1])
    else:
        extra["fields"] = tuple
    head = record.RunHead(b"T", 1, 5, 100, 0, 1, HOST, 2, HOST)
    try:
        assert _handed("record", tuple(table), **extra)
        raw = record.encode_run.reference(head, [b"body"], [0], [b""])[0]
        assert _c().encode_run(head, [b"body"], [0], [b""]) is NotImplemented
        assert _c().decode_fields(raw) is NotImplemented and _c().check_run(raw, [(100, len(raw))], 100) is NotImplemented
        assert record.decode_fields(raw) == record.decode_fields.reference(raw)   # the reference runs
    finally:
        _restore()
    assert _c().encode_run(head, [b"body"], [0], [b""]) is not NotImplemented


@FUZZ
@given(st.binary(max_size=2000), st.integers(0, 2**32 - 1))
@example(b"", 0)
@example(b"x" * 4099, 0xFFFFFFFF)
def test_crc32_is_zlibs(data, start):
    assert _c().crc32(data, start) == zlib.crc32(data, start)
    assert _c().crc32(memoryview(data)[1:]) == zlib.crc32(data[1:])


# ---- records ---------------------------------------------------------------------------

text = st.text(st.sampled_from("aZ09 _#é名😀\x01\x02"), max_size=40)
topics = st.one_of(st.binary(min_size=1, max_size=20), st.binary(min_size=120, max_size=140),
                   st.just(b"t" * 70000))


@st.composite
def runs(draw, hostile=True):
    n = draw(st.integers(0, 6))
    bodies = draw(st.lists(st.binary(max_size=300), min_size=n, max_size=n))
    if draw(st.booleans()):
        bodies = [memoryview(bytearray(b)) for b in bodies]  # what the send path hands over
    props = [p.encode() for p in draw(st.lists(text, min_size=n, max_size=n))]
    ints = WIDE if hostile else I32
    flags = draw(st.lists(ints, min_size=n, max_size=n))
    crcs = draw(st.one_of(st.none(), st.lists(ints, min_size=n, max_size=n)))
    if hostile and draw(st.integers(0, 9)) == 0:  # lists of unequal length: zip() stops early
        props = props + [b"extra"]
    first = draw(st.one_of(st.none(), st.integers(0, 2**40), ints))
    host = draw(st.one_of(st.just(HOST), st.binary(max_size=12))) if hostile else HOST
    head = record.RunHead(draw(topics), draw(ints), first, draw(st.integers(0, 2**50)), draw(ints), draw(ints),
                          host, draw(ints), HOST, draw(ints), draw(ints))
    if hostile and draw(st.integers(0, 9)) == 0:   # the same fields, not a RunHead: the reference's business
        head = tuple(head)
    return (head, bodies, flags, props, crcs, draw(st.booleans()) if hostile else False)


@FUZZ
@given(runs())
def test_encode_run_matches(args):
    _same("encode_run", *args)


@FUZZ
@given(runs(hostile=False))
def test_encode_run_answers_well_formed_runs_itself(args):
    if len(args[0].topic) <= 0xFFFF and all(len(p) <= 0xFFFF for p in args[3]):
        assert _same("encode_run", *args)


utf8_topics = st.one_of(st.text(min_size=1, max_size=20).map(str.encode), st.just("名" * 60).map(str.encode))


def _records(draw, prop_crc=False, intact=False):
    n = draw(st.integers(1, 5))
    bodies = draw(st.lists(st.binary(max_size=200), min_size=n, max_size=n))
    props = [p.encode() for p in draw(st.lists(text, min_size=n, max_size=n))]
    base = draw(st.integers(0, 2**40))
    topic = draw(utf8_topics if intact else topics.filter(lambda t: len(t) < 300))
    head = record.RunHead(topic, 1, 5, base, 0, born_ts=1, born_host=HOST, store_ts=2, store_host=HOST)
    data, offs, sizes = record.encode_run.reference(head, bodies, [0] * n, props, None, prop_crc)
    return data, list(zip(offs, sizes)), base


def _damage(draw, data: bytes) -> bytes:
    buf = bytearray(data)
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["flip", "cut", "field", "blank", "append"]))
        if not buf:
            break
        at = draw(st.integers(0, len(buf) - 1))
        if kind == "flip":
            buf[at] ^= draw(st.integers(1, 255))
        elif kind == "cut":
            del buf[at:]
        elif kind == "field":  # a size, magic or length field set to anything
            field = draw(st.sampled_from([0, 4, record.AT["phys_offset"], record.BODY_LEN_AT]))
            value = draw(st.sampled_from([0, 1, 7, 8, 90, 91, 2**31 - 1, -1, -(2**31), record.MAGIC_BLANK]))
            buf[field:field + 4] = (value & 0xFFFFFFFF).to_bytes(4, "big")
        elif kind == "blank":
            size = draw(st.sampled_from([-5, 0, 3, 7, 8, 88, 200]))
            buf[at:at] = (size & 0xFFFFFFFF).to_bytes(4, "big") + record.MAGIC_BLANK.to_bytes(4, "big") + bytes(88)
        else:
            buf += draw(st.binary(max_size=100))
    return bytes(buf)


@FUZZ
@given(st.data())
def test_decode_fields_matches(data):
    raw, _, _ = _records(data.draw)
    buf = _damage(data.draw, raw)
    _same("decode_fields", buf)
    _same("decode_fields", memoryview(buf))


@pytest.mark.parametrize("buf", [
    b"\x00" * 87, b"\x00" * 88, b"\xff" * 200,
    (0).to_bytes(4, "big") + record.MAGIC_BLANK.to_bytes(4, "big") + bytes(88),        # a BLANK that never moves on
    (2**31 - 1).to_bytes(4, "big") + record.MAGIC_V1.to_bytes(4, "big") + bytes(200),  # a huge claimed size
    bytes(range(256)) * 4,
])
def test_decode_fields_hostile(buf):
    assert not _same("decode_fields", buf)
    with pytest.raises(record.BadRecord):
        record.decode_fields(buf)


@FUZZ
@given(st.data())
def test_decode_fields_answers_intact_replies_itself(data):
    raw, _, _ = _records(data.draw, intact=True)
    assert _same("decode_fields", raw)
    assert all(type(f) is record.Fields for f in _c().decode_fields(raw))   # not only equal as tuples


def test_decode_fields_refuses_bad_utf8_like_the_reference():
    raw = record.encode(b"b", topic=b"\xff\xfe", props=b"a\x01b\x02", born_host=HOST, store_host=HOST)
    assert not _same("decode_fields", raw)
    raw = record.encode(b"b", topic=b"T", props=b"\xed\xa0\x80", born_host=HOST, store_host=HOST)  # an encoded surrogate
    assert not _same("decode_fields", raw)


@FUZZ
@given(st.data())
def test_check_run_matches(data):
    raw, spans, base = _records(data.draw, prop_crc=data.draw(st.booleans()))
    assert _same("check_run", raw, spans, base)
    buf = _damage(data.draw, raw)
    if data.draw(st.booleans()):
        i = data.draw(st.integers(0, len(spans) - 1))
        shift = data.draw(st.sampled_from([-200, -1, 1, 50, 2**33]))
        spans[i] = (spans[i][0] + shift, spans[i][1]) if data.draw(st.booleans()) else (spans[i][0], spans[i][1] + shift)
    _same("check_run", buf, spans, data.draw(st.sampled_from([base, base + 1, base - 1, 0])))


def test_check_run_prop_crc_digits():
    head = record.RunHead(b"T", 0, 0, 0, 0, 0, HOST, 0, HOST)
    raw, offs, sizes = record.encode_run.reference(head, [b"abc"], [0], [b"a\x01b\x02"], None, True)
    assert _same("check_run", raw, list(zip(offs, sizes)), 0)
    bad = raw[:-2] + b"x\x02"  # a digit that is not one
    assert not _same("check_run", bad, list(zip(offs, sizes)), 0)


@FUZZ
@given(st.data())
def test_settled_run_matches(data):
    raw, spans, base = _records(data.draw, prop_crc=data.draw(st.booleans()))
    draw = data.draw
    t = record.FIXED_SIZE + int.from_bytes(raw[record.BODY_LEN_AT:record.BODY_LEN_AT + 4], "big")
    topic = raw[t + 2:t + 2 + (raw[t] << 8 | raw[t + 1])]   # the first record's (encode_run writes V2)
    topic = topic if draw(st.booleans()) else b"other"
    queue_next = draw(st.sampled_from([{}, {(topic, 1): 5}, {(topic, 1): 6}, {(topic, 1): 2**40},
                                       {(topic, 1): "x"}, {(topic, 1): 2**70}, {(topic, 2): 0}]))
    whole = spans[-1][0] + spans[-1][1]
    assert _same("settled_run", raw, 0, base, whole, base + len(raw), {}) or not _c()
    assert record_checks.settled_run(raw, 0, base, whole, whole, {}) == len(raw)   # intact, nothing queued
    buf = _damage(draw, raw)
    lead = draw(st.sampled_from([b"", b"\0" * 7, bytes(range(40))]))
    _same("settled_run", lead + buf, len(lead), base + draw(st.sampled_from([0, 0, 1, -1])),
          draw(st.sampled_from([whole, whole - 1, base + 100, 2**62])),
          draw(st.sampled_from([base, whole, spans[0][0] + (spans[0][1] if len(spans) > 1 else 0), 2**62])),
          queue_next)


def test_settled_run_stops_at_a_record_its_queue_lacks():
    head = record.RunHead(b"T", 3, 10, 1000, 0, 0, HOST, 0, HOST)
    raw, offs, sizes = record.encode_run.reference(head, [b"a", b"b", b"c"], [0] * 3, [b""] * 3, None, False)
    end = offs[-1] + sizes[-1]
    assert record_checks.settled_run(raw, 0, 1000, end, end, {(b"T", 3): 13}) == len(raw)
    assert record_checks.settled_run(raw, 0, 1000, end, end, {(b"T", 3): 11}) == sizes[0]   # the queue ends at 11
    assert record_checks.settled_run(raw, 0, 1000, end, offs[1], {}) == sizes[0] + sizes[1]  # none starts past offs[1]
    assert record_checks.settled_run(raw, 0, 1000, end - 1, end, {}) == sizes[0] + sizes[1]  # the last ends past end
    flipped = bytearray(raw)
    flipped[offs[1] - 1000 + record.FIXED_SIZE] ^= 1   # the second body: its CRC fails
    assert record_checks.settled_run(bytes(flipped), 0, 1000, end, end, {}) == sizes[0]


# ---- properties, tags, index keys ----------------------------------------------------------

props_text = st.lists(st.sampled_from(["TAGS\x01", "KEYS\x01", "UNIQ_KEY\x01", "\x02", "\x01", " ", "  ", "a",
                                       "TagA", "é", "名", "😀", "\ud800", "k1 k2"]), max_size=12).map("".join)


@FUZZ
@given(props_text)
@example("TAGS\x01A\x02KEYS\x01 a  b \x02UNIQ_KEY\x01u")
@example("\ud800")
def test_parse_properties_matches(s):
    _same("parse_properties", s)


@FUZZ
@given(st.one_of(st.text(max_size=30), props_text))
@example("😀")
@example("\udc00x")
def test_java_hash_matches(s):
    _same("java_hash", s)
    if not any(0xD800 <= ord(ch) <= 0xDFFF for ch in s):
        assert _c().java_hash(s) == message.java_hash.reference(s)


@FUZZ
@given(st.lists(props_text, max_size=8), st.booleans(), st.booleans(), st.integers(0, 2**32 - 1),
       st.sampled_from([-1, 2**32, 2**63, "x", 1]))
def test_index_run_matches(props, want_tags, to_index, prefix, odd):
    offs = [1000 * i for i in range(len(props))]
    answered = _same("index_run", offs, props, prefix, want_tags, to_index)
    assert answered or any(0xD800 <= ord(ch) <= 0xDFFF for p in props for ch in p)
    _same("index_run", offs + [1], props, prefix, want_tags, to_index)   # zip() stops at the shorter
    _same("index_run", offs, props, odd, want_tags, to_index)           # a prefix past 32 bits, or no int
    _same("index_run", offs, props, prefix, odd, to_index)              # truthy, not a bool


@FUZZ
@given(st.lists(st.tuples(WIDE, I32, WIDE), max_size=8))
def test_pack_entries_matches(rows):
    phys, sizes, codes = (list(c) for c in zip(*rows)) if rows else ([], [], [])
    _same("pack_entries", phys, sizes, codes)
    _same("pack_entries", phys, sizes[:-1], codes)


@FUZZ
@given(st.lists(st.tuples(st.one_of(st.integers(0, 2**31 - 1), WIDE), st.one_of(st.integers(0, 2**40), WIDE)),
                max_size=10),
       st.integers(-30, 12), st.integers(-1, 16), st.sampled_from([0, 40, 80, 100, 360, -20, 10**6]),
       st.integers(-5, 2**31), st.integers(200, 600))
def test_put_entries_matches(items, n, slots, entries_at, diff, size):
    seed = bytes((i * 37) & 0xFF for i in range(size))
    mm_ref, mm_c = bytearray(seed), bytearray(seed)
    ref = _outcome(index_file.put_entries.reference, mm_ref, items, n, slots, entries_at, diff)
    got = _c().put_entries(mm_c, items, n, slots, entries_at, diff)
    if got is NotImplemented:
        assert mm_c == seed  # declined before the first store
    else:
        assert ("ok", got) == ref and mm_c == mm_ref
    mm_sel = bytearray(seed)
    assert _outcome(index_file.put_entries, mm_sel, items, n, slots, entries_at, diff) == ref and mm_sel == mm_ref


def test_put_entries_answers_a_real_index_file_itself(tmp_path):
    f = index_file.IndexFile(str(tmp_path / "idx"), 64, 256)
    try:
        keys = [(index_file.key_hash(index_file.prefix_crc("T"), f"k{i}"), 100 * i) for i in range(100)]
        mm_copy = bytearray(f.mm)
        assert _c().put_entries(f.mm, keys, f.count, f.slots, f._entries_at, 3) == \
            index_file.put_entries.reference(mm_copy, keys, f.count, f.slots, f._entries_at, 3)
        assert bytes(f.mm) == bytes(mm_copy)
    finally:
        f.close()


def test_either_runs_the_twin_then_the_reference_as_fast_did():
    calls = []

    def reference(a, b=0):
        """the doc"""
        calls.append(("reference", a, b))
        return "reference"

    def twin(a, b=0):
        calls.append(("twin", a, b))
        if a == "boom":
            raise ValueError("the twin's own error")
        return NotImplemented if a == "decline" else "twin"

    f = _c().Either(twin, reference)
    assert f("x") == "twin" and f("decline", 2) == "reference"
    assert f("x", b=3) == "reference"                        # keywords: the reference alone
    with pytest.raises(ValueError, match="twin's own"):
        f("boom")
    assert calls == [("twin", "x", 0), ("twin", "decline", 2), ("reference", "decline", 2),
                     ("reference", "x", 3), ("twin", "boom", 0)]

    class Holder:
        method = f
    assert Holder().method() == "twin" and Holder.method is f  # binds as a function does
    with pytest.raises(TypeError):
        _c().Either(twin)
    if speedups.ACTIVE:
        wrapped = record.encode_run
        assert type(wrapped) is _c().Either and wrapped.__name__ == "encode_run"
        assert wrapped.__doc__ == wrapped.reference.__doc__ and wrapped.__wrapped__ is wrapped.reference
        assert "compiled twin of <function encode_run" in repr(wrapped)
