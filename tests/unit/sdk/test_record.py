"""CommitLog record codec: RocketMQ's field order, CRC, v1/v2 topic length."""

import ast
import pathlib

import pytest

from quiver.wire import record, record_checks
from quiver.wire.properties import TAGS, index_fields
from quiver.wire.property_string import format_properties, get_property, parse_properties
from quiver.client.message import host_bytes

HOST = host_bytes("127.0.0.1", 10911)
SDK = pathlib.Path(__file__).resolve().parents[3] / "sdk" / "quiver"


def _rec(body=b"hello", topic="Orders", props="TAGS\x01A\x02"):
    return record.encode(body, topic=topic.encode(), props=props.encode(), queue_id=3, flag=7, queue_offset=11,
                         phys_offset=4096, born_ts=1000, born_host=HOST, store_ts=2000, store_host=HOST, reconsume=2)


def test_round_trip_fields_in_rocketmq_order():
    raw = _rec()
    assert len(raw) == 91 + 5 + 6 + len("TAGS\x01A\x02")   # RocketMQ: 91 + body + topic + props
    rec = record.decode_at(raw, check_crc=True)
    assert (rec.queue_id, rec.flag, rec.queue_offset, rec.phys_offset) == (3, 7, 11, 4096)
    assert (rec.born_ts, rec.store_ts, rec.reconsume, rec.body, rec.topic) == (1000, 2000, 2, b"hello", "Orders")
    assert rec.properties() == {"TAGS": "A"}
    assert rec.body_crc == record.crc(b"hello") and rec.body_crc <= 0x7FFFFFFF


def test_non_ascii_topic_props_and_long_topic_uses_v2_magic():
    long_topic = "t" * 200
    raw = record.encode(b"\x00\xff", topic=long_topic.encode(), props="名前\x01値\x02".encode(), born_host=HOST,
                        store_host=HOST)
    assert record.peek(raw, 0)[1] == record.MAGIC_V2
    rec = record.decode_at(raw)
    assert rec.topic == long_topic and rec.properties() == {"名前": "値"}
    assert len(raw) == record.record_size(2, 200, len("名前\x01値\x02".encode()))


def test_max_size_body_round_trip():
    body = b"\xab" * (4 * 1024 * 1024)
    assert record.decode_at(_rec(body), check_crc=True).body == body


def test_decode_many_skips_blank_filler():
    raw = _rec(b"a") + _rec(b"b") + record.blank(64)
    assert [r.body for r in record.decode_many(raw)] == [b"a", b"b"]


@pytest.mark.parametrize("mutate", [
    lambda raw: raw[:-1],                                   # torn tail
    lambda raw: raw[:50],                                   # torn header
    lambda raw: b"\x00\x00\x00\x10" + raw[4:],              # size lies
    lambda raw: raw[:4] + b"\xde\xad\xbe\xef" + raw[8:],    # bad magic
])
def test_corrupt_records_raise_bad_record(mutate):
    with pytest.raises(record.BadRecord):
        record.decode_at(mutate(_rec()), check_crc=True)


def test_flipped_body_byte_fails_crc_only_when_checked():
    raw = bytearray(_rec(b"payload"))
    raw[record.FIXED_SIZE] ^= 0xFF
    record.decode_at(bytes(raw))                   # structure still fine
    with pytest.raises(record.BadRecord, match="CRC"):
        record.decode_at(bytes(raw), check_crc=True)


def test_properties_helpers():
    props = {"a": "1", "UNIQ_KEY": "X", "k": ""}
    s = format_properties(props)
    assert parse_properties(s) == props
    assert get_property(s, "a") == "1" and get_property(s, "UNIQ_KEY") == "X"
    assert get_property(s, "k") == "" and get_property(s, "missing") is None
    assert get_property("xa\x01no\x02a\x01yes\x02", "a") == "yes"
    assert parse_properties("") == {}


