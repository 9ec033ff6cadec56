"""Master/slave brokers (real processes): replication, SYNC_MASTER statuses, slave refusals, catch-up."""

import os
import signal

import pytest

from quiver import Admin, Message, Producer, SendStatus
from quiver.wire import record
from quiver.wire import requests as rq
from quiver.wire.codes import RequestCode, ResponseCode
from quiver.wire.transport import Transport

from support.ha import ha_cluster, status, wait_converged, wait_for, wait_slave_connected  # noqa: F401


def _pull_all(t, addr, topic, queue, upto):
    out, off = [], 0
    while off < upto:
        env = t.call(addr, RequestCode.PULL_MESSAGE, {"t": topic, "q": queue, "o": off, "n": 256},
                     timeout=5.0, ok=(ResponseCode.SUCCESS,))
        recs = record.decode_many(env.bodies[0])
        out.extend(recs)
        off = env.ext["next"]
    return out


def test_async_master_slave_converges_and_serves_same_records(ha_cluster):
    c, master, slave = ha_cluster("ASYNC_MASTER")
    t = Transport("test")
    try:
        Admin(namesrv=c.namesrv).create_topic("HaAsync", queues=4)
        wait_slave_connected(t, master)
        with Producer("pg", namesrv=c.namesrv) as p:
            futs = [p.send_async(Message("HaAsync", f"m-{i}-".encode() + bytes([i % 256]) * (i % 300),
                                         keys=[f"k{i}"])) for i in range(4000)]
            results = [f.result(30) for f in futs]
        assert {r.status for r in results} == {SendStatus.SEND_OK}  # ASYNC_MASTER answers at once
        end = wait_converged(t, master, slave)
        assert end == status(t, master)["store"]["max_phys_offset"]
        # the slave built its own ConsumeQueues and index with the same records
        wait_for(lambda: "HaAsync" in t.call(slave.addr, RequestCode.GET_ALL_TOPIC_CONFIG).ext["topics"], 10,
                 "the topic config to reach the slave")
        for q in range(4):
            hi = t.call(master.addr, RequestCode.GET_MAX_OFFSET, {"t": "HaAsync", "q": q}).ext["offset"]
            assert t.call(slave.addr, RequestCode.GET_MAX_OFFSET, {"t": "HaAsync", "q": q}).ext["offset"] == hi
            a, b = _pull_all(t, master.addr, "HaAsync", q, hi), _pull_all(t, slave.addr, "HaAsync", q, hi)
            assert [(r.phys_offset, r.body, r.props) for r in a] == [(r.phys_offset, r.body, r.props) for r in b]
        found = t.call(slave.addr, RequestCode.QUERY_MESSAGE, {"t": "HaAsync", "key": "k1234"}).ext["count"]
        assert found == 1
        st = status(t, slave)
        assert st["ha_role"] == "SLAVE" and st["broker_id"] == 1 and st["ha"]["lag_bytes"] == 0
        assert status(t, master)["ha_role"] == "ASYNC_MASTER"
    finally:
        t.close()


def test_slave_refuses_writes_and_end_transaction(ha_cluster):
    c, master, slave = ha_cluster("ASYNC_MASTER")
    t = Transport("test")
    try:
        for req in (rq.SendMessage(topic="X", metas=([0], [""])),
                    rq.EndTransaction(group="g", entries=[(0, 0, record.TX_COMMIT, "")]),
                    rq.CreateTopic(topic="X")):
            env = t.call(slave.addr, req, None, (b"x",), ok=tuple(ResponseCode))
            assert env.code == ResponseCode.SERVICE_NOT_AVAILABLE, (req, env.remark)
        # routes list both addresses by id; producers only write to the master
        Admin(namesrv=c.namesrv).create_topic("HaRoute", queues=2, wait_s=60)   # routed: registration is async
        route = Admin(namesrv=c.namesrv).topic_route("HaRoute")
        assert route["brokers"][0]["addrs"] == {"0": master.addr, "1": slave.addr}
        with Producer("pg", namesrv=c.namesrv) as p:
            assert p.send(Message("HaRoute", b"x")).status is SendStatus.SEND_OK
    finally:
        t.close()


