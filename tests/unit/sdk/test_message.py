"""Ids, tag hashes, validation rules and tag expressions."""

import pytest

from quiver.wire import tags
from quiver.errors import MessageIllegalError, NoPermissionError, PropertiesSizeExceededError
from quiver.client.message import (UniqueIdMaker, host_bytes, java_hash, offset_msg_id, parse_offset_msg_id, tag_hash)
from quiver.wire.validation import check_body, check_properties_size, check_topic


def test_java_hash_matches_java_string_hashcode():
    assert java_hash("") == 0
    assert java_hash("TagA") == 2598919
    assert java_hash("hello world") == 1794106052
    assert java_hash("polygenelubricants") == -2147483648
    assert java_hash("ü") == 252 and tag_hash(None) == 0 and tag_hash("TagA") == 2598919


def test_offset_msg_id_round_trip():
    mid = offset_msg_id(host_bytes("127.0.0.1", 10911), 123456789)
    assert len(mid) == 32 and mid == mid.upper()
    assert parse_offset_msg_id(mid) == ("127.0.0.1:10911", 123456789)
    with pytest.raises(ValueError):
        parse_offset_msg_id("zz")


def test_unique_ids_are_unique_and_32_hex():
    maker = UniqueIdMaker()
    ids = {maker.next() for _ in range(10000)}
    assert len(ids) == 10000 and all(len(i) == 32 for i in ids)
    int(next(iter(ids)), 16)


@pytest.mark.parametrize("topic", ["", "   ", "has space", "semi;colon", "ü", "a" * 128, None, 5])
def test_illegal_topics(topic):
    with pytest.raises(MessageIllegalError):
        check_topic(topic)


def test_topic_rules():
    check_topic("Orders-2024_%|x")
    check_topic("a" * 127)
    check_topic("%RETRY%" + "g" * 200)
    with pytest.raises(NoPermissionError):
        check_topic("SCHEDULE_TOPIC_XXXX", for_send=True)
    with pytest.raises(NoPermissionError):
        check_topic("rmq_sys_anything", for_create=True)


def test_body_and_property_limits():
    with pytest.raises(MessageIllegalError, match="empty"):
        check_body(b"")
    with pytest.raises(MessageIllegalError, match="limit"):
        check_body(b"x" * 11, max_bytes=10)
    with pytest.raises(MessageIllegalError, match="bytes"):
        check_body("text")
    check_properties_size(32767)
    with pytest.raises(PropertiesSizeExceededError):
        check_properties_size(32768)


def test_tag_expressions():
    assert tags.parse("*") is None and tags.parse("") is None and tags.parse(None) is None
    assert tags.parse(" TagA || TagB ||") == {"TagA", "TagB"}
    assert tags.hashes("TagA") == {2598919}
