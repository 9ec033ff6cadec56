"""Wire protocol: round trips and every kind of malformed frame."""

import orjson
import pytest

from quiver.wire import protocol
from quiver.wire.codes import RequestCode, ResponseCode
from quiver.errors import ProtocolError, error_for, MessageIllegalError, QuiverError


def test_request_round_trip_with_bodies():
    frames = protocol.request(RequestCode.SEND_MESSAGE, 7, {"t": "Orders", "m": [[0, "a\x01b\x02"]]}, [b"x" * 10])
    env = protocol.decode(frames)
    assert (env.code, env.id, env.is_reply) == (RequestCode.SEND_MESSAGE, 7, False)
    assert env.ext == {"t": "Orders", "m": [[0, "a\x01b\x02"]]}
    assert env.bodies == [b"x" * 10]


def test_reply_round_trip_non_ascii_and_empty_body():
    frames = protocol.reply(ResponseCode.MESSAGE_ILLEGAL, 9, "sujet illégal ✓ 主题", {"k": "ü"}, [b""])
    env = protocol.decode(frames)
    assert env.is_reply and env.remark == "sujet illégal ✓ 主题"
    assert env.ext == {"k": "ü"} and env.bodies == [b""]


def test_reply_without_ext_and_empty_remark_is_a_reply():
    env = protocol.decode(protocol.reply(0, 1))
    assert env.is_reply and env.remark == "" and env.ext == {} and env.bodies == []


def test_max_size_body_travels_untouched():
    body = bytes(range(256)) * (4 * 1024 * 1024 // 256)
    env = protocol.decode(protocol.request(10, 1, None, [body]))
    assert env.bodies[0] == body


def test_many_body_frames_keep_order():
    bodies = [str(i).encode() for i in range(100)]
    assert protocol.decode(protocol.request(320, 3, {}, bodies)).bodies == bodies


@pytest.mark.parametrize("frames, fragment", [
    ([], "at least 2 frames"),
    ([b"QV1"], "at least 2 frames"),
    ("not a list", "at least 2 frames"),
    ([b"QV9", b"{}"], "unsupported protocol version"),
    ([b"", b"{}"], "unsupported protocol version"),
    ([b"QV1", b"{not json"], "not valid JSON"),
    ([b"QV1", b"\xff\xfe"], "not valid JSON"),
    ([b"QV1", b"[1,2]"], "must be a JSON object"),
    ([b"QV1", b'{"c": "10", "id": 1}'], "integer"),
    ([b"QV1", b'{"c": 10}'], "integer"),
    ([b"QV1", b'{"c": 10, "id": 1.5}'], "integer"),
    ([b"QV1", b'{"c": 10, "id": 1, "ext": [1]}'], '"ext" must be a JSON object'),
    ([b"QV1", b'{"c": 0, "id": 1, "r": 5}'], "remark"),
    ([b"QV1", b" " * (protocol.MAX_HEADER_BYTES + 1)], "exceeds"),
    ([b"QV1", b'{"c": 1, "id": 1}', object()], "frame is not bytes"),
])
def test_malformed_frames_raise_only_protocol_error(frames, fragment):
    with pytest.raises(ProtocolError) as info:
        protocol.decode(frames)
    assert fragment in info.value.remark


def test_version_mismatch_is_marked_and_id_recovered_when_possible():
    with pytest.raises(ProtocolError) as info:
        protocol.decode([b"QV2", b"{}"])
    assert info.value.version_mismatch
    with pytest.raises(ProtocolError) as info:
        protocol.decode([b"QV1", orjson.dumps({"c": "x", "id": 42})])
    assert protocol.request_id_of(info.value) == 42
    with pytest.raises(ProtocolError) as info:
        protocol.decode([b"QV1", b"{}"])
    assert protocol.request_id_of(info.value) == protocol.UNATTRIBUTED_ID


def test_error_for_maps_every_response_code_to_its_class():
    for code in ResponseCode:
        if code == ResponseCode.SUCCESS:
            continue
        exc = error_for(code, "why")
        assert isinstance(exc, QuiverError) and exc.code == code and exc.remark == "why"
    assert isinstance(error_for(ResponseCode.MESSAGE_ILLEGAL), MessageIllegalError)
    unknown = error_for(4242, "odd")
    assert unknown.code == 4242 and "odd" in str(unknown)


def test_codes_are_numbered_like_rocketmq():
    assert (RequestCode.SEND_MESSAGE, RequestCode.PULL_MESSAGE, RequestCode.QUERY_MESSAGE) == (10, 11, 12)
    assert (RequestCode.REGISTER_BROKER, RequestCode.GET_ROUTEINFO_BY_TOPIC, RequestCode.SEND_BATCH_MESSAGE) == (103, 105, 320)
    assert (ResponseCode.FLUSH_DISK_TIMEOUT, ResponseCode.MESSAGE_ILLEGAL, ResponseCode.TOPIC_NOT_EXIST,
            ResponseCode.PULL_OFFSET_MOVED, ResponseCode.SUBSCRIPTION_PARSE_FAILED) == (10, 13, 17, 21, 23)
