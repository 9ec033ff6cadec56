"""The compiled schema_decode (quiver._speedups) against Schema._decode, for every request and reply schema.

On generated ext maps, well-formed and hostile (missing and unknown keys, None, values of
the wrong type or just past their range, bools for ints, huge ints, malformed send pairs),
the twin either builds exactly the reference's object (the same values of the same types)
or declines; and `decode` then answers as the reference does: the same object, or a
FieldError with the same code and remark. Runs with QUIVER_NO_SPEEDUPS=1 too (the twin is
called directly).
"""

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from quiver.errors import FieldError
from quiver.wire import requests as rq
from quiver.wire import schema as sc
from quiver.wire.replies import REPLIES

try:  # built even when QUIVER_NO_SPEEDUPS turns it off: the twin is tested either way
    from quiver import _speedups as C
except ImportError:
    C = None

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CLASSES = sorted({t for t in (*rq.SCHEMAS.values(), *(t for forms in REPLIES.values() for t in forms))
                  if issubclass(t, sc.Schema)}, key=lambda c: c.__qualname__)   # not the Wire maps
JUNK = st.one_of(st.none(), st.booleans(), st.integers(-2 ** 70, 2 ** 70), st.floats(allow_nan=False),
                 st.text(max_size=8), st.sampled_from(["T", "Orders", "g1", "127.0.0.1:10911", "%RETRY%g", "a b"]),
                 st.lists(st.integers(-3, 3), max_size=3),
                 st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
PAIR = st.one_of(st.tuples(st.integers(-2 ** 31 - 1, 2 ** 31), st.text(max_size=12)).map(list),
                 st.lists(JUNK, max_size=3), JUNK)


def _value(check):
    """Values near what `check` takes, and junk."""
    inner = check.inner if type(check) is sc.Opt else check
    if type(inner) is sc.Int:
        near = st.one_of(st.sampled_from([inner.lo, inner.hi, inner.lo - 1, inner.hi + 1]),
                         st.integers(max(inner.lo, -2 ** 64), min(inner.hi, 2 ** 64)))
    elif type(inner) is sc.Bool:
        near = st.booleans()
    elif type(inner) is sc.SendMetas:
        near = st.one_of(st.lists(PAIR, max_size=4), st.lists(st.just([0, "x" * 8200]), min_size=1, max_size=2))
    else:
        near = JUNK
    return st.one_of(near, near, JUNK)


@st.composite
def ext_of(draw, cls):
    ext = {}
    for spec in cls.FIELDS:
        if draw(st.integers(0, 5)):   # mostly present
            ext[spec.key] = draw(_value(spec.check))
    if draw(st.booleans()):
        ext[draw(st.text(max_size=3))] = draw(JUNK)
    return ext


def _twin():
    if C is None:
        pytest.skip("quiver._speedups is not built (test_speedups fails for that)")
    return C


def _typed(obj):
    return [(s.name, type(getattr(obj, s.name)), getattr(obj, s.name)) for s in obj.FIELDS]


def _reference_decode(cls, ext):
    try:
        return "ok", _typed(cls._decode(ext))
    except sc.Invalid as exc:
        err = cls._error(exc)
        return "raised", err.code, err.remark


def _decode(cls, ext):
    try:
        return "ok", _typed(cls.decode(ext))
    except FieldError as exc:
        return "raised", exc.code, exc.remark


def _check(cls, ext) -> bool:
    """The twin agrees or declines, and decode answers as the reference; True if the twin answered.
    A decoded object is encoded again by both ext()s, with its class's KEEP_DEFAULTS and the other."""
    want = _reference_decode(cls, ext)
    got = _twin().schema_decode(cls, cls.PLAN, ext)
    if got is not NotImplemented:
        assert type(got) is cls and ("ok", _typed(got)) == want, f"{cls.__qualname__} {ext!r}"
    assert _decode(cls, ext) == want
    if want[0] == "ok":
        obj = cls._decode(ext)
        for keep in (cls.KEEP_DEFAULTS, not cls.KEEP_DEFAULTS):
            _same_ext(obj, keep)
    return got is not NotImplemented


def _same_ext(obj, keep: bool) -> bool:
    """schema_ext's twin gives the reference's map (the same values of the same types) or declines."""
    def typed(m):
        return sorted((k, type(v), repr(v)) for k, v in m.items())
    want = sc.schema_ext.reference(obj, obj.PLAN, keep)
    got = _twin().schema_ext(obj, obj.PLAN, keep)
    if got is not NotImplemented:
        assert type(got) is dict and typed(got) == typed(want), f"{type(obj).__qualname__}"
    if keep == obj.KEEP_DEFAULTS:
        assert typed(obj.ext()) == typed(want)
    return got is not NotImplemented


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__qualname__)
@given(data=st.data())
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_every_schema_decodes_as_its_reference(cls, data):
    _check(cls, data.draw(ext_of(cls)))


@FUZZ
@given(ext=ext_of(rq.SendMessage))
def test_send_requests_decode_as_the_reference(ext):
    _check(rq.SendMessage, ext)


