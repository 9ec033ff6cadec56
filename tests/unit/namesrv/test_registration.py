"""A registration is checked whole before the route table sees it; a bad one changes nothing."""

import copy

import pytest

from quiver.codes import RequestCode
from quiver.errors import InvalidParameterError
from quiver_namesrv.handlers import make_handlers
from quiver_namesrv.route_table import Registration, RouteTable, validate_registration, validate_unregistration


def _good(**over) -> dict:
    ext = {"cluster": "DefaultCluster", "broker_name": "broker-a", "broker_addr": "127.0.0.1:10911",
           "broker_id": 0, "data_version": {"state": 0, "ts": 1_700_000_000_000, "counter": 3},
           "topics": {"T": {"read": 4, "write": 4, "perm": 6, "sysflag": 0, "order": False},
                      "%RETRY%g": {"read": 1, "write": 1, "perm": 6}, "SCHEDULE_TOPIC_XXXX": {}},
           "filter_servers": ["127.0.0.1:10921"], "ha_addr": "127.0.0.1:10912"}
    ext.update(over)
    return ext


class _Req:
    def __init__(self, ext):
        self.ext, self.replies = ext, []

    def reply(self, code, remark="", ext=None):
        self.replies.append((code, remark, ext))


def test_what_a_broker_sends_is_accepted_and_normalised():
    reg = validate_registration(_good())
    assert isinstance(reg, Registration) and reg.broker_addr == "127.0.0.1:10911" and reg.broker_id == 0
    assert reg.topics["SCHEDULE_TOPIC_XXXX"] == {"read": 4, "write": 4, "perm": 6, "sysflag": 0, "order": False}
    assert reg.filter_servers == ("127.0.0.1:10921",) and reg.ha_addr == "127.0.0.1:10912"
    bare = validate_registration({"cluster": "C", "broker_name": "b", "broker_addr": "h:1"})
    assert (bare.broker_id, bare.data_version, bare.topics, bare.filter_servers, bare.ha_addr) == (0, {}, {}, (), "")
    with pytest.raises(Exception):
        reg.broker_id = 3  # frozen


@pytest.mark.parametrize("value,ok", [
    ("h:1", True), ("broker-1.example.com:65535", True), ("[::1]:9876", True), ("10.0.0.1:80", True),
    ("quiver_broker_1:10911", True),
    ("h", False), ("h:", False), (":80", False), ("h:0", False), ("h:65536", False), ("h:+80", False),
    ("h:8 0", False), ("a b:80", False), ("h:80;i:81", False), ("h:٣", False), ("hé:80", False),
    ("tcp://h:80", False), ("h:80\n", False), ("x" * 300 + ":1", False), ("", False), (None, False),
    (80, False), (["h:1"], False),
])
def test_addresses(value, ok):
    for field in ("broker_addr", "ha_addr"):
        if ok:
            assert getattr(validate_registration(_good(**{field: value})), field) == value
        elif value not in ("", None) or field == "broker_addr":
            with pytest.raises(InvalidParameterError, match=f"'{field}'"):
                validate_registration(_good(**{field: value}))
    if ok:
        assert validate_registration(_good(filter_servers=[value])).filter_servers == (value,)
    else:
        with pytest.raises(InvalidParameterError, match=r"'filter_servers\[0\]'"):
            validate_registration(_good(filter_servers=[value]))


