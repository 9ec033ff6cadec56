"""quiver.wire.properties: the put-time check and the defensive readers (and the services using them)."""

import collections
import time
import types

import pytest

from quiver import MessageExt
from quiver.wire import properties as sp
from quiver.wire.codes import RequestCode, ResponseCode
from quiver.runtime.service import reply_ext
from quiver.wire.property_string import format_properties
from quiver.errors import MessageIllegalError

BAD_INTS = ["inf", "-inf", "nan", "1e3", "0x10", " 1", "1 ", "+1", "1_000", "1.0", "", "x", "١", "１", "1\x00",
            "9" * 20, "9" * 5000]
BAD_TOPICS = ["../../../x", "..", "a/b", "", "a\x00", "Оrders", "x" * 128]


def props(**kv) -> str:
    return format_properties({"UNIQ_KEY": "7F00000100002A9F0000000000000001", **kv})


@pytest.mark.parametrize("name", sorted(sp.RULES))
def test_each_rule_refuses_malformed_values_at_put(name):
    rule = sp.RULES[name]
    bad = BAD_TOPICS if rule.kind == "topic" else BAD_INTS + [str(rule.lo - 1), str(rule.hi + 1)]
    for value in bad:
        with pytest.raises(MessageIllegalError) as exc:
            sp.check_put(props(**{name: value}))
        remark = exc.value.remark
        assert remark.startswith(f"property {name} must be "), remark
        assert remark.isascii() and remark.isprintable() and len(remark) < 400
    good = ["Orders", "%RETRY%g"] if rule.kind == "topic" else [str(rule.lo), str(rule.hi), str((rule.lo + rule.hi) // 2)]
    for value in good:
        sp.check_put(props(**{name: value}))


def test_remark_names_the_property_and_its_range():
    with pytest.raises(MessageIllegalError, match=r"property CHECK_IMMUNITY_TIME_IN_SECONDS must be an integer "
                                                  r"0\.\.2592000, got 'inf'"):
        sp.check_put(props(CHECK_IMMUNITY_TIME_IN_SECONDS="inf"))
    with pytest.raises(MessageIllegalError, match=r"property TRANSACTION_CHECK_TIMES must be an integer 0\.\.2147483647"):
        sp.check_put(props(TRANSACTION_CHECK_TIMES="x"))
    with pytest.raises(MessageIllegalError, match="property REAL_TOPIC must be a topic name: .*path separator"):
        sp.check_put(props(REAL_TOPIC="../../../x"))
    with pytest.raises(MessageIllegalError, match=r"property REAL_QID must be an integer 0\.\.1023, got '1024'"):
        sp.check_put(props(REAL_QID="1024"))
    sp.check_put(props(DELAY=str(2**31 - 1)))          # clamped to the level table by the broker
    sp.check_put(props(MAX_RECONSUME_TIMES="-1"))
    sp.check_put(props(TIMER_DELIVER_MS=str(2**63 - 1)))


def test_batches_dicts_and_repeated_names():
    good = props(TAGS="a")
    sp.check_put([good] * 50)
    with pytest.raises(MessageIllegalError, match="DELAY"):
        sp.check_put([good] * 10 + [props(DELAY="x")])
    sp.check_put({"DELAY": "3", "KEYS": "a b"})
    with pytest.raises(MessageIllegalError, match="REAL_QID"):
        sp.check_put({"REAL_QID": "-1"})
    # the same name twice: get_property reads the first, parse_properties the last; both are checked
    with pytest.raises(MessageIllegalError, match="REAL_TOPIC"):
        sp.check_put("REAL_TOPIC\x01Orders\x02REAL_TOPIC\x01../x\x02")
    with pytest.raises(MessageIllegalError, match="REAL_TOPIC"):
        sp.check_put("REAL_TOPIC\x01../x\x02REAL_TOPIC\x01Orders\x02")
    sp.check_put("")
    sp.check_put([])
    sp.check_put("no separators at all")
    # a user property that merely contains a system name is not a system property
    sp.check_put(props(MY_DELAY="x", REAL_TOPIC_NOTE="../x", xRETRY_TOPIC="../y"))


def test_mentions_finds_exactly_the_system_names():
    for name in sp.RULES:
        assert sp.mentions(f"{name}\x01v\x02"), name                        # first property
        assert sp.mentions(f"UNIQ_KEY\x01a\x02{name}\x01v\x02"), name        # a later one
        assert sp.mentions("\x02".join([props(TAGS="a")] * 40 + [f"{name}\x01v"])), name
        assert not sp.mentions(f"MY_{name}\x01v\x02{name}X\x01v\x02"), name  # other names
        assert not sp.mentions(f"UNIQ_KEY\x01{name}\x02KEYS\x01{name}\x02"), name  # in values
    assert not sp.mentions("") and not sp.mentions(props(TAGS="a", KEYS="DELAY REAL_TOPIC"))


def test_ordinary_messages_are_not_parsed(monkeypatch):
    """The put path pays a few substring scans, never a parse, for messages without system properties."""
    def boom(*_):
        raise AssertionError("parsed")
    monkeypatch.setattr(sp, "value_problem", boom)
    ordinary = [props(TAGS="created", KEYS="order-1 order-2", WAIT="true", PGROUP="pg", ü="ß")] * 32
    assert not sp.mentions("\x02".join(ordinary))
    sp.check_put(ordinary)
    t0 = time.perf_counter()
    for _ in range(1000):
        sp.check_put(ordinary)
    assert (time.perf_counter() - t0) / 1000 < 100e-6  # generous: ~3 µs for 32 messages here


def test_read_int_never_raises():
    bad = []
    for value in BAD_INTS:
        assert sp.read_int({"TRANSACTION_CHECK_TIMES": value}, "TRANSACTION_CHECK_TIMES", 7, bad.append) == 7
    assert len(bad) == len(BAD_INTS) and all(r.startswith("property TRANSACTION_CHECK_TIMES") for r in bad)
    assert sp.read_int({}, "TRANSACTION_CHECK_TIMES", 3, bad.append) == 3 and len(bad) == len(BAD_INTS)  # absent: no report
    assert sp.read_int(props(REAL_QID="5"), "REAL_QID", 0) == 5
    assert sp.read_int(props(REAL_QID="5000"), "REAL_QID", 0) == 0                 # out of range: default
    assert sp.read_int("", "REAL_QID", 9) == 9 and sp.read_int(None, "REAL_QID", 9) == 9
    assert sp.read_int({"CHECK_IMMUNITY_TIME_IN_SECONDS": "inf"}, "CHECK_IMMUNITY_TIME_IN_SECONDS", 0) == 0
    assert sp.read_int({"X": "12"}, "X", 0) == 12 and sp.read_int({"X": "1e9"}, "X", 0) == 0  # no rule: any int
    assert sp.read_int({"TRAN_BORN_MS": 5}, "TRAN_BORN_MS", 1) == 1                 # not a string


def test_read_topic():
    bad = []
    assert sp.read_topic({"REAL_TOPIC": "Orders"}, "REAL_TOPIC", bad.append) == "Orders"
    assert sp.read_topic(props(REAL_TOPIC="../../x"), "REAL_TOPIC", bad.append) is None
    assert sp.read_topic({}, "REAL_TOPIC", bad.append) is None
    assert len(bad) == 1 and "REAL_TOPIC" in bad[0]


def test_first_problem_only():
    p = props(REAL_TOPIC="Orders", REAL_QID="1", CHECK_IMMUNITY_TIME_IN_SECONDS="inf")
    assert sp.first_problem(p, ("REAL_TOPIC", "REAL_QID")) is None
    assert "CHECK_IMMUNITY" in sp.first_problem(p)


# ---- the readers in the services --------------------------------------------------------------


def _half(props_, born_ms):
    return MessageExt("RMQ_SYS_TRANS_HALF_TOPIC", b"x", None, [], props_, "id", "", "", 0, 3, 0, born_ms, born_ms, 0)


def test_txn_checker_decides_past_poisoned_properties():
    from quiver_txn.checking import Checker, _BrokerState
    from quiver_txn.config import Config
    counters = collections.Counter()
    ck = Checker(types.SimpleNamespace(), Config(transaction_timeout_ms=1000, max_checks=3), counters)
    st, now, tx = _BrokerState(), int(time.time() * 1000), "__transactionId__"
    for poison in [{"CHECK_IMMUNITY_TIME_IN_SECONDS": "inf"}, {"CHECK_IMMUNITY_TIME_IN_SECONDS": "1e400"},
                   {"CHECK_IMMUNITY_TIME_IN_SECONDS": "nan"}, {"TRANSACTION_CHECK_TIMES": "x"},
                   {"TRAN_BORN_MS": "-inf"}, {"CHECK_IMMUNITY_TIME_IN_SECONDS": "9" * 5000}]:
        assert ck._decide(_half({tx: "a", **poison}, now - 5000), st, now) == "c"   # read as absent: checked
    assert counters["bad_system_properties"] == 6
    assert ck._decide(_half({tx: "a", "CHECK_IMMUNITY_TIME_IN_SECONDS": "60"}, now - 5000), st, now) == "r"


class _Req:
    def __init__(self, ext, code):
        from quiver.wire.requests import SCHEMAS
        self.ext, self.args, self.answered, self.replies = ext, SCHEMAS[code].decode(ext), False, []

    def reply(self, code, remark="", ext=None):
        self.answered = True
        self.replies.append((code, remark, reply_ext(self.args.CODE, ext) if ext is not None else None))

    def authorize(self, resource, *actions):  # auth off: a Service's Request allows everything
        pass


def test_broker_transactions_read_poisoned_halves(tmp_path):
    """TRANSACTION_LIST_OPEN, END_TRANSACTION and TRANSACTION_CHECK go on past malformed half properties
    (stored before put-time checks existed, or by a raw writer)."""
    from quiver.wire.names import is_valid_topic
    from quiver_broker.group_commit import GroupCommit
    from quiver_broker.store import MessageStore
    from quiver_broker.transaction import Transactions
    store = MessageStore(str(tmp_path / "s"), segment_bytes=1 << 16, flush_interval_ms=3_600_000)
    store.open()
    topics = {"T": {"read": 2, "write": 2, "perm": 6}}

    def topic_config(topic, create=False, system=False, queues=None):
        if not is_valid_topic(topic):
            raise MessageIllegalError("bad")
        return topics.setdefault(topic, {"read": queues or 1, "write": queues or 1, "perm": 6})
    counters = collections.Counter()
    commit = GroupCommit(store, sync=False, timeout_ms=5000, notify=lambda *a: None)
    tx = Transactions(store, types.SimpleNamespace(config=topic_config), types.SimpleNamespace(offsets={}),
                      types.SimpleNamespace(producers={}), commit, counters, push=lambda *a: False,
                      store_host=b"\x7f\0\0\x01\0\0\0\0")
    halves = {}
    for txid, extra in [("ok", {}), ("times", {"TRANSACTION_CHECK_TIMES": "x"}),
                        ("immune", {"CHECK_IMMUNITY_TIME_IN_SECONDS": "inf", "TRAN_PREPARED_QUEUE_OFFSET": "y"}),
                        ("evil", {"REAL_QID": "zz"}), ("evil2", {"REAL_TOPIC": "../../../outside"})]:
        p = {"__transactionId__": txid, "UNIQ_KEY": txid, "PGROUP": "pg", "REAL_TOPIC": "T", "REAL_QID": "1", **extra}
        res = store.put_batch("RMQ_SYS_TRANS_HALF_TOPIC", 0, [txid.encode()], [format_properties(p)], [0], 0,
                              int(time.time() * 1000), b"\x7f\0\0\x01\0\0\0\0")
        halves[txid] = (res.phys_offsets[0], res.first_queue_offset)
    try:
        req = _Req({"limit": 100}, RequestCode.TRANSACTION_LIST_OPEN)
        tx.list_open(req)
        code, _, out = req.replies[0]
        assert code == ResponseCode.SUCCESS and out["count"] == 5
        rows = {r["transaction_id"]: r for r in out["open"]}
        assert rows["times"]["checks"] == 0 and rows["immune"]["first_offset"] == halves["immune"][1]
        assert counters["bad_system_properties"] == 2
        req = _Req({"e": [[*halves["times"], "r"]]}, RequestCode.TRANSACTION_CHECK)
        tx.check(req)                                        # re-put with a clean count
        assert req.replies[0][2] == {"r": ["requeued"]}
        e = [[*halves[t], 8, t] for t in ("ok", "immune", "evil", "evil2")]
        req = _Req({"g": "pg", "e": e}, RequestCode.END_TRANSACTION)
        tx.end(req)                                          # a batch: one result per entry
        assert req.replies[0][2] == {"r": ["ok", "ok", "bad_real_queue", "bad_real_queue"]}
        assert tx.resolved.states == {"ok": "C", "immune": "C", "evil": "R", "evil2": "R"}
        assert store.max_offset("T", 1) == 2 and not (tmp_path / "outside").exists()
    finally:
        store.close()


# The scheduler's readers (poison_of, refused, its queues going on past poison) are tested in
# tests/unit/scheduler/test_scheduler_queues.py.


@pytest.mark.parametrize("name", sp.BROKER_WRITTEN)
def test_a_client_may_not_send_what_only_the_broker_writes(name):
    for props in ([f"{name}\x01x\x02"], [f"KEYS\x01k\x02{name}\x01x\x02"], ["TAGS\x01a\x02", f"UNIQ_KEY\x01u\x02{name}\x01\x02"]):
        with pytest.raises(MessageIllegalError, match=f"property {name} is written by the broker"):
            sp.check_client_put(props)
    # names that only share a prefix or a suffix, and the system properties clients do send, pass
    sp.check_client_put([f"{name}X\x01x\x02X{name}\x01x\x02", "DELAY\x013\x02PGROUP\x01pg\x02TRAN_MSG\x01true\x02"])