def test_decode_fields_matches_decode_at_and_rejects_damage():
    raw = _rec(b"a", "T1", "UNIQ_KEY\x01X\x02") + record.blank(16) + _rec(b"bb", "t" * 200, "")
    fields = record.decode_fields(raw)
    assert [(f.topic, f.body, f.props) for f in fields] == [("T1", b"a", "UNIQ_KEY\x01X\x02"), ("t" * 200, b"bb", "")]
    first = record.decode_at(raw)
    assert all(type(f) is record.Fields for f in fields)
    assert {name: getattr(first, name) for name in record.Fields._fields} == fields[0]._asdict()
    for broken in (raw[:-1], raw[:40], b"\x00" * 100):
        with pytest.raises(record.BadRecord):
            record.decode_fields(broken)


def test_decode_messages_builds_message_ext_with_lazy_offset_id():
    from quiver.client.message import decode_messages, offset_msg_id
    msgs = decode_messages(_rec(b"x", "Orders", "TAGS\x01A\x02KEYS\x01k1 k2\x02"), "broker-a")
    m = msgs[0]
    assert (m.topic, m.body, m.tags, m.keys, m.broker, m.queue_id) == ("Orders", b"x", "A", ["k1", "k2"], "broker-a", 3)
    assert m.offset_msg_id == offset_msg_id(HOST, 4096) == m.msg_id   # no UNIQ_KEY: the offset id


def test_decode_messages_takes_each_field_from_its_place():
    """decode_messages unpacks record.Fields in order: every field distinct, so a swap shows."""
    from quiver.client.message import MessageExt, decode_messages
    raw = record.encode(b"body", topic=b"T", props=b"TAGS\x01A\x02UNIQ_KEY\x01u\x02", queue_id=3, flag=5,
                        queue_offset=7, phys_offset=11, sys_flag=13, born_ts=17, born_host=HOST, store_ts=19,
                        store_host=b"\x0a\x00\x00\x02\x00\x00\x00\x17", reconsume=23, prepared_offset=29, body_crc=31)
    assert decode_messages(raw, "b") == [MessageExt.from_record(record.decode_at(raw), "b")]


def test_named_positions_match_rocketmq_layout():
    # the diagram in record.py's docstring, which is RocketMQ's CommitLog layout
    assert (record.QUEUE_OFFSET_AT, record.STORE_TS_AT, record.BODY_LEN_AT, record.FIXED_SIZE) == (20, 56, 84, 88)
    raw = _rec()
    assert record.queue_offset_at(raw, 0) == 11
    assert record.store_ts_of(raw[:record.STORE_TS_AT + 8]) == 2000


def test_encode_record_gives_back_the_stored_bytes():
    raw = _rec(b"again", props="KEYS\x01a b\x02")
    assert record.encode_record(record.decode_at(raw)) == raw


@pytest.mark.parametrize("buf, room, problem", [
    (b"\x00\x00", None, "torn"),
    (b"\x00\x00\x00\x40\xde\xad\xbe\xef" + bytes(56), None, "magic"),
    (_rec()[:4] + _rec()[4:], 50, "out of range"),
    (b"\x00\x00\x00\x04" + (record.MAGIC_BLANK).to_bytes(4, "big"), None, "BLANK"),
])
def test_check_head_refuses_what_no_reader_should_walk(buf, room, problem):
    with pytest.raises(record.BadRecord, match=problem):
        record.check_head(buf, 0, room)


def test_check_head_sizes_records_and_fillers():
    assert record.check_head(_rec()) == (len(_rec()), False)
    assert record.check_head(record.blank(64)) == (64, True)


def test_index_fields_reads_tag_uniq_and_keys_in_one_pass():
    props = format_properties({"KEYS": "k1  k2", "TAGS": "A", "UNIQ_KEY": "U", "XTAGS": "no"})
    assert index_fields(props) == ("A", "U", ["k1", "k2"])
    assert index_fields("") == (None, None, [])
    # a name that merely ends like an indexed one is not it
    assert index_fields(format_properties({"MYTAGS": "x"})) == (None, None, [])


def test_properties_at_skips_the_body_and_checks_lengths():
    raw = _rec(b"x" * 1000, props="TAGS\x01A\x02")
    assert record.properties_at(raw + _rec(), 0) == (len(raw), {"TAGS": "A"})
    with pytest.raises(record.BadRecord):
        record.properties_at(raw[:-1], 0)