@pytest.mark.parametrize("field,value,fragment", [
    ("cluster", "", "'cluster'"), ("cluster", "a/b", "'cluster'"), ("cluster", "..", "'cluster'"),
    ("cluster", "x" * 128, "'cluster'"), ("cluster", 5, "(int)"),
    ("broker_name", None, "'broker_name'"), ("broker_name", "../etc", "'broker_name'"),
    ("broker_name", "b\x00", "'broker_name'"), ("broker_name", "brøker", "'broker_name'"),
    ("broker_addr", "not-an-address", "host:port"), ("broker_addr", "h:99999", "1..65535"),
    ("broker_addr", ["h:1"], "(list)"),
    ("ha_addr", "h", "'ha_addr'"),
    ("broker_id", -1, "0..2147483647"), ("broker_id", 2 ** 31, "0..2147483647"), ("broker_id", "0", "(str)"),
    ("broker_id", True, "(bool)"), ("broker_id", 1.0, "(float)"),
    ("data_version", 7, "'data_version'"), ("data_version", {"counter": -1}, "'data_version.counter'"),
    ("data_version", {"counter": 2 ** 63}, "0..9223372036854775807"), ("data_version", {"x": 1}, "keys among"),
    ("topics", 5, "map of topic name"), ("topics", ["T"], "map of topic name"),
    ("topics", {"T": 5}, "config map"), ("topics", {"T": []}, "config map"),
    ("topics", {"../../x": {}}, "topic names"), ("topics", {"": {}}, "topic names"),
    ("topics", {"T": {"read": 0}}, "'topics.T.read'"), ("topics", {"T": {"write": 1025}}, "1..1024"),
    ("topics", {"T": {"perm": 16}}, "0..15"), ("topics", {"T": {"perm": "6"}}, "(str)"),
    ("topics", {"T": {"sysflag": -1}}, "sysflag"), ("topics", {"T": {"order": "yes"}}, "true or false"),
    ("filter_servers", 5, "list of at most 1024"), ("filter_servers", ["h:1"] * 1025, "list of at most 1024"),
    ("filter_servers", ["h:1", 3], "'filter_servers[1]'"), ("filter_servers", {"h:1": 1}, "(dict)"),
])
def test_each_bad_field_is_named_with_expected_and_got(field, value, fragment):
    with pytest.raises(InvalidParameterError) as err:
        validate_registration(_good(**{field: value}))
    remark = err.value.remark
    assert remark.startswith("REGISTER_BROKER field ") and field in remark, remark
    assert "expected" in remark and "got" in remark and fragment in remark, remark


def test_long_values_are_shortened_in_the_remark():
    with pytest.raises(InvalidParameterError) as err:
        validate_registration(_good(broker_addr="x" * 5000))
    assert len(err.value.remark) < 200


def test_bad_registration_leaves_no_trace_and_good_state_is_kept():
    table = RouteTable()
    handlers = make_handlers(table)
    register = handlers[RequestCode.REGISTER_BROKER]
    register(_Req(_good()))
    before = copy.deepcopy((table.topics, table.brokers, table.clusters, table.cluster_info()))
    bad = [_good(broker_name="ghost", filter_servers=5), _good(broker_name="ghost", topics={"T": "conf"}),
           _good(broker_name="ghost", broker_addr="ghost"), _good(data_version={"counter": 4}, topics={"T": {"read": -1}}),
           _good(cluster="Other", broker_id="1"), {"cluster": "C"}, {}]
    for ext in bad:
        with pytest.raises(InvalidParameterError):
            register(_Req(ext))
        assert (table.topics, table.brokers, table.clusters) == before[:3]
    info = table.cluster_info()
    assert info["brokers"] == before[3]["brokers"] and list(info["live"]) == ["127.0.0.1:10911"]


def test_unregistration_is_checked_too():
    table = RouteTable()
    handlers = make_handlers(table)
    handlers[RequestCode.REGISTER_BROKER](_Req(_good()))
    for ext in ({"cluster": "DefaultCluster", "broker_name": "broker-a", "broker_addr": "127.0.0.1"},
                {"cluster": "DefaultCluster", "broker_name": "broker-a", "broker_addr": "127.0.0.1:10911",
                 "broker_id": "0"}):
        with pytest.raises(InvalidParameterError) as err:
            handlers[RequestCode.UNREGISTER_BROKER](_Req(ext))
        assert err.value.remark.startswith("UNREGISTER_BROKER field ")
    assert list(table.live) == ["127.0.0.1:10911"]
    u = validate_unregistration({"cluster": "DefaultCluster", "broker_name": "broker-a",
                                 "broker_addr": "127.0.0.1:10911"})
    assert u.broker_id is None
    req = _Req({"cluster": "DefaultCluster", "broker_name": "broker-a", "broker_addr": "127.0.0.1:10911",
                "broker_id": 0})
    handlers[RequestCode.UNREGISTER_BROKER](req)
    assert req.replies[0][0] == 0 and table.live == {} and table.topics == {}


def test_deeply_nested_garbage_is_refused_with_a_short_remark():
    deep = []
    for _ in range(5000):  # deeper than any repr can go
        deep = [deep]
    for field in ("broker_addr", "cluster", "topics", "filter_servers", "data_version", "broker_id"):
        with pytest.raises(InvalidParameterError) as err:
            validate_registration(_good(**{field: deep}))
        assert f"'{field}" in err.value.remark and "(list)" in err.value.remark and len(err.value.remark) < 250
    with pytest.raises(InvalidParameterError, match="'topics.T.read'"):
        validate_registration(_good(topics={"T": {"read": deep}}))
