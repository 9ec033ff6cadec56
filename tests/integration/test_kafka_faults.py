"""kill -9 of the Kafka gateway while confluent-kafka produces with acks=all: every acknowledged message is
stored, and the client carries on through the restarted gateway."""

import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402

from quiver import Admin  # noqa: E402
from quiver.tools.local import LocalCluster, free_port, wait_healthy  # noqa: E402
from support.waiting import wait_for  # noqa: E402

pytestmark = [pytest.mark.kafka, pytest.mark.faults, pytest.mark.slow]


def test_kill_9_mid_produce_loses_nothing_acknowledged(tmp_path):
    c = LocalCluster(str(tmp_path))
    try:
        c.add_core()
        bootstrap = f"127.0.0.1:{free_port()}"
        gw = c.add_service("kafka", "quiver_kafka", "--kafka-listen", bootstrap, data=False)
        c.wait()
        admin = Admin(namesrv=c.namesrv)
        admin.create_topic("KfKill", queues=2)
        acked, failed = [], []

        def report(err, msg):
            (failed if err else acked).append(msg.value())
        p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2, "message.timeout.ms": 60_000,
                      "reconnect.backoff.max.ms": 200})
        sent = 0
        deadline = time.monotonic() + 60
        while sent < 600 and time.monotonic() < deadline:
            p.produce("KfKill", b"m-%d" % sent, partition=sent % 2, on_delivery=report)
            sent += 1
            p.poll(0)
            if sent == 200:
                gw.kill()                    # SIGKILL mid-stream: what is in flight has no answer yet
                gw.start()
                wait_healthy([gw])
            time.sleep(0.002)
        assert p.flush(60) == 0
        assert len(acked) >= 400, (len(acked), failed[:3])     # the client went on through the new gateway
        cons = Consumer({"bootstrap.servers": bootstrap, "group.id": "kf-kill", "fetch.wait.max.ms": 100})
        try:
            cons.assign([TopicPartition("KfKill", i, confluent_kafka.OFFSET_BEGINNING) for i in (0, 1)])
            stored = set()

            def read_all():
                stored.update(m.value() for m in cons.consume(500, 0.3) if m.error() is None)
                return set(acked) <= stored
            wait_for(read_all, 60, "every acknowledged message read back")
        finally:
            cons.close()
        admin.shutdown()
    finally:
        c.stop()
