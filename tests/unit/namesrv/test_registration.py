"""A registration is checked whole, by its schema alone, before the route table sees it; a bad one changes nothing.

`quiver.wire.requests.RegisterBroker` / `UnregisterBroker` are the name server's only
check of these requests: `Service.handle` decodes them (`req.args`) before a
handler runs. These tests drive the real door (`Service.handle` with the name
server's handlers) and the schemas themselves.
"""

import copy
import re

import pytest

from quiver.wire import protocol
from quiver.wire.codes import RequestCode, ResponseCode
from quiver.errors import FieldError
from quiver.wire.requests import DataVersion, RegisterBroker, TopicConfig, UnregisterBroker
from quiver.runtime.service import Service
from quiver_namesrv.handlers import make_handlers
from quiver_namesrv.route_table import RouteTable


def _good(**over) -> dict:
    ext = {"cluster": "DefaultCluster", "broker_name": "broker-a", "broker_addr": "127.0.0.1:10911",
           "broker_id": 0, "data_version": {"state": 0, "ts": 1_700_000_000_000, "counter": 3},
           "topics": {"T": {"read": 4, "write": 4, "perm": 6, "sysflag": 0, "order": False},
                      "%RETRY%g": {"read": 1, "write": 1, "perm": 6}, "SCHEDULE_TOPIC_XXXX": {"read": 2, "write": 2}},
           "filter_servers": ["127.0.0.1:10921"], "ha_addr": "127.0.0.1:10912"}
    ext.update(over)
    return ext


def _path(*parts: str) -> str:
    """A regex for a field path in a remark: topics['T'].read (the '.' before a nested field is optional)."""
    return r"\.?".join(re.escape(p) for p in parts)


class _Door:
    """The name server's Service loop without a socket: frames in, decoded replies out."""

    def __init__(self, table: RouteTable):
        self.service = Service("127.0.0.1:0", make_handlers(table), "namesrv")
        self.replies = []
        self.service.send_frames = lambda identity, frames: self.replies.append(protocol.decode(frames))
        self.ids = iter(range(1, 1 << 30))

    def ask(self, code: RequestCode, ext) -> protocol.Envelope:
        self.service.handle([b"peer", *protocol.request(code, next(self.ids), ext)])
        return self.replies.pop()


def test_what_a_broker_sends_is_accepted_and_normalised():
    reg = RegisterBroker.decode(_good())
    assert reg.broker_addr == "127.0.0.1:10911" and reg.broker_id == 0
    assert reg.data_version == DataVersion(state=0, ts=1_700_000_000_000, counter=3)
    assert reg.topics["SCHEDULE_TOPIC_XXXX"] == TopicConfig(read=2, write=2, perm=6, sysflag=0, order=False)
    assert reg.filter_servers == ["127.0.0.1:10921"] and reg.ha_addr == "127.0.0.1:10912"
    assert RegisterBroker.decode(reg.ext()) == reg
    bare = RegisterBroker.decode({"cluster": "C", "broker_name": "b", "broker_addr": "h:1"})
    assert (bare.broker_id, bare.data_version, bare.topics, bare.filter_servers, bare.ha_addr) == (0, None, {}, [], None)
    assert RegisterBroker.decode(_good(ha_addr="")).ha_addr is None  # "": no HA listener
    with pytest.raises(Exception):
        reg.broker_id = 3  # frozen


def test_keys_the_schema_does_not_know_are_ignored_not_stored():
    # newer peers may add fields; what is not decoded cannot reach the table
    reg = RegisterBroker.decode(_good(data_version={"counter": 1, "x": 1}, topics={"T": {"read": 1, "write": 1, "y": 2}},
                                      extra={"z": 3}))
    assert reg.data_version == DataVersion(counter=1) and reg.topics == {"T": TopicConfig(read=1, write=1)}
    table = RouteTable()
    table.register(reg)
    assert table.route("T").ext()["queues"] == [{"broker_name": "broker-a", "read": 1, "write": 1, "perm": 6,
                                           "sysflag": 0, "order": False}]


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
            assert getattr(RegisterBroker.decode(_good(**{field: value})), field) == value
        elif field == "ha_addr" and value in ("", None):
            assert RegisterBroker.decode(_good(ha_addr=value)).ha_addr is None  # optional: absent
        else:
            with pytest.raises(FieldError, match=f"field '{field}'"):
                RegisterBroker.decode(_good(**{field: value}))
    if ok:
        assert RegisterBroker.decode(_good(filter_servers=[value])).filter_servers == [value]
    else:
        with pytest.raises(FieldError, match=r"field 'filter_servers\[0\]'"):
            RegisterBroker.decode(_good(filter_servers=[value]))