def _head(topic=b"T", first_qoff=0, phys=0):
    return record.RunHead(topic, queue_id=0, first_qoff=first_qoff, phys=phys, sys_flag=0, born_ts=1,
                          born_host=HOST, store_ts=2, store_host=HOST)


def _run(n=4, topic=b"T", base=1000):
    bodies = [bytes([i]) * (50 + i) for i in range(n)]
    props = [format_properties({"TAGS": "a", "UNIQ_KEY": f"u{i}"}).encode() for i in range(n)]
    data, offs, sizes = record.encode_run(_head(topic, phys=base), bodies, [0] * n, props)
    return bytearray(data), list(zip(offs, sizes))


def test_check_run_passes_intact_records_with_gaps_and_v2_topics():
    buf, spans = _run()
    assert record_checks.check_run(bytes(buf), spans, 1000) == []
    assert record_checks.check_run(bytes(buf), spans[1::2], 1000) == []  # a filtered pull: gaps between
    long_buf, long_spans = _run(topic=b"L" * 200)
    assert record_checks.check_run(bytes(long_buf), long_spans, 1000) == []
    assert record_checks.check_run(b"", [], 0) == []


@pytest.mark.parametrize("where, why", [
    (record.FIXED_SIZE + 3, "body CRC mismatch"),                       # a body byte
    (0, "size field"),                                                  # TOTALSIZE
    (4, "bad magic"),                                                   # MAGICCODE
    (record.AT["phys_offset"] + 7, "PHYSICALOFFSET"),
    (record.AT["body_crc"], "body CRC mismatch"),
    (-2, "lengths do not match"),                                       # PROPLEN (before the properties)
])
def test_check_run_names_each_damaged_record(where, why):
    buf, spans = _run()
    phys, size = spans[2]
    plen = len(format_properties({"TAGS": "a", "UNIQ_KEY": "u2"}).encode())
    at = phys - 1000 + (where if where >= 0 else size - plen + where)
    buf[at] ^= 0x40
    bad = record_checks.check_run(bytes(buf), spans, 1000)
    assert [k for k, _ in bad] == [2] and why in bad[0][1]


def test_check_run_reports_a_short_read_and_a_span_outside_the_buffer():
    buf, spans = _run()
    bad = record_checks.check_run(bytes(buf[:-10]), spans, 1000)
    assert [k for k, _ in bad] == [3] and "not readable" in bad[0][1]
    assert [k for k, _ in record_checks.check_run(bytes(buf), [(999, 100)], 1000)] == [0]


def test_prop_crc_is_rocketmqs_property_over_the_whole_record():
    rec = record.encode(b"body", topic=b"T", props=b"TAGS\x01a\x02", queue_offset=5, phys_offset=1000, born_ts=1,
                        born_host=HOST, store_ts=2, store_host=HOST, prop_crc=True)
    assert rec.endswith(b"\x02") and rec[-20:-11] == b"__CRC32#\x01"
    c = record.crc(rec[:-20])
    assert rec[-11:-1] == str(c)[::-1].ljust(10, "0").encode()  # ten digits, least significant first
    r = record.decode_at(rec, 0, check_crc=True)
    assert r.sys_flag & record.SYSFLAG_PROP_CRC and r.properties()["__CRC32#"]
    assert record.strip_prop_crc(r.props.encode()) == b"TAGS\x01a\x02"
    assert record.strip_prop_crc(b"TAGS\x01a\x02") == b"TAGS\x01a\x02"
    data, offs, sizes = record.encode_run(_head(first_qoff=5, phys=1000), [b"body"], [0], [b"TAGS\x01a\x02"],
                                          prop_crc=True)
    assert data == rec and sizes == [len(rec)] == [record.record_size(4, 1, 7, prop_crc=True)]


