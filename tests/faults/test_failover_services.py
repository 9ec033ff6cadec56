"""After an automatic failover the scheduler and the txn-checker follow the new master: a delayed
message stored before kill -9 of the master is delivered, and a transaction left open is
checked (through the new master) and committed. Real processes on loopback."""

import time

import pytest

from faults.store_checks import wait_for
from quiver import Admin, Message, Producer, PullConsumer, TransactionProducer, TransactionState
from support.failover import Rig
from support.scheduler import LEVELS, UNITS, wait_owned

pytestmark = [pytest.mark.slow, pytest.mark.faults]

CHECKER = ("--check-interval-ms", "300", "--transaction-timeout-ms", "800")
DELAY_LEVEL = 6  # 4 s in LEVELS: due after the failover


@pytest.fixture
def rig(tmp_path):
    r = Rig(str(tmp_path), broker_args=("--delay-levels", LEVELS))
    yield r
    r.stop()


def test_delayed_message_and_transaction_check_survive_a_failover(rig):
    g = rig.wait_group(3)
    ns = rig.c.namesrv
    admin = Admin(namesrv=ns)
    for topic in ("FoDelay", "FoTx"):
        admin.create_topic(topic, queues=2)
    sched = rig.c.add_service("scheduler", "quiver_scheduler")
    rig.c.add_service("txn-checker", "quiver_txn", *CHECKER)
    rig.c.wait()
    wait_owned(admin, [sched], UNITS)
    answer = {"state": TransactionState.UNKNOWN}
    asked = []

    def checker(msg):
        asked.append(msg.keys[0])
        return answer["state"]
    # heartbeats often: the new master asks a producer it has heard from
    with TransactionProducer("fo-tx", namesrv=ns, checker=checker, heartbeat_interval_s=0.5) as tp, \
            Producer("fo-delay", namesrv=ns) as p:
        p.send(Message("FoDelay", b"warm"))
        tp.send_in_transaction(Message("FoTx", b"tx-1", keys=["tx-1"]), lambda m, a: TransactionState.UNKNOWN)
        p.send(Message("FoDelay", b"later", delay_level=DELAY_LEVEL))
        rig.wait_topics()  # the replicas know the system topics the new master serves
        wait_for(lambda: "tx-1" in asked, 20, "a check of the open transaction before the failover")
        old = rig.broker_at(g["master"])
        old.kill()
        rig.wait_group(1, not_master=old.addr)
        answer["state"] = TransactionState.COMMIT  # only a check made after the failover commits
        got = {}
        with PullConsumer("fo-cg", namesrv=ns, consume_from="first") as pc:
            pc.subscribe("FoDelay")
            pc.subscribe("FoTx")
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not {b"later", b"tx-1"} <= set(got):
                for m in pc.poll(0.3):
                    got.setdefault(m.body, m.topic)
    assert got.get(b"later") == "FoDelay", f"the delayed message was not delivered after the failover: {got}"
    assert got.get(b"tx-1") == "FoTx", f"the open transaction was not committed after the failover: {got}"
    assert not admin.status(sched.addr)["starting"]
    admin.shutdown()
