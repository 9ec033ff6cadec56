"""Property tests for every request schema: valid values round-trip through the wire
form; invalid ones raise FieldError and nothing else."""

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quiver.wire import requests as rq
from quiver.wire.codes import RequestCode
from quiver.wire.receipt_handle import HandleCheck, ReceiptHandle
from quiver.errors import FieldError

NAME = st.from_regex(r"[A-Za-z0-9_-]{1,24}", fullmatch=True)
HOST = st.one_of(st.from_regex(r"[a-z]([a-z0-9-]{0,18}[a-z0-9])?", fullmatch=True),
                 st.tuples(*[st.integers(0, 255)] * 4).map(lambda t: ".".join(map(str, t))))
ADDR = st.tuples(HOST, st.integers(1, 65535)).map(lambda t: f"{t[0]}:{t[1]}")
JUNK = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=8),
                 st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


def valid(check):
    """A strategy for values `check` accepts (in their decoded form)."""
    if isinstance(check, rq.Int):
        return st.integers(check.lo, check.hi)
    if isinstance(check, rq.Bool):
        return st.booleans()
    if isinstance(check, rq.Str):
        return st.text(min_size=check.min_len, max_size=min(check.max_len, 40))
    if isinstance(check, rq.OneOf):
        return st.sampled_from(sorted(check.values))
    if isinstance(check, rq.Name):
        return {rq.ADDR: ADDR, rq.BACKUP_URL: NAME.map(lambda n: f"s3://bucket-1/{n}"),
                rq.S3_ENDPOINT: ADDR.map(lambda a: f"http://{a}")}.get(check, NAME)
    if isinstance(check, rq.Opt):
        return st.one_of(st.none(), valid(check.inner))
    if isinstance(check, rq.ListOf):
        return st.lists(valid(check.item), min_size=check.min_len, max_size=min(check.max_len, 4))
    if isinstance(check, rq.MapOf):
        return st.dictionaries(valid(check.key), valid(check.value), max_size=min(check.max_len, 3))
    if isinstance(check, rq.Row):
        return st.tuples(*map(valid, check.items))
    if isinstance(check, rq.Nested):
        return instances(check.schema)
    if isinstance(check, rq.SendMetas):
        pairs = st.lists(st.tuples(st.integers(-2 ** 31, 2 ** 31 - 1), st.text(max_size=30)), min_size=1, max_size=4)
        return pairs.map(lambda ps: ([f for f, _ in ps], [p for _, p in ps]))
    if isinstance(check, rq.Props):
        return st.text(max_size=60)
    if isinstance(check, rq.IdKey):
        return st.integers(0, 2 ** 31 - 1)
    if isinstance(check, HandleCheck):   # POP receipt handles (quiver.wire.receipt_handle)
        return st.builds(ReceiptHandle, st.sampled_from(["broker-a", "b.1"]), st.sampled_from(["T", "%RETRY%g"]),
                         st.integers(0, 1023), st.integers(0, 2 ** 63 - 1), st.integers(0, 2 ** 63 - 1),
                         st.integers(0, 43_200_000), st.integers(0, 2 ** 31 - 1))
    if isinstance(check, rq.Json):
        return st.dictionaries(st.text(max_size=5), st.integers(-2 ** 63, 2 ** 63 - 1), max_size=3)  # JSON's ints
    raise AssertionError(f"no strategy for {check!r}: add one")


def instances(schema):
    return st.fixed_dictionaries({s.name: valid(s.check) for s in schema.FIELDS}).map(lambda kw: schema(**kw))


ALL = sorted({v for v in vars(rq).values() if isinstance(v, type) and issubclass(v, rq.Schema) and v is not rq.Schema},
             key=lambda s: s.__name__)


def test_every_request_code_has_a_schema():
    missing = [c.name for c in RequestCode if c not in rq.SCHEMAS]
    assert not missing, f"request codes without a schema: {missing}"


def test_every_integer_fits_its_width():
    for schema in ALL:
        for spec in schema.FIELDS:
            for check in _leaves(spec.check):
                if isinstance(check, rq.Int):
                    assert -2 ** 63 <= check.lo <= check.hi <= 2 ** 63 - 1, (schema, spec.name)


def _leaves(check):
    yield check
    for attr in ("inner", "item", "key", "value"):
        if hasattr(check, attr):
            yield from _leaves(getattr(check, attr))
    for item in getattr(check, "items", ()):
        yield from _leaves(item)


@pytest.mark.parametrize("schema", ALL, ids=lambda s: s.__name__)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_valid_values_round_trip(schema, data):
    obj = data.draw(instances(schema))
    wire = orjson.loads(orjson.dumps(obj.ext()))
    assert schema.decode(wire) == obj


@pytest.mark.parametrize("schema", ALL, ids=lambda s: s.__name__)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_junk_raises_field_error_or_decodes(schema, data):
    """Whatever JSON arrives in any field, decode returns an object or raises FieldError."""
    obj = data.draw(instances(schema))
    wire = orjson.loads(orjson.dumps(obj.ext()))
    if schema.FIELDS:
        spec = data.draw(st.sampled_from(schema.FIELDS))
        wire[spec.key] = data.draw(JUNK)
    try:
        schema.decode(wire)
    except FieldError as exc:
        assert schema._what() in exc.remark and "expected" in exc.remark