Q = {"read": 4, "write": 4}


@pytest.mark.parametrize("field,value,fragment", [
    ("cluster", "", "'cluster'"), ("cluster", "a/b", "'cluster'"), ("cluster", "..", "'cluster'"),
    ("cluster", "x" * 128, "'cluster'"), ("cluster", 5, r"\(int\)"),
    ("broker_name", None, "'broker_name'.*required"), ("broker_name", "../etc", "'broker_name'"),
    ("broker_name", "b\x00", "'broker_name'"), ("broker_name", "brøker", "'broker_name'"),
    ("broker_addr", "not-an-address", "host:port"), ("broker_addr", "h:99999", r"1\.\.65535"),
    ("broker_addr", ["h:1"], r"\(list\)"),
    ("ha_addr", "h", "'ha_addr'"),
    ("broker_id", -1, r"0\.\.2147483647"), ("broker_id", 2 ** 31, r"0\.\.2147483647"), ("broker_id", "0", r"\(str\)"),
    ("broker_id", True, r"\(bool\)"), ("broker_id", 1.0, r"\(float\)"),
    ("data_version", 7, "'data_version'.*an object DataVersion"),
    ("data_version", {"counter": -1}, _path("'data_version", "counter'")),
    ("data_version", {"counter": 2 ** 63}, r"0\.\.9223372036854775807"),
    ("data_version", {"state": -1}, _path("'data_version", "state'") + r".*0\.\.2147483647"),
    ("data_version", {"ts": "1"}, _path("'data_version", "ts'") + r".*\(str\)"),
    ("topics", 5, "'topics'.*a map of at most 100000 entries"), ("topics", ["T"], "'topics'.*a map of"),
    ("topics", {"T": 5}, "an object TopicConfig"), ("topics", {"T": []}, "an object TopicConfig"),
    ("topics", {"../../x": Q}, r"a topic name \(topic '\.\./\.\./x' has illegal characters"),
    ("topics", {"": Q}, "a topic name"),
    ("topics", {"T": {"read": 0, "write": 4}}, _path("topics['T']", "read") + r".*1\.\.1024"),
    ("topics", {"T": {"read": 4, "write": 1025}}, _path("topics['T']", "write") + r".*1\.\.1024"),
    ("topics", {"T": {"read": 4, "write": 0}}, _path("topics['T']", "write")),
    ("topics", {"T": {"write": 4}}, _path("topics['T']", "read") + ".*required"),
    ("topics", {"T": {"read": 4}}, _path("topics['T']", "write") + ".*required"),
    ("topics", {"T": {**Q, "perm": 16}}, r"0\.\.15"), ("topics", {"T": {**Q, "perm": "6"}}, r"\(str\)"),
    ("topics", {"T": {**Q, "sysflag": -1}}, _path("topics['T']", "sysflag")),
    ("topics", {"T": {**Q, "order": "yes"}}, "true or false"),
    ("filter_servers", 5, r"a list of 0\.\.1024 items"), ("filter_servers", ["h:1"] * 1025, r"a list of 0\.\.1024"),
    ("filter_servers", ["h:1", 3], r"'filter_servers\[1\]'"), ("filter_servers", {"h:1": 1}, r"\(dict\)"),
])
def test_each_bad_field_is_named_with_expected_and_got(field, value, fragment):
    with pytest.raises(FieldError) as err:
        RegisterBroker.decode(_good(**{field: value}))
    remark = err.value.remark
    assert err.value.code == ResponseCode.INVALID_PARAMETER
    assert remark.startswith("REGISTER_BROKER (103): field ") and field in remark, remark
    assert ": expected " in remark and ", got " in remark and re.search(fragment, remark), remark


def test_long_values_are_shortened_in_the_remark():
    for over in ({"broker_addr": "x" * 5000}, {"topics": {"x" * 5000: Q}}, {"cluster": "é" * 5000}):
        with pytest.raises(FieldError) as err:
            RegisterBroker.decode(_good(**over))
        assert len(err.value.remark) < 300 and err.value.remark.isascii(), err.value.remark


