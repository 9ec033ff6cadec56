"""The compiled send_results (quiver._speedups) against message.send_results: the SendResults of
a send reply, one per message. Generated and odd input (lists of other lengths, offsets near the
ends of a 64-bit int and past them, tuples and other types where lists go): the twin builds
exactly the reference's results (every slot equal and of the same type) or declines, and the
selected function then does what the reference does."""

from hypothesis import given, settings, strategies as st
import pytest

from quiver.client import message
from quiver.client.message import SendResult, SendStatus
from quiver.wire import speedups

try:  # built even when QUIVER_NO_SPEEDUPS turns it off: the twin is tested either way
    from quiver import _speedups as C
except ImportError:
    C = None
if C is not None and not speedups.ACTIVE:
    speedups.hand_over(C, "send_result")

SLOTS = SendResult.__slots__


def _outcome(fn, *args):
    """("ok", every slot's name, type and value of each result) or ("raised", type, text)."""
    try:
        results = fn(*args)
    except Exception as exc:  # noqa: BLE001 - the type and text are what is compared
        return "raised", type(exc), str(exc)
    return "ok", [[(name, type(getattr(r, name)), getattr(r, name)) for name in SLOTS] for r in results]


def _same(*args) -> bool:
    if C is None:
        pytest.skip("quiver._speedups is not built (test_speedups fails for that)")
    want = _outcome(message.send_results.reference, *args)
    got = C.send_results(*args)
    if got is not NotImplemented:
        assert all(type(r) is SendResult for r in got)
        assert want == _outcome(lambda: got)
    assert _outcome(message.send_results, *args) == want
    return got is not NotImplemented


ids = st.lists(st.text(max_size=8), max_size=20)
offsets = st.one_of(st.integers(-2 ** 64, 2 ** 64), st.sampled_from([2 ** 63 - 1, 2 ** 63 - 5, -2 ** 63, 0]))


@settings(max_examples=300, deadline=None)
@given(ids, st.lists(st.integers(0, 2 ** 62), max_size=20), offsets, st.sampled_from(list(SendStatus)),
       st.integers(0, 1023), st.binary(max_size=8))
def test_the_twin_builds_the_references_results_or_declines(msg_ids, phys, first, status, qid, host):
    _same(status, msg_ids, "broker-a", qid, first, "Orders", host, phys)


def test_an_ordinary_reply_is_built_by_the_twin():
    assert _same(SendStatus.SEND_OK, ["a", "b", "c"], "broker-a", 3, 100, "T", b"\x7f\0\0\1\0\0\x27\x0f", [7, 8, 9])


@pytest.mark.parametrize("args", [
    (SendStatus.SEND_OK, ("a",), "b", 0, 0, "T", b"", [1]),        # a tuple of ids: the reference's map takes it
    (SendStatus.SEND_OK, ["a"], "b", 0, 1.5, "T", b"", [1]),       # a float offset: range() refuses it
    (SendStatus.SEND_OK, ["a"], "b", 0, True, "T", b"", [1]),      # a bool is an int to range()
    (SendStatus.SEND_OK, ["a", "b"], "b", 0, 0, "T", b"", [1]),    # fewer offsets than ids
])
def test_odd_input_is_the_references_to_answer(args):
    _same(*args)
