"""Poisoned names and properties over real processes: refused at the door, never a path outside the data dir,
never a stopped queue or check round."""

import os
import time

import pytest
import zmq

from quiver import Admin, Message, Producer, TransactionProducer, TransactionState
from quiver.wire import protocol
from quiver.wire.codes import RequestCode, ResponseCode
from quiver.errors import MessageIllegalError
from tests.support.scheduler import LEVELS_MS, consumer, create_topic, drain, sched_cluster

MARK = "POISON_MARK"
TRAVERSALS = [f"../../../{MARK}", f"../../../../{MARK}", f"../../{MARK}", f"..\\..\\{MARK}", "..", f"/tmp/{MARK}"]
TX_PREPARED = 0x4


class Raw:
    """A bare DEALER on a service: exactly the frames a test writes."""

    def __init__(self, addr: str):
        self.sock = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.RCVTIMEO, 5000)
        self.sock.connect(f"tcp://{addr}")
        self.ids = iter(range(1, 1 << 30))

    def ask(self, code, ext, bodies=()):
        self.sock.send_multipart(protocol.request(code, next(self.ids), ext, list(bodies)))
        return protocol.decode(self.sock.recv_multipart())

    def send(self, topic, props, sys_flag=0, body=b"x", queue_id=0):
        return self.ask(RequestCode.SEND_MESSAGE, {"t": topic, "q": queue_id, "m": [[0, props]], "sf": sys_flag}, [body])

    def close(self):
        self.sock.close()


def _props(**kv) -> str:
    kv.setdefault("UNIQ_KEY", f"ID{time.monotonic_ns()}")
    return "".join(f"{k}\x01{v}\x02" for k, v in kv.items())


def _broker(cluster):
    return next(s for s in cluster.services if s.role == "broker")


def _marks(root) -> list[str]:
    return [os.path.join(r, n) for r, dirs, files in os.walk(root) for n in dirs + files if MARK in n]


@pytest.fixture
def raw(cluster):
    r = Raw(_broker(cluster).addr)
    yield r
    r.close()


def test_poisoned_system_properties_are_refused_at_put(cluster, raw, tmp_path):
    cases = [
        (_props(PGROUP="pg", CHECK_IMMUNITY_TIME_IN_SECONDS="inf"), TX_PREPARED, "CHECK_IMMUNITY_TIME_IN_SECONDS"),
        (_props(PGROUP="pg", TRANSACTION_CHECK_TIMES="x"), TX_PREPARED, "TRANSACTION_CHECK_TIMES"),
        (_props(PGROUP="pg", TRAN_BORN_MS="-1"), TX_PREPARED, "TRAN_BORN_MS"),
        (_props(DELAY="2", REAL_QID="99999"), 0, "REAL_QID"),
        (_props(DELAY="1e3"), 0, "DELAY"),
        (_props(TIMER_DELIVER_MS="inf"), 0, "TIMER_DELIVER_MS"),
        (_props(MAX_RECONSUME_TIMES="nan"), 0, "MAX_RECONSUME_TIMES"),
        (_props(RECONSUME_TIME=str(2**31)), 0, "RECONSUME_TIME"),
    ] + [(_props(DELAY="1", REAL_TOPIC=t), 0, "REAL_TOPIC") for t in TRAVERSALS] \
      + [(_props(RETRY_TOPIC=t), 0, "RETRY_TOPIC") for t in TRAVERSALS]
    for props, sys_flag, name in cases:
        env = raw.send("Poison", props, sys_flag)
        assert env.code == ResponseCode.MESSAGE_ILLEGAL, (name, env.remark)
        assert f"property {name} must be" in env.remark, env.remark
    # a message to a %RETRY% topic (apps may send there) with a path for its origin, and a batch with one bad entry
    env = raw.send("%RETRY%pg", _props(RETRY_TOPIC="../../x"))
    assert env.code == ResponseCode.MESSAGE_ILLEGAL and "RETRY_TOPIC" in env.remark
    env = raw.ask(RequestCode.SEND_BATCH_MESSAGE, {"t": "Poison", "q": 0, "l": [1, 1],
                                                   "m": [[0, _props()], [0, _props(REAL_QID="-1")]]}, [b"ab"])
    assert env.code == ResponseCode.MESSAGE_ILLEGAL and "REAL_QID" in env.remark
    # through the SDK: user properties reach the broker, which names the property
    with TransactionProducer("pg", namesrv=cluster.namesrv) as tp:
        with pytest.raises(MessageIllegalError, match="CHECK_IMMUNITY_TIME_IN_SECONDS"):
            tp.send_in_transaction(Message("Poison", b"x", properties={"CHECK_IMMUNITY_TIME_IN_SECONDS": "inf"}),
                                   lambda m, a: TransactionState.COMMIT)
    # valid system properties still pass, and nothing was stored by the refusals
    env = raw.send("Poison", _props(DELAY="0", MAX_RECONSUME_TIMES="-1"))
    assert env.code == ResponseCode.SUCCESS and env.ext["o"] == 0, env.remark
    assert _marks(tmp_path) == []


