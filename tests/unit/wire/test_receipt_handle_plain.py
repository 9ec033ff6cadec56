"""ReceiptHandle.parse's one-match path for plain handles against the field-by-field checks it
skips (`_parse_checked`, the reference): the same handle, or the same ValueError, for handles
made by encode and for mangled, oversized and hostile ones."""

import pytest
from hypothesis import given, settings, strategies as st

from quiver.wire.receipt_handle import MAX_INVISIBLE_MS, ReceiptHandle

NAME_CHARS = "%|aZ09_-."
BIG = 2 ** 63


def _same(text) -> None:
    try:
        want = ReceiptHandle._parse_checked(text)
    except ValueError as exc:
        with pytest.raises(ValueError) as got:
            ReceiptHandle.parse(text)
        assert str(got.value) == str(exc)
        return
    assert ReceiptHandle.parse(text) == want


names = st.text(NAME_CHARS, min_size=0, max_size=130) | st.sampled_from([".", "..", "%RETRY%" + "g" * 200, " "])
numbers = st.integers(0, 2 ** 64) | st.sampled_from([1023, 1024, BIG - 1, BIG, MAX_INVISIBLE_MS,
                                                     MAX_INVISIBLE_MS + 1, 2 ** 31 - 1, 2 ** 31])


@settings(max_examples=400, deadline=None)
@given(names, names, st.lists(numbers, min_size=5, max_size=5), st.sampled_from(["", "0", "00"]))
def test_parse_matches_the_field_checks(broker, topic, nums, pad):
    text = " ".join(["1", broker, topic, *(pad + str(n) for n in nums)])
    _same(text)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80), st.integers(0, 60))
def test_mangled_handles_match_too(noise, at):
    good = ReceiptHandle("broker-a", "Topic", 3, 12345, 1_800_000_000_000, 60_000, 2).encode()
    _same(good[:at] + noise + good[at:])
    _same(good[:at])


@pytest.mark.parametrize("text", [
    "1 broker-a Topic 3 12345 1800000000000 60000 2", "2 broker-a Topic 3 1 1 100 0", "1 broker-a Topic 3 1 1 100 0 ",
    "1  broker-a Topic 3 1 1 100 0", "1 broker-a Topic 3 1 1 100 0\n", "1 broker-a Topic ３ 1 1 100 0",
    "1 .. Topic 3 1 1 100 0", "1 b T 1024 1 1 100 0", "1 b T 0001 1 1 100 0", None, 5, b"1 b T 1 1 1 100 0", "",
])
def test_edges(text):
    _same(text)


def test_a_plain_handle_round_trips():
    h = ReceiptHandle("broker-a", "%RETRY%group", 1023, BIG - 1, BIG - 1, MAX_INVISIBLE_MS, 2 ** 31 - 1)
    assert ReceiptHandle.parse(h.encode()) == h == ReceiptHandle._parse_checked(h.encode())


def test_the_ack_reply_map_equals_its_schema():
    from quiver.runtime.service import reply_ext
    from quiver.wire import requests as rq
    from quiver.wire.codes import RequestCode
    for n in (1, 2, 1024):
        fast = rq.AckReply.wire(n)
        assert fast == rq.AckReply(acked=n, failed=[]).ext() == {"n": n, "f": []}
        assert reply_ext(RequestCode.ACK_MESSAGE, fast) is fast