def test_bad_registration_leaves_no_trace_and_good_state_is_kept():
    table = RouteTable()
    door = _Door(table)
    assert door.ask(RequestCode.REGISTER_BROKER, _good()).code == ResponseCode.SUCCESS
    before = copy.deepcopy((table.topics, table.brokers, table.clusters, table.cluster_info().ext()))
    bad = [_good(broker_name="ghost", filter_servers=5), _good(broker_name="ghost", topics={"T": "conf"}),
           _good(broker_name="ghost", broker_addr="ghost"), _good(data_version={"counter": 4}, topics={"T": {"read": -1}}),
           _good(cluster="Other", broker_id="1"), _good(data_version={"counter": 5}, topics={"T": {"read": 4}}),
           _good(data_version={"counter": 6}, filter_servers=["h:1", "x"]), _good(data_version={"state": -1}),
           _good(broker_name="ghost", ha_addr="nohost"), {"cluster": "C"}, {}]
    for ext in bad:
        env = door.ask(RequestCode.REGISTER_BROKER, ext)
        assert env.code == ResponseCode.INVALID_PARAMETER and env.remark.startswith("REGISTER_BROKER (103): field ")
        assert (table.topics, table.brokers, table.clusters) == before[:3]
    info = table.cluster_info().ext()
    assert info["brokers"] == before[3]["brokers"] and list(info["live"]) == ["127.0.0.1:10911"]


def test_unregistration_is_checked_too():
    table = RouteTable()
    door = _Door(table)
    door.ask(RequestCode.REGISTER_BROKER, _good())
    for ext in ({"cluster": "DefaultCluster", "broker_name": "broker-a", "broker_addr": "127.0.0.1"},
                {"cluster": "DefaultCluster", "broker_name": "broker-a", "broker_addr": "127.0.0.1:10911",
                 "broker_id": "0"},
                {"cluster": "DefaultCluster", "broker_name": "broker-a", "broker_addr": "127.0.0.1:10911",
                 "broker_id": -1},
                {"cluster": "../x", "broker_name": "broker-a", "broker_addr": "127.0.0.1:10911"},
                {"cluster": "DefaultCluster", "broker_addr": "127.0.0.1:10911"}):
        env = door.ask(RequestCode.UNREGISTER_BROKER, ext)
        assert env.code == ResponseCode.INVALID_PARAMETER, env.remark
        assert env.remark.startswith("UNREGISTER_BROKER (104): field ") and "expected" in env.remark
    assert list(table.live) == ["127.0.0.1:10911"]
    u = UnregisterBroker.decode({"cluster": "DefaultCluster", "broker_name": "broker-a",
                                 "broker_addr": "127.0.0.1:10911"})
    assert u.broker_id is None
    env = door.ask(RequestCode.UNREGISTER_BROKER, {"cluster": "DefaultCluster", "broker_name": "broker-a",
                                                   "broker_addr": "127.0.0.1:10911", "broker_id": 0})
    assert env.code == ResponseCode.SUCCESS and table.live == {} and table.topics == {}


def test_register_reply_names_the_master_for_a_slave():
    table = RouteTable()
    door = _Door(table)
    env = door.ask(RequestCode.REGISTER_BROKER, _good(ha_addr=""))
    assert env.code == ResponseCode.SUCCESS and env.ext == {"master_addr": "127.0.0.1:10911", "ha_addr": ""}
    door.ask(RequestCode.REGISTER_BROKER, _good(ha_addr="127.0.0.1:10912"))
    env = door.ask(RequestCode.REGISTER_BROKER, _good(broker_addr="127.0.0.1:20911", broker_id=1, ha_addr=None))
    assert env.ext == {"master_addr": "127.0.0.1:10911", "ha_addr": "127.0.0.1:10912"}


def test_deeply_nested_garbage_is_refused_with_a_short_remark():
    deep = []
    for _ in range(5000):  # deeper than any repr can go
        deep = [deep]
    for field in ("broker_addr", "cluster", "topics", "filter_servers", "data_version", "broker_id"):
        with pytest.raises(FieldError) as err:
            RegisterBroker.decode(_good(**{field: deep}))
        assert f"'{field}" in err.value.remark and "(list)" in err.value.remark and len(err.value.remark) < 250
    with pytest.raises(FieldError, match=_path("topics['T']", "read")):
        RegisterBroker.decode(_good(topics={"T": {"read": deep}}))
