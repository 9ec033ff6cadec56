"""The compiled decode_messages and decode (quiver._speedups) against message.decode_messages
(a pull reply's records as MessageExt, the SDK's pull path) and protocol.decode (every
request and reply a service or client reads).

Generated replies, intact and damaged (cut, flipped, bad sizes, BLANK fillers, bad UTF-8),
with and without the store's __CRC32# property, UNIQ_KEY present, empty or absent, KEYS with
empty items: the twin builds exactly the reference's messages (every slot equal and of the
same type) or declines, and the selected function then raises as the reference does. The
same for frames: well-formed and hostile (other versions, headers that are not JSON objects,
codes and ids that are not ints, ext and remark of other types, bodies that are not bytes).
"""

import pytest
from hypothesis import given, settings, strategies as st

from quiver.client import message
from quiver.errors import ProtocolError
from quiver.wire import protocol, record, speedups
from tests.unit.sdk.test_speedups import FUZZ, HOST, _damage, _records

try:  # built even when QUIVER_NO_SPEEDUPS turns it off: the twin is tested either way
    from quiver import _speedups as C
except ImportError:
    C = None
if C is not None and not speedups.ACTIVE:
    speedups.hand_over(C, "record", "message_ext", "envelope")   # no twin runs here: the layouts went nowhere

SLOTS = message.MessageExt.__slots__


def _twin():
    if C is None:
        pytest.skip("quiver._speedups is not built (test_speedups fails for that)")
    return C


def _typed(msgs):
    return [[(name, type(getattr(m, name)), getattr(m, name)) for name in SLOTS] for m in msgs]


def _outcome(fn, *args):
    try:
        return "ok", _typed(fn(*args))
    except Exception as exc:  # noqa: BLE001 - the type and text are what is compared
        return "raised", type(exc), str(exc)


def _same(buf, broker="broker-a") -> bool:
    """The twin agrees or declines and the selected function behaves as the reference; True if the twin answered."""
    want = _outcome(message.decode_messages.reference, buf, broker)
    got = _twin().decode_messages(buf, broker)
    if got is not NotImplemented:
        assert all(type(m) is message.MessageExt for m in got)
        assert want == ("ok", _typed(got))
    assert _outcome(message.decode_messages, buf, broker) == want
    return got is not NotImplemented


props_items = st.sampled_from(["UNIQ_KEY\x01AB12\x02", "UNIQ_KEY\x01\x02", "TAGS\x01A\x02", "TAGS\x01\x02",
                               "KEYS\x01k1 k2\x02", "KEYS\x01 a  b \x02", "KEYS\x01\x02", "x\x01y\x02", "\x02\x02",
                               "noval\x02", "é\x01名😀\x02", "__CRC32#\x010123456789\x02"])


@st.composite
def replies(draw):
    props = ["".join(draw(st.lists(props_items, max_size=5))).encode() for _ in range(draw(st.integers(1, 4)))]
    head = record.RunHead(draw(st.sampled_from([b"T", b"Orders", "名".encode() * 50])), draw(st.integers(0, 7)),
                          draw(st.integers(0, 2 ** 40)), draw(st.integers(0, 2 ** 40)), draw(st.sampled_from([0, 8])),
                          born_ts=draw(st.integers(0, 2 ** 42)), born_host=HOST, store_ts=3, store_host=HOST,
                          reconsume=draw(st.integers(0, 16)))
    bodies = draw(st.lists(st.binary(max_size=64), min_size=len(props), max_size=len(props)))
    data, _, _ = record.encode_run.reference(head, bodies, [0] * len(props), props, None, draw(st.booleans()))
    return data


@FUZZ
@given(replies())
def test_intact_replies_are_decoded_by_the_twin(buf):
    assert _same(buf)
    assert _same(memoryview(buf), "b")


@settings(FUZZ, max_examples=120)
@given(st.data())
def test_damaged_replies_decode_as_the_reference(data):
    raw, _, _ = _records(data.draw, prop_crc=data.draw(st.booleans()))
    _same(_damage(data.draw, raw))


def test_a_message_without_a_unique_key_is_named_by_its_offset():
    raw = record.encode(b"b", topic=b"T", props=b"TAGS\x01A\x02", phys_offset=4242, born_host=HOST, store_host=HOST)
    assert _same(raw)
    [m] = _twin().decode_messages(raw, "b")
    assert m.msg_id == message.offset_msg_id(HOST, 4242) and m.keys == [] and m.tags == "A"