def test_prop_crc_catches_a_flipped_property_byte_the_body_crc_cannot():
    props = [format_properties({"TAGS": "a", "KEYS": f"k{i}"}).encode() for i in range(3)]
    data, offs, sizes = record.encode_run(_head(), [b"x" * 30] * 3, [0] * 3, props, prop_crc=True)
    spans = list(zip(offs, sizes))
    assert record_checks.check_run(data, spans, 0) == []
    buf = bytearray(data)
    buf[offs[1] + sizes[1] - 25] ^= 0x20          # inside KEYS' value
    assert record_checks.check_run(bytes(buf), spans, 0) == [(1, "record CRC (__CRC32#) mismatch")]
    with pytest.raises(record.BadRecord):
        record.decode_at(bytes(buf), offs[1], check_crc=True)
    plain, offs2, sizes2 = record.encode_run(_head(), [b"x" * 30] * 3, [0] * 3, props)
    buf = bytearray(plain)
    buf[offs2[1] + sizes2[1] - 5] ^= 0x20
    assert record_checks.check_run(bytes(buf), list(zip(offs2, sizes2)), 0) == []  # without it: not detectable


def test_format_properties_takes_a_map_or_pairs_and_parse_properties_reads_it_back():
    pairs = ((TAGS, "a"), ("REAL_QID", 3), ("ü", "ß"))
    s = format_properties(pairs)
    assert s == "TAGS\x01a\x02REAL_QID\x013\x02ü\x01ß\x02"
    assert format_properties(dict(pairs)) == s and format_properties({}) == ""
    assert parse_properties(s) == {"TAGS": "a", "REAL_QID": "3", "ü": "ß"}


def _wire_imports(name: str) -> set[str]:
    tree = ast.parse((SDK / "wire" / f"{name}.py").read_text())
    return {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module} | \
        {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}


def test_the_properties_string_module_needs_no_record_and_property_names_no_codec():
    assert {m for m in _wire_imports("property_string") if m.startswith("quiver")} == {"quiver.wire.speedups"}
    assert not {m for m in _wire_imports("properties") if "record" in m}


def test_no_code_but_property_string_writes_a_separator_itself():
    """The separators are written in one module: elsewhere a properties string is built by
    format_properties and searched with NAME_SEP/PROP_SEP, never with \\x01 or \\x02 typed in."""
    found = []
    for top in ("sdk", "services"):
        for path in sorted((SDK.parents[1] / top).rglob("*.py")):
            if path.name == "property_string.py" and path.parent.name == "wire":
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                        ("\x01" in node.value or "\x02" in node.value):
                    found.append(f"{path.relative_to(SDK.parents[1])}:{node.lineno}")
    assert found == []


def test_a_producer_builds_its_properties_string_with_format_properties():
    from quiver.client.message import Message, UniqueIdMaker
    from quiver.client.producer import Producer
    p = Producer.__new__(Producer)   # _encode needs no connection
    p._valid_topics, p.max_message_bytes, p._traced, p._ids = set(), 1 << 20, True, UniqueIdMaker()
    msg_id, props = p._encode(Message("T", b"x", tags="t", keys=["a", "b"], delay_level=2, properties={"k": "v"}))
    assert props == format_properties({"UNIQ_KEY": msg_id, "TAGS": "t", "KEYS": "a b", "DELAY": 2, "k": "v",
                                              "TRACE_ON": "true"})


def test_salvage_head_reads_a_damaged_records_queue_by_name():
    raw = bytearray(record.encode(b"body", topic=b"Orders", queue_id=3, queue_offset=7, phys_offset=500, sys_flag=8))
    raw[record.FIXED_SIZE] ^= 0xFF                                    # the body no longer matches its CRC
    raw[0:4] = (10**6).to_bytes(4, "big")                             # nor the size its bytes
    head = record_checks.salvage_head(bytes(raw), 500)
    assert head == ("Orders", 3, 7, 8) and (head.topic, head.queue_id, head.queue_offset, head.sys_flag) == head
    assert record_checks.salvage_head(bytes(raw), 501) is None        # PHYSICALOFFSET is not where it was read
    assert record_checks.salvage_head(bytes(raw[:40]), 500) is None