def test_sync_master_waits_for_the_slave(ha_cluster):
    c, master, slave = ha_cluster("SYNC_MASTER", master_args=("--slave-timeout-ms", "500"))
    t = Transport("test")
    try:
        Admin(namesrv=c.namesrv).create_topic("HaSync", queues=2)
        wait_slave_connected(t, master)
        with Producer("pg", namesrv=c.namesrv, retries=0) as p:
            r = p.send(Message("HaSync", b"one"))
            assert r.status is SendStatus.SEND_OK
            os.kill(slave.pid, signal.SIGSTOP)  # connected but silent: no ack
            try:
                r = p.send(Message("HaSync", b"two"), timeout=5)
                assert r.status is SendStatus.FLUSH_SLAVE_TIMEOUT
            finally:
                os.kill(slave.pid, signal.SIGCONT)
            wait_for(lambda: p.send(Message("HaSync", b"three")).status is SendStatus.SEND_OK, 10,
                     "SEND_OK once the slave acks again")
            slave.kill()
            # the master drops the silent slave after --ha-housekeeping-ms: SLAVE_NOT_AVAILABLE at once
            wait_for(lambda: p.send(Message("HaSync", b"four"), timeout=5).status is SendStatus.SLAVE_NOT_AVAILABLE,
                     15, "SLAVE_NOT_AVAILABLE without a slave")
        # every message is stored on the master whatever the status
        hi = sum(t.call(master.addr, RequestCode.GET_MAX_OFFSET, {"t": "HaSync", "q": q}).ext["offset"]
                 for q in range(2))
        assert hi >= 4
    finally:
        t.close()


def test_admin_ha_status_lists_roles_and_lag(ha_cluster):
    c, master, slave = ha_cluster("SYNC_MASTER")
    t = Transport("test")
    try:
        wait_slave_connected(t, master)
        with Producer("pg", namesrv=c.namesrv) as p:
            futs = [p.send_async(Message("HaStat", b"x" * 200)) for _ in range(500)]
            assert {f.result(30).status for f in futs} == {SendStatus.SEND_OK}
        admin = Admin(namesrv=c.namesrv)

        def caught_up():
            # the lag the master shows follows the slave's reports, which trail on a loaded machine
            rows = {r["id"]: r for r in admin.ha_status()}
            slave_row = rows.get(1, {})
            done = slave_row.get("ack_latency", {}).get("n") and slave_row.get("lag_bytes") == 0
            return rows if done and slave_row.get("lag_ms") == 0 else None
        by_id = wait_for(caught_up, 60, "ack latency samples and no slave lag")
        assert by_id[0]["role"] == "SYNC_MASTER" and by_id[1]["role"] == "SLAVE"
        assert by_id[1]["max_offset"] == by_id[0]["max_offset"] > 0
        assert by_id[1]["ack_latency"]["n"] > 0
    finally:
        t.close()


@pytest.mark.slow
def test_slave_restart_catches_up_from_its_own_offset(ha_cluster):
    c, master, slave = ha_cluster("ASYNC_MASTER")
    t = Transport("test")
    try:
        wait_slave_connected(t, master)
        with Producer("pg", namesrv=c.namesrv) as p:
            for f in [p.send_async(Message("HaRestart", b"a" * 500)) for _ in range(2000)]:
                f.result(30)
            before = wait_converged(t, master, slave)
            slave.stop()
            for f in [p.send_async(Message("HaRestart", b"b" * 500)) for _ in range(2000)]:
                f.result(30)
        slave.start()
        c.wait()
        wait_converged(t, master, slave)
        log = open(master.log_path).read()
        assert f"connected at offset {before} " in log, "the restarted slave did not resume from its own offset"
        assert status(t, slave)["store"]["replicated_bytes"] == status(t, master)["store"]["max_phys_offset"] - before
    finally:
        t.close()