def test_reput_and_delete_with_path_names_stay_inside(cluster, raw, tmp_path):
    admin = Admin(namesrv=cluster.namesrv)
    create_topic(admin, "Real", 2)
    victim = tmp_path / "cluster0" / "victim"
    victim.mkdir()
    (victim / "keep").write_text("precious")
    parked = [_props(REAL_TOPIC=t, REAL_QID="0") for t in TRAVERSALS] + [
        _props(REAL_TOPIC="Real", REAL_QID="x"), _props(REAL_TOPIC="Real", REAL_QID="2"),
        _props(REAL_TOPIC="Real", REAL_QID="0", CHECK_IMMUNITY_TIME_IN_SECONDS="inf")]
    for props in parked:
        env = raw.ask(RequestCode.SCHEDULE_REPUT, {"m": [[0, props, 1, 0, 0, 1]]}, [b"x"])
        assert env.code == ResponseCode.MESSAGE_ILLEGAL, env.remark
        assert env.remark.startswith("entry 0: property ") and env.ext["bad"] == [0], env.remark
    # a batch: the bad entries are listed, nothing is put, the good one goes through once they are left out
    batch = [_props(REAL_TOPIC="Real", REAL_QID="1"), _props(REAL_TOPIC=TRAVERSALS[0]), _props(REAL_TOPIC="Real", REAL_QID="9")]
    env = raw.ask(RequestCode.SCHEDULE_REPUT, {"m": [[0, p, 1, 0, 0, 1] for p in batch], "l": [1, 1, 1]}, [b"abc"])
    assert env.code == ResponseCode.MESSAGE_ILLEGAL and env.ext["bad"] == [1, 2] and "more bad" in env.remark
    env = raw.ask(RequestCode.SCHEDULE_REPUT, {"m": [[0, batch[0], 1, 0, 0, 1]]}, [b"a"])
    assert env.code == ResponseCode.SUCCESS and env.ext["n"] == 1
    # roll entries are checked too
    env = raw.ask(RequestCode.SCHEDULE_REPUT, {"m": [[0, _props(TIMER_DELIVER_MS="x"), 1, 0, 0, 1]], "roll": True}, [b"x"])
    assert env.code == ResponseCode.MESSAGE_ILLEGAL and "TIMER_DELIVER_MS" in env.remark
    for name in ["../../../victim", "../../victim", "..", ".", "../..", "victim/..", "../../../victim/keep"]:
        env = raw.ask(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": name})
        assert env.code != ResponseCode.SUCCESS, name
    assert (victim / "keep").read_text() == "precious"
    # system topics cannot be deleted: the half queue holds every open transaction
    for name in ["RMQ_SYS_TRANS_HALF_TOPIC", "SCHEDULE_TOPIC_XXXX", "rmq_sys_wheel_timer"]:
        env = raw.ask(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": name})
        assert env.code == ResponseCode.NO_PERMISSION and "system topic" in env.remark, (name, env.remark)
    assert _marks(tmp_path) == []
    status = raw.ask(RequestCode.STATUS, {}).ext["status"]
    assert status["counters"]["schedule_reput_illegal"] >= len(parked) + 2
    # the broker still serves: a send/pull round trip
    with Producer("pp", namesrv=cluster.namesrv) as p:
        p.send(Message("Real", b"alive"))
    c = consumer(cluster.namesrv, "Real", "poison-check")
    try:
        assert b"alive" in [m.body for m in drain(c, 2, 10.0)]
    finally:
        c.shutdown()
    admin.shutdown()


def test_one_refused_message_does_not_stop_a_level_queue(make_cluster, tmp_path):
    """A parked message whose REAL_QID is no longer a queue of its topic (scaled in while it waited) is refused
    by the broker at re-put; the scheduler drops it, counted, and delivers the rest of the queue."""
    c, scheds, admin = sched_cluster(make_cluster)
    create_topic(admin, "Shrink", 4)
    create_topic(admin, "Fine", 1)
    level = 4  # 2 s: time to scale the topic in before it is due
    raw = Raw(_broker(c).addr)
    try:
        env = raw.send("Shrink", _props(DELAY=str(level)), body=b"doomed", queue_id=3)
        assert env.code == ResponseCode.SUCCESS, env.remark
    finally:
        raw.close()
    with Producer("sp", namesrv=c.namesrv) as p:
        for i in range(3):
            p.send(Message("Fine", f"fine-{i}".encode(), delay_level=level))
    admin.create_topic("Shrink", queues=1)   # queue 3 is gone (read and write)
    fine = consumer(c.namesrv, "Fine")
    try:
        got = drain(fine, 3, LEVELS_MS[level - 1] / 1000 + 10)
        assert sorted(m.body for m in got) == [b"fine-0", b"fine-1", b"fine-2"]
        deadline = time.monotonic() + 10
        while admin.status(scheds[0].addr)["counters"].get("poisoned_skipped", 0) < 1:
            assert time.monotonic() < deadline, admin.status(scheds[0].addr)
            time.sleep(0.1)
        # the level queue moves on: a later message of the same level is delivered too
        with Producer("sp2", namesrv=c.namesrv) as p:
            p.send(Message("Fine", b"after", delay_level=level))
        assert [m.body for m in drain(fine, 1, LEVELS_MS[level - 1] / 1000 + 10)] == [b"after"]
    finally:
        fine.shutdown()
        admin.shutdown()


def test_transactions_go_on_after_poison(make_cluster):
    """After poisoned half messages are refused, a normal transaction is still checked and committed."""
    c = make_cluster()
    admin = Admin(namesrv=c.namesrv)
    create_topic(admin, "Tx", 2)
    c.add_service("txn-checker", "quiver_txn", "--check-interval-ms", "300", "--transaction-timeout-ms", "600")
    c.wait()
    raw = Raw(_broker(c).addr)
    try:
        for poison in [{"CHECK_IMMUNITY_TIME_IN_SECONDS": "inf"}, {"TRANSACTION_CHECK_TIMES": "x"},
                       {"REAL_TOPIC": "../../../x"}, {"TRAN_PREPARED_QUEUE_OFFSET": "-5"}]:
            env = raw.send("Tx", _props(PGROUP="tpg", TRAN_MSG="true", **poison), TX_PREPARED)
            assert env.code == ResponseCode.MESSAGE_ILLEGAL, env.remark
    finally:
        raw.close()
    with TransactionProducer("tpg", namesrv=c.namesrv, checker=lambda m: TransactionState.COMMIT) as tp:
        r = tp.send_in_transaction(Message("Tx", b"later"), lambda m, a: TransactionState.UNKNOWN)
        got = []
        pc = consumer(c.namesrv, "Tx", "tx-after-poison")
        try:
            got = drain(pc, 1, 15.0)
        finally:
            pc.shutdown()
        assert [m.msg_id for m in got] == [r.transaction_id] and tp._checks_answered >= 1
    checks = admin.status(next(s for s in c.services if s.role == "txn-checker").addr)["checks"]
    assert checks.get("bad_system_properties", 0) == 0 and checks.get("failed_rounds", 0) == 0 and checks["rounds"] >= 1
    admin.shutdown()