@pytest.mark.parametrize("ext", [
    {"t": "T", "m": [[0, "TAGS\x01A\x02"]]},
    {"t": "T", "q": 3, "m": [[-2 ** 31, ""], [2 ** 31 - 1, "a\x01b\x02"]], "l": [1, 2], "g": "pg", "b": 17,
     "bh": "10.0.0.1:5", "sf": 8, "rc": 2, "po": 99, "w": False},
])
def test_a_well_formed_send_is_built_by_the_twin(ext):
    assert _check(rq.SendMessage, ext)
    obj = _twin().schema_decode(rq.SendMessage, rq.SendMessage.PLAN, ext)
    flags, props = obj.metas
    assert type(obj.metas) is tuple and flags == [m[0] for m in ext["m"]] and props == [m[1] for m in ext["m"]]


@pytest.mark.parametrize("ext, code", [
    ({"q": 0, "m": [[0, ""]]}, "MESSAGE_ILLEGAL"),                       # topic missing: its own code
    ({"t": "T", "m": []}, "INVALID_PARAMETER"),                                 # no message
    ({"t": "T", "m": [[2 ** 31, ""]]}, "INVALID_PARAMETER"),                    # flag past 32 bits
    ({"t": "T", "m": [[True, ""]]}, "INVALID_PARAMETER"),                       # a bool is not a flag
    ({"t": "T", "m": [[0, "x" * 40000]]}, "PROPERTIES_SIZE_EXCEEDED"),
    ({"t": "T", "q": 1024, "m": [[0, ""]]}, "INVALID_PARAMETER"),               # queue id past the range
    ({"t": "T", "q": True, "m": [[0, ""]]}, "INVALID_PARAMETER"),
    ({"t": "T", "w": 1, "m": [[0, ""]]}, "INVALID_PARAMETER"),                  # wait must be a bool
    ({"t": "a b", "m": [[0, ""]]}, "MESSAGE_ILLEGAL"),                    # a bad topic name
])
def test_malformed_sends_get_the_references_error(ext, code):
    assert not _check(rq.SendMessage, ext)
    with pytest.raises(FieldError) as err:
        rq.SendMessage.decode(ext)
    assert err.value.code.name == code


def test_defaults_made_by_a_factory_are_not_shared():
    cls = next(c for c in CLASSES if any(callable(s.default) for s in c.FIELDS if not s.required)
               and all(not s.required for s in c.FIELDS))
    a, b = (_twin().schema_decode(cls, cls.PLAN, {}) for _ in range(2))
    assert a is not NotImplemented and a == b
    assert any(getattr(a, s.name) is not getattr(b, s.name) for s in cls.FIELDS if callable(s.default))


def test_the_plan_makes_only_plain_checks_in_c():
    kinds = {row[0]: row[2] for row in rq.SendMessage.PLAN}
    assert kinds == {"t": sc.K_NAME, "q": sc.K_INT, "m": sc.K_METAS, "l": sc.K_CALL, "g": sc.K_NAME,
                     "b": sc.K_INT, "bh": sc.K_NAME, "sf": sc.K_INT, "rc": sc.K_INT, "po": sc.K_INT, "w": sc.K_BOOL}
    blank = sc.Opt(sc.Int(0, 5), blank=True)   # "" reads as None there: the check itself runs
    row = sc._plan_row(type("S", (), {"key": "k", "name": "n", "check": blank, "default": None, "required": False})())
    assert row[2] == sc.K_CALL


def test_decode_skipping_lists_each_skip_once():
    """decode_skipping runs the reference alone: a twin declining after a check that skipped
    an entry would have listed the skip twice."""
    from quiver.wire.replies import RouteData
    ext = {"topic": "T", "brokers": [{"broker_name": "b", "addrs": {"0": "h:1", "x": "h:2"}}, 7]}
    obj, skipped = RouteData.decode_skipping(ext)
    assert len(obj.brokers) == 1 and obj.brokers[0].addrs == {0: "h:1"}
    assert len(skipped) == 2 and len(set(skipped)) == 2


def test_a_name_is_kept_once_good_and_only_then():
    check = sc.Name(lambda name: None if name.isalpha() else "letters only", "a word")
    with pytest.raises(sc.Invalid):
        check("a1")
    assert check("abc") == "abc" and check.good == {"abc"}
    check.problem = lambda name: "refused now"   # a kept name is not checked again
    assert check("abc") == "abc"
    with pytest.raises(sc.Invalid):
        check("abd")
    check.good.clear()
    check.NAMES_KEPT = 2
    check.problem = lambda name: None
    for name in ("n1", "n2", "n3"):
        check(name)
    assert check.good == {"n1", "n2"}


def test_the_twin_takes_a_kept_name_and_checks_any_other():
    ext = {"t": "KeptTopic", "m": [[0, ""]]}
    assert _check(rq.SendMessage, ext) and "KeptTopic" in sc.TOPIC.good
    assert not _check(rq.SendMessage, {"t": "bad topic", "m": [[0, ""]]})
    assert "bad topic" not in sc.TOPIC.good


def test_a_send_as_the_producer_builds_it_is_encoded_by_the_twin():
    req = rq.SendMessage(topic="T", queue_id=2, metas=([0, 5], ["a\x01b\x02", ""]), lengths=[1, 2], group="pg",
                         born_ts=17, wait=False)
    assert _same_ext(req, False) and req.ext()["m"] == [[0, "a\x01b\x02"], [5, ""]]
    odd = rq.SendMessage(topic="T", metas=[[1, 2], ["x", "y"]])   # not the decoded (list, list) tuple
    assert _same_ext(odd, False) and odd.ext()["m"] == [[1, "x"], [2, "y"]]
    assert _twin().schema_ext(object(), rq.SendMessage.PLAN, False) is NotImplemented