def test_bad_utf8_and_wrong_arguments_are_the_references_business():
    raw = record.encode(b"b", topic=b"T", props=b"\xff\x01b\x02", born_host=HOST, store_host=HOST)
    assert not _same(raw)
    assert _twin().decode_messages(raw, b"broker") is NotImplemented
    assert _twin().decode_messages("not bytes", "b") is NotImplemented


def test_a_message_class_with_other_slots_is_refused():
    class Other:
        __slots__ = (*SLOTS, "extra")
    try:
        with pytest.raises(ValueError):
            _twin().layout("message_ext", 0, (), {"type": Other})
        raw = record.encode(b"b", topic=b"T", props=b"", born_host=HOST, store_host=HOST)
        assert _twin().decode_messages(raw, "b") is NotImplemented   # declines until a layout is taken
    finally:
        speedups.hand_over(_twin(), "message_ext")
    assert "message_ext" not in speedups.REFUSED


# ---- protocol.decode ---------------------------------------------------------------------------

JSON_INT = st.integers(-2 ** 63, 2 ** 63 - 1)   # what orjson writes
HEADS = st.one_of(
    st.fixed_dictionaries({"c": st.integers(-5, 2 ** 40), "id": st.integers(-1, 2 ** 63 - 1)},
                          optional={"ext": st.one_of(st.dictionaries(st.text(max_size=3), JSON_INT, max_size=3),
                                                     st.none(), st.just(0), st.just(""), st.just([1]), st.just("x")),
                                    "r": st.one_of(st.none(), st.text(max_size=5), st.just(3))}),
    st.dictionaries(st.sampled_from(["c", "id", "ext", "r"]),
                    st.one_of(st.none(), st.booleans(), st.floats(allow_nan=False), st.text(max_size=3),
                              st.integers(-3, 3)), max_size=4),
    st.lists(JSON_INT, max_size=2), st.just("str"))
BODY_FRAMES = st.lists(st.one_of(st.binary(max_size=20), st.binary(max_size=5).map(bytearray),
                                 st.binary(max_size=5).map(memoryview), st.just("text")), max_size=3)


def _frames_outcome(fn, frames):
    try:
        env = fn(frames)
        return "ok", [(k, type(getattr(env, k)), getattr(env, k)) for k in env.__slots__]
    except ProtocolError as exc:
        return "raised", exc.code, exc.remark, protocol.request_id_of(exc)


def _same_frames(frames) -> bool:
    want = _frames_outcome(protocol.decode.reference, frames)
    got = _twin().decode(frames)
    if got is not NotImplemented:
        assert type(got) is protocol.Envelope and _frames_outcome(lambda f: got, frames) == want
    assert _frames_outcome(protocol.decode, frames) == want
    return got is not NotImplemented


@FUZZ
@given(head=HEADS, bodies=BODY_FRAMES, version=st.sampled_from([b"QV1", b"QV1", b"QV2", "QV1"]),
       raw=st.one_of(st.none(), st.binary(max_size=8)), as_tuple=st.booleans())
def test_frames_decode_as_the_reference(head, bodies, version, raw, as_tuple):
    frames = [version, protocol._dumps(head) if raw is None else raw, *bodies]
    _same_frames(tuple(frames) if as_tuple else frames)


@pytest.mark.parametrize("frames", [
    protocol.request(10, 7, {"t": "T", "q": 0, "m": [[0, ""]]}, [b"body"]),
    protocol.reply(0, 7, "", {"t": "T", "q": 0, "o": 5, "p": [1]}),
    protocol.reply(17, 8, "no such topic"),
    [b"QV1", b'{"c": 11, "id": 3, "ext": {}}'],
])
def test_well_formed_frames_are_decoded_by_the_twin(frames):
    assert _same_frames(frames)


@pytest.mark.parametrize("frames", [
    [b"QV1"], [], "QV1", [b"QV1", b" " * protocol.MAX_HEADER_BYTES + b"{}"], [b"QV1", b'{"c": 1, "id": true}'],
])
def test_malformed_frames_are_the_references_business(frames):
    assert not _same_frames(frames)
