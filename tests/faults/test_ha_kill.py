"""kill -9 a master: SEND_OK messages survive on the slave; consumers go on reading from it."""

import threading
import time

import pytest

from quiver import Admin, Message, Producer, PullConsumer, SendStatus
from quiver.wire.codes import RequestCode
from quiver.errors import QuiverError
from quiver.wire.transport import Transport


from support.ha import ha_cluster, status, wait_converged, wait_for, wait_slave_connected  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.faults]


def test_sync_master_kill_every_acknowledged_message_is_on_the_slave(ha_cluster):
    c, master, slave = ha_cluster("SYNC_MASTER", master_args=("--segment-bytes", str(1 << 20)),
                                  slave_args=("--segment-bytes", str(1 << 20)))
    t = Transport("test")
    Admin(namesrv=c.namesrv).create_topic("HaDurable", queues=4)
    wait_slave_connected(t, master)
    acked: dict[str, tuple] = {}
    lock = threading.Lock()
    stop = threading.Event()

    def produce(worker: int):
        with Producer(f"pg{worker}", namesrv=c.namesrv, retries=0, send_timeout=3.0) as p:
            i = 0
            while not stop.is_set() and i < 20_000 // 2 // 50:
                body = f"w{worker}-{i}-".encode() + bytes([i % 251]) * (i % 700)
                msgs = [Message("HaDurable", body + str(j).encode()) for j in range(50)]
                futs = [p.send_async(m) for m in msgs]
                for m, f in zip(msgs, futs):
                    try:
                        r = f.result(6)
                    except QuiverError:
                        continue
                    if r.status is SendStatus.SEND_OK:
                        with lock:
                            acked[r.msg_id] = (m.body, r.queue_id, r.queue_offset)
                i += 1

    threads = [threading.Thread(target=produce, args=(w,)) for w in range(2)]
    for th in threads:
        th.start()
    wait_for(lambda: len(acked) >= 8000, 60, "8000 acknowledged sends")
    master.kill()                                   # SIGKILL mid-load
    stop.set()
    for th in threads:
        th.join(30)
    assert len(acked) >= 8000
    seen = {}
    with PullConsumer("verify", namesrv=c.namesrv, consume_from="first") as pc:  # falls back to the slave
        pc.subscribe("HaDurable")
        deadline = time.monotonic() + 90
        idle = 0
        while time.monotonic() < deadline and (idle < 8 or len(seen) < len(acked)):
            msgs = pc.poll(0.5)
            idle = 0 if msgs else idle + 1
            for m in msgs:
                seen[m.msg_id] = (m.body, m.queue_id, m.queue_offset)
            if idle > 40:
                break
    t.close()
    missing = [k for k in acked if k not in seen]
    assert not missing, f"{len(missing)} of {len(acked)} acknowledged messages are not on the slave"
    for mid, sent in acked.items():
        assert seen[mid] == sent, "an acknowledged message came back different from the slave"


def test_consumers_read_from_slave_while_master_is_down_and_return(ha_cluster):
    c, master, slave = ha_cluster("ASYNC_MASTER")
    t = Transport("test")
    admin = Admin(namesrv=c.namesrv)
    admin.create_topic("HaRead", queues=2)
    wait_slave_connected(t, master)
    with Producer("pg", namesrv=c.namesrv) as p:
        for f in [p.send_async(Message("HaRead", f"a{i}".encode())) for i in range(2000)]:
            f.result(30)
    wait_converged(t, master, slave)
    wait_for(lambda: "HaRead" in t.call(slave.addr, RequestCode.GET_ALL_TOPIC_CONFIG).ext["topics"], 10, "topic sync")
    got: list = []
    pc = PullConsumer("cg", namesrv=c.namesrv, consume_from="first", commit_interval_ms=1000, suspend_ms=2000)
    pc._master_retry_s = 1.0
    pc.subscribe("HaRead")
    pc.start()
    try:
        wait_for(lambda: got.extend(pc.poll(0.2)) or len(got) >= 500, 30, "500 messages from the master")
        master.kill()
        wait_for(lambda: got.extend(pc.poll(0.2)) or len({m.body for m in got}) >= 2000, 60,
                 "the rest from the slave")
        pc.commit()  # stored on the slave
        on_slave = {q: t.call(slave.addr, RequestCode.QUERY_CONSUMER_OFFSET, {"g": "cg", "t": "HaRead", "q": q}).ext["offset"]
                    for q in range(2)}
        assert sum(on_slave.values()) == 2000
        before_return = {q: max(m.queue_offset for m in got if m.queue_id == q) for q in range(2)}
        c.restart(master)
        c.wait_registered(2)
        # the master took the slave's offsets before serving: nothing consumed there is lost
        def master_offsets():
            try:  # the test's socket to the restarted master reconnects first
                return [t.call(master.addr, RequestCode.QUERY_CONSUMER_OFFSET,
                               {"g": "cg", "t": "HaRead", "q": q}).ext["offset"] for q in range(2)]
            except QuiverError:
                return None
        offs = wait_for(master_offsets, 10, "the restarted master to answer")
        assert offs[0] >= on_slave[0] and offs[1] >= on_slave[1], (offs, on_slave)
        n = len(got)
        with Producer("pg", namesrv=c.namesrv) as p:
            for f in [p.send_async(Message("HaRead", f"b{i}".encode())) for i in range(500)]:
                assert f.result(30).status is SendStatus.SEND_OK
        wait_for(lambda: got.extend(pc.poll(0.2)) or len({m.body for m in got}) >= 2500, 60,
                 "the new messages after the master returned")
        after = got[n:]
        for q in range(2):
            offs = [m.queue_offset for m in after if m.queue_id == q]
            assert not offs or min(offs) > before_return[q] - 32, "an offset went backwards on the master's return"
        # held pulls on the slave end within their suspend time; the next ones go to the master
        wait_for(lambda: pc.poll(0.2) is not None and all(st.addr == master.addr for st in pc._queues.values()),
                 30, "reads to return to the master")
    finally:
        pc.shutdown()
        t.close()
