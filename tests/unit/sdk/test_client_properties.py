"""Consumers never see the store's __CRC32# property (RocketMQ's MessageDecoder drops PROPERTY_CRC32)."""

import pytest

from quiver.client.message import MessageExt, decode_messages
from quiver.wire import record
from quiver.wire.property_string import format_properties

HOST = b"\x7f\0\0\x01\0\0\x27\x10"
PROPS = {"TAGS": "a", "KEYS": "k1 k2", "UNIQ_KEY": "U1", "user": "välue ✓", "empty": ""}


def stored(props: dict, prop_crc: bool, phys: int = 0) -> bytes:
    return record.encode(b"body", topic=b"T", props=format_properties(props).encode(), queue_id=1, queue_offset=3,
                         phys_offset=phys, born_ts=1, born_host=HOST, store_ts=2, store_host=HOST, prop_crc=prop_crc)


@pytest.mark.parametrize("prop_crc", [True, False])
def test_pulled_messages_and_admin_views_hide_the_crc_property(prop_crc):
    raw = stored(PROPS, prop_crc)
    assert (b"__CRC32#" in raw) is prop_crc
    (m,) = decode_messages(raw, "b")                                     # the consumers' hot path
    assert m.properties == PROPS and m.tags == "a" and m.keys == ["k1", "k2"] and m.msg_id == "U1"
    view = MessageExt.from_record(record.decode_at(raw), "b")                  # Admin.view_message / query
    assert view.properties == PROPS
    # the stored record itself keeps it: the broker checks it and strips it on a re-put
    assert ("__CRC32#" in record.decode_at(raw).properties()) is prop_crc


def test_a_batch_mixing_records_with_and_without_it():
    a, b = stored(PROPS, True), stored({"TAGS": "b"}, False, 0)
    msgs = decode_messages(a + b, "b")
    assert [m.properties for m in msgs] == [PROPS, {"TAGS": "b"}]


def test_a_stale_crc_property_without_the_sysflag_is_hidden_too():
    # a record re-put by a broker whose --append-prop-crc went off keeps the old property text
    props = format_properties(PROPS) + "__CRC32#\x011234567890\x02"
    raw = record.encode(b"x", topic=b"T", props=props.encode(), born_ts=1, born_host=HOST, store_ts=2,
                        store_host=HOST)
    (m,) = decode_messages(raw, "b")
    assert m.properties == PROPS


def test_strip_and_client_properties_on_edge_inputs():
    crc = "__CRC32#\x010000000001\x02"
    assert record.client_properties("") == {}
    assert record.client_properties(crc) == {}
    assert record.strip_prop_crc(crc) == "" and record.strip_prop_crc(crc.encode()) == b""
    assert record.strip_prop_crc("a\x01b\x02" + crc) == "a\x01b\x02"
    assert record.strip_prop_crc("a\x01b\x02") == "a\x01b\x02"           # nothing to strip
    assert record.strip_prop_crc("x") == "x" and record.strip_prop_crc(b"") == b""
    # only the trailing, well-formed one goes: a user property of that name elsewhere is data
    assert record.client_properties("__CRC32#\x01v\x02a\x01b\x02") == {"__CRC32#": "v", "a": "b"}
