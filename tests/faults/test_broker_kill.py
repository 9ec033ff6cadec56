"""kill -9 the broker during a SYNC-flush load: every acknowledged message survives intact."""

import threading
import time

import pytest

from quiver import Admin, Message, Producer, PullConsumer, SendStatus
from quiver.errors import QuiverError

pytestmark = [pytest.mark.slow, pytest.mark.faults]


def test_sync_flush_kill_restart_serves_every_acknowledged_message(make_cluster):
    c = make_cluster(broker_args=("--flush", "sync", "--segment-bytes", str(256 * 1024)))
    broker = next(s for s in c.services if s.role == "broker")
    Admin(namesrv=c.namesrv).create_topic("Durable", queues=4)
    acked: dict[str, tuple] = {}
    lock = threading.Lock()
    stop = threading.Event()

    def produce(worker: int):
        with Producer(f"pg{worker}", namesrv=c.namesrv, retries=0, send_timeout=2.0) as p:
            i = 0
            while not stop.is_set() and i < 20_000:
                body = f"w{worker}-{i}-".encode() + bytes([i % 251]) * (i % 700)
                futs = [p.send_async(Message("Durable", body + str(j).encode(), keys=[f"w{worker}-{i}-{j}"]))
                        for j in range(50)]
                for j, f in enumerate(futs):
                    try:
                        r = f.result(5)
                    except QuiverError:
                        continue
                    if r.status is SendStatus.SEND_OK:
                        with lock:
                            acked[r.msg_id] = (body + str(j).encode(), r.queue_id, r.queue_offset)
                i += 1

    threads = [threading.Thread(target=produce, args=(w,)) for w in range(3)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 20
    while len(acked) < 3000 and time.monotonic() < deadline:
        time.sleep(0.05)
    broker.kill()                          # SIGKILL mid-load
    stop.set()
    for t in threads:
        t.join(30)
    assert len(acked) >= 3000
    c.restart(broker)
    c.wait_registered(1)
    seen = {}
    with PullConsumer("verify", namesrv=c.namesrv, consume_from="first") as pc:
        pc.subscribe("Durable")
        deadline = time.monotonic() + 60
        idle = 0
        while time.monotonic() < deadline and idle < 6:
            msgs = pc.poll(0.5)
            idle = 0 if msgs else idle + 1
            for m in msgs:
                assert m.msg_id not in seen, "a message was served twice"
                seen[m.msg_id] = (m.body, m.queue_id, m.queue_offset)
    missing = [k for k in acked if k not in seen]
    assert not missing, f"{len(missing)} acknowledged messages lost"
    for mid, sent in acked.items():
        assert seen[mid] == sent, "an acknowledged message came back different"
