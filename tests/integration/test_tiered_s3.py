"""Tiered storage against a real S3-compatible server (moto in server mode, a process on loopback):
segments small enough to roll often are uploaded and dropped locally, the store goes down while
producing (puts go on, uploads catch up), the broker is killed -9 with uploads pending and resumes
them, every message reads back byte for byte from offset 0 (SDK pull, key, msgId), and an object
corrupted in the store is reported, not served."""

import os
import selectors
import socket
import subprocess
import sys
import threading

import pytest

from quiver import Admin, Message, Producer, PullConsumer, SendStatus
from quiver.tools.local import free_port, wait_healthy
from tests.support.fuzz_cluster import status
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

BUCKET = "quiver-tiered"
TOPIC = "Tiered"


class Gate:
    """A TCP forwarder on a fixed loopback port that can be closed (connections refused) and opened
    again: the object store going down and coming back, as the broker sees it."""

    def __init__(self, target_port: int):
        self.port = free_port()
        self.target = ("127.0.0.1", target_port)
        self.lock = threading.Lock()
        self.socks: list[socket.socket] = []
        self.server: socket.socket | None = None
        self.open()

    def open(self) -> None:
        self.server = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, args=(self.server,), daemon=True).start()

    def close(self) -> None:
        self.server.close()
        with self.lock:
            for s in self.socks:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
            self.socks.clear()

    def _accept(self, server) -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            with self.lock:
                self.socks += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    @staticmethod
    def _pump(a, b) -> None:
        sel = selectors.DefaultSelector()
        sel.register(a, selectors.EVENT_READ, b)
        sel.register(b, selectors.EVENT_READ, a)
        try:
            while True:
                for key, _ in sel.select(1.0):
                    data = key.fileobj.recv(65536)
                    if not data:
                        return
                    key.data.sendall(data)
        except OSError:
            return
        finally:
            a.close()
            b.close()


@pytest.fixture
def s3(monkeypatch):
    """A moto S3 server process (stopped by PID) with one bucket; the broker reaches it through a Gate."""
    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                 "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(k, v)
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    import boto3
    client = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1")

    def up():
        try:
            client.create_bucket(Bucket=BUCKET)
            return True
        except Exception:
            return False
    try:
        wait_for(up, 30, "the moto server to answer")
        gate = Gate(port)
        yield client, gate
        gate.close()
    finally:
        proc.kill()
        proc.wait(10)


def status_of(cluster, broker):
    return status(broker.addr, timeout=5)


def send(namesrv, first, n):
    with Producer("tiered-p", namesrv=namesrv) as p:
        futs = [p.send_async(Message(TOPIC, body(i), keys=[f"key-{i}"])) for i in range(first, first + n)]
        res = [f.result(60) for f in futs]
    assert all(r.status is SendStatus.SEND_OK for r in res)
    return res


def body(i: int) -> bytes:
    return (f"message {i} ".encode() * (1 + i % 20))[:400] + bytes([i % 256]) * 16


def test_tiered_store_on_s3(make_cluster, s3):
    client, gate = s3
    cluster = make_cluster(broker_args=(
        "--tiered-store", f"s3://{BUCKET}/brokers/a", "--s3-endpoint", f"http://127.0.0.1:{gate.port}",
        "--segment-bytes", "65536", "--local-retention-bytes", "0", "--clean-interval-ms", "500",
        "--flush-interval-ms", "100", "--tiered-cache-bytes", str(1 << 17)))
    broker = next(s for s in cluster.services if s.role == "broker")
    admin = Admin(namesrv=cluster.namesrv)
    admin.create_topic(TOPIC, queues=2)
    sent = send(cluster.namesrv, 0, 1500)

    def tiered():
        return status_of(cluster, broker)["store"]["tiered"]
    wait_for(lambda: tiered()["uploaded_segments"] >= 3, 30, "first uploads")

    # the store goes down: puts go on, uploads fail and wait
    gate.close()
    sent += send(cluster.namesrv, 1500, 1500)
    wait_for(lambda: tiered()["upload_errors"] >= 1, 30, "an upload to fail while the store is down")
    assert tiered()["pending_segments"] >= 1
    # kill -9 with uploads pending, the store back, a restart: the uploads resume
    broker.kill()
    gate.open()
    broker.start()
    wait_healthy([broker])
    wait_for(lambda: (t := status_of(cluster, broker)["store"]) and t["tiered"]["pending_segments"] == 0
             and t["segments"] == 1, 60, "every sealed segment uploaded and dropped locally")
    st = status_of(cluster, broker)["store"]
    assert st["tiered"]["remote_segments"] >= 10 and st["min_phys_offset"] > 0
    rows = admin.topic_status(TOPIC)   # `quiver topic status`: remote [0, local_min), local [local_min, max)
    assert all(r["min_offset"] == 0 < r["local_min_offset"] <= r["max_offset"] for r in rows), rows

    # every message back from offset 0, byte for byte, from the object store
    want = {(r.queue_id, r.queue_offset): (r.msg_id, i) for i, r in enumerate(sent)}
    got = {}
    with PullConsumer("tiered-c", namesrv=cluster.namesrv, consume_from="first") as c:
        c.subscribe(TOPIC)
        wait_for(lambda: [got.setdefault((m.queue_id, m.queue_offset), m) for m in c.poll(0.5)] is not None
                 and len(got) >= len(want), 60, "every message pulled back")
    assert set(got) == set(want)
    assert tiered()["background_fetches"] > 0   # pulls waited for the store off the broker's thread
    for k, m in got.items():
        i = want[k][1]
        assert m.body == body(i) and m.keys == [f"key-{i}"]
    for i in (0, 7, 1499, 2999):
        assert [m.body for m in admin.query_by_key(TOPIC, f"key-{i}")] == [body(i)]
        assert admin.view_message(sent[i].msg_id, TOPIC).body == body(i)

    # an object corrupted in the store: reported, never served
    key = "brokers/a/commitlog/00000000000000000000"
    data = bytearray(client.get_object(Bucket=BUCKET, Key=key)["Body"].read())
    data[2000] ^= 0x5A
    client.put_object(Bucket=BUCKET, Key=key, Body=bytes(data))
    broker.stop()   # a fresh start: nothing of that object in the broker's cache
    broker.start()
    wait_healthy([broker])
    from quiver.client import queue_puller
    from quiver.errors import QuiverError
    qid = sent[0].queue_id
    addr = admin.broker_addr(broker_name(cluster), TOPIC)
    with pytest.raises(QuiverError) as err:
        pulled = queue_puller.fetch(admin, addr, queue_puller.request(TOPIC, qid, 0, max_msgs=32))
        raise AssertionError(f"served: {pulled.status}")
    assert "checksum" in err.value.remark
    assert status_of(cluster, broker)["store"]["tiered"]["damaged_chunks"] >= 1
    admin.shutdown()


def broker_name(cluster) -> str:
    b = next(s for s in cluster.services if s.role == "broker")
    return b.args[b.args.index("--broker-name") + 1]