def _invalid(check):
    """Values `check` must refuse (None aside: an absent optional field is valid)."""
    bad = [1.5, [[]], {"x": {}}, "\x00"]
    if isinstance(check, rq.Int):
        return [check.lo - 1, check.hi + 1, str(check.lo), True, 1.0]
    if isinstance(check, (rq.Str, rq.Name, rq.OneOf, rq.Props)):
        return [5, ["a"], {"a": 1}, True, "x" * 70_000]
    if isinstance(check, rq.Opt):
        return [v for v in _invalid(check.inner) if v is not None]
    if isinstance(check, (rq.ListOf, rq.Row, rq.SendMetas)):
        return ["abc", 7, {"a": 1}, [object]]  # [object] is replaced below
    if isinstance(check, (rq.MapOf, rq.Nested)):
        return ["abc", 7, [1, 2]]
    if isinstance(check, rq.Bool):
        return [0, 1, "true"]
    return bad


@pytest.mark.parametrize("schema", ALL, ids=lambda s: s.__name__)
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_each_field_refuses_wrong_types_and_ranges(schema, data):
    example = data.draw(instances(schema))
    for spec in schema.FIELDS:
        if isinstance(spec.check, rq.Json):
            continue
        for value in _invalid(spec.check):
            if value == [object]:
                if getattr(spec.check, "skip_bad", False):
                    continue  # a peer's list: a bad item is dropped, not fatal
                value = [{"nested": [[["deep"]]]}]
            wire = orjson.loads(orjson.dumps(example.ext()))
            wire[spec.key] = value
            with pytest.raises(FieldError) as err:
                schema.decode(wire)
            assert repr(spec.key) in err.value.remark or f"'{spec.key}[" in err.value.remark
        if spec.required:
            wire = orjson.loads(orjson.dumps(example.ext()))
            wire.pop(spec.key, None)
            with pytest.raises(FieldError, match="required"):
                schema.decode(wire)


@pytest.mark.parametrize("ext", [None, [], "x", 5])
def test_ext_must_be_an_object(ext):
    with pytest.raises(FieldError):
        rq.GetMaxOffset.decode(ext)


def test_remark_names_code_field_expected_and_got():
    with pytest.raises(FieldError) as err:
        rq.UpdateConsumerOffset.decode({"g": "G", "t": "T", "q": 0, "o": 2 ** 63})
    remark = err.value.remark
    assert "UPDATE_CONSUMER_OFFSET (15)" in remark and "'o' (offset)" in remark
    assert "0..9223372036854775807" in remark and "9223372036854775808" in remark


def test_codes_follow_rocketmq():
    from quiver.wire.codes import ResponseCode
    with pytest.raises(FieldError) as err:
        rq.PullMessage.decode({"t": "../../x", "q": 0, "o": 0})
    assert err.value.code == ResponseCode.INVALID_PARAMETER
    with pytest.raises(FieldError) as err:
        rq.SendMessage.decode({"t": "../../x", "m": [[0, ""]]})
    assert err.value.code == ResponseCode.MESSAGE_ILLEGAL


def test_packed_bodies_round_trip_and_refuse_bad_lengths():
    bodies = [b"a", b"", b"xyz"]
    lengths, frames = rq.pack_bodies(bodies)
    msg = rq.SendMessage(topic="T", metas=([0, 0, 0], ["", "", ""]), lengths=lengths)
    assert [bytes(b) for b in msg.bodies(frames)] == bodies
    bad = rq.SendMessage(topic="T", metas=([0, 0, 0], ["", "", ""]), lengths=[1, 1, 1])
    with pytest.raises(FieldError):
        bad.bodies(frames)
    with pytest.raises(FieldError):
        msg.bodies([b"a", b"b"])


def test_decode_skipping_names_each_entry_a_peer_list_or_map_left_out():
    ext = {"topic": "T", "queues": [{"broker_name": "a", "read": 1, "write": 1}, 7],
           "brokers": [{"broker_name": "a", "addrs": {"0": "h:1", "x": "h:2", "1": "h:0"}}],
           "cluster_filter_servers": ["f:1", None]}
    route, skipped = rq.RouteData.decode_skipping(ext)
    assert [q.broker_name for q in route.queues] == ["a"] and route.brokers[0].addrs == {0: "h:1"}
    assert route.cluster_filter_servers == ["f:1"] and len(skipped) == 4
    text = "\n".join(skipped)
    for fragment in ("item 1 7 (int): must be an object QueueData", "key 'x' (str): must be a broker id",
                     "entry '1' -> 'h:0' (str): must be HOST:PORT", "item 1 None"):
        assert fragment in text, fragment
    assert rq.RouteData.decode(ext) == route                  # plain decode skips the same, silently
    with pytest.raises(FieldError):                           # a field of the wrong shape is still an error
        rq.RouteData.decode_skipping({"topic": "T", "queues": 5})
