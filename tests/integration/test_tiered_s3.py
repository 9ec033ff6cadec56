"""Tiered storage against a real S3-compatible server (moto in server mode, a process on loopback):
200k small messages over 256 KiB segments (about 150 rolls) are uploaded and dropped locally, the
store goes down while producing (puts go on, uploads catch up), the broker is killed -9 with
uploads pending and resumes them, every message reads back byte for byte from offset 0 through
the SDK (and a spread of them by key and by msgId, each a remote-only lookup), the Kafka gateway
fetches a remote-only offset, and an object corrupted in the store is reported, not served."""

import os
import re
import selectors
import socket
import subprocess
import sys
import threading
import time

import pytest

from quiver import Admin, Message, Producer, PullConsumer, SendStatus
from quiver.tools.local import free_port, wait_healthy
from tests.support.fuzz_cluster import status
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

BUCKET = "quiver-tiered"
TOPIC = "Tiered"


class Gate:
    """A TCP forwarder on a fixed loopback port that can be closed (connections refused) and opened
    again: the object store going down and coming back, as the broker sees it; with `delay`, each
    answer of the store is held that long (a slow store)."""

    def __init__(self, target_port: int):
        self.port = free_port()
        self.target = ("127.0.0.1", target_port)
        self.delay = 0.0
        self.holding = threading.Event()   # set when an answer is being held
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

    def _pump(self, a, b) -> None:
        asked = False   # a request went up: the first bytes of its answer wait `delay`
        sel = selectors.DefaultSelector()
        sel.register(a, selectors.EVENT_READ, b)
        sel.register(b, selectors.EVENT_READ, a)
        try:
            while True:
                for key, _ in sel.select(1.0):
                    data = key.fileobj.recv(65536)
                    if not data:
                        return
                    if key.fileobj is a:
                        asked = True
                    elif asked and self.delay:
                        asked = False
                        self.holding.set()
                        time.sleep(self.delay)
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


N = int(os.environ.get("QUIVER_TIERED_TEST_MESSAGES", "200000"))   # 200k in CI: the figure
SEGMENT = 1 << 20 if N >= 100_000 else 1 << 16   # about 30 rolls either way
LOOKUPS = 50   # messages read back by key and by msgId too, spread over the whole log


def status_of(cluster, broker):
    return status(broker.addr, timeout=5)


def send(namesrv, first, n):
    with Producer("tiered-p", namesrv=namesrv) as p:
        futs = [p.send_async(Message(TOPIC, body(i), keys=[f"key-{i}"])) for i in range(first, first + n)]
        res = [f.result(120) for f in futs]
    assert all(r.status is SendStatus.SEND_OK for r in res)
    return res


def body(i: int) -> bytes:
    """Small (the test is about many records and rolls), unique, and not only ASCII."""
    return b"m%d:" % i + bytes([i % 256, (i * 7) % 256]) * (i % 5)


def pull_all(namesrv, want: dict) -> dict:
    got = {}
    with PullConsumer("tiered-c", namesrv=namesrv, consume_from="first", pull_batch_size=512) as c:
        c.subscribe(TOPIC)
        wait_for(lambda: [got.setdefault((m.queue_id, m.queue_offset), m) for m in c.poll(0.5)] is not None
                 and len(got) >= len(want) and want.keys() <= got.keys(), 240, "every message pulled back")
    return got


def kafka_first(bootstrap: str, partition: int):
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(TOPIC, partition, 0)])
        got = []
        wait_for(lambda: (m := c.poll(0.5)) is not None and got.append(m) is None, 60, "a Kafka fetch of offset 0")
        return got[0]
    finally:
        c.close()


def test_tiered_store_on_s3(make_cluster, s3):
    client, gate = s3
    cluster = make_cluster(broker_args=(
        "--tiered-store", f"s3://{BUCKET}/brokers/a", "--s3-endpoint", f"http://127.0.0.1:{gate.port}",
        "--segment-bytes", str(SEGMENT), "--local-retention-bytes", "0", "--clean-interval-ms", "500",
        "--flush-interval-ms", "100", "--tiered-cache-bytes", str(4 * SEGMENT)))
    broker = next(s for s in cluster.services if s.role == "broker")
    admin = Admin(namesrv=cluster.namesrv)
    admin.create_topic(TOPIC, queues=2)
    half = N // 2
    sent = send(cluster.namesrv, 0, half)

    def tiered():
        return status_of(cluster, broker)["store"]["tiered"]
    wait_for(lambda: tiered()["uploaded_segments"] >= 3, 60, "first uploads")

    # the store goes down: puts go on, uploads fail and wait
    gate.close()
    sent += send(cluster.namesrv, half, N - half)
    wait_for(lambda: tiered()["upload_errors"] >= 1, 30, "an upload to fail while the store is down")
    assert tiered()["pending_segments"] >= 1
    # kill -9 with uploads pending, the store back, a restart: the uploads resume
    broker.kill()
    gate.open()
    broker.start()
    wait_healthy([broker])
    wait_for(lambda: (t := status_of(cluster, broker)["store"]) and t["tiered"]["pending_segments"] == 0
             and t["segments"] == 1, 120, "every sealed segment uploaded and dropped locally")
    st = status_of(cluster, broker)["store"]
    assert st["tiered"]["remote_segments"] >= 10 and st["min_phys_offset"] > 0
    rows = admin.topic_status(TOPIC)   # `quiver topic status`: remote [0, local_min), local [local_min, max)
    assert all(r["min_offset"] == 0 < r["local_min_offset"] <= r["max_offset"] for r in rows), rows
    cli = subprocess.run([sys.executable, "-m", "quiver.tools.cli", "--namesrv", cluster.namesrv, "topic", "status",
                          TOPIC], capture_output=True, text=True, timeout=60)
    assert cli.returncode == 0, cli.stderr
    from quiver_console.app import create_app
    from quiver_console.config import Config
    page = create_app(Config(), admin).test_client().get(f"/topics/{TOPIC}").text
    for r in rows:   # the CLI's remote and local ranges, the console's 'local from' column
        assert f"[0, {r['local_min_offset']})" in cli.stdout, cli.stdout
        assert r["local_min_offset"] == r["max_offset"] or f"[{r['local_min_offset']}, {r['max_offset']})" in cli.stdout
        assert re.search(rf'data-queue="{r["broker"]}/{r["queue_id"]}">.*?class="n local">{r["local_min_offset"]}<',
                         page, re.S), page[-3000:]

    # every message back from offset 0, byte for byte, from the object store
    want = {(r.queue_id, r.queue_offset): (r.msg_id, i) for i, r in enumerate(sent)}
    assert len(want) == N
    got = pull_all(cluster.namesrv, want)
    assert tiered()["background_fetches"] > 0   # pulls waited for the store off the broker's thread
    index = {msg_id: i for msg_id, i in want.values()}
    for k, m in got.items():   # beyond what was acked: only a send retried after a timeout, stored twice
        i = want[k][1] if k in want else index[m.msg_id]
        assert m.body == body(i) and m.keys == [f"key-{i}"] and m.msg_id == sent[i].msg_id, (k, i)
    local_from = min(r["local_min_offset"] for r in rows)
    for i in sorted({*range(0, N, N // LOOKUPS), N - 1}):   # lookups of remote-only records
        assert {m.body for m in admin.query_by_key(TOPIC, f"key-{i}")} == {body(i)}, i   # a retried send: twice
        assert admin.view_message(sent[i].msg_id, TOPIC).body == body(i), i
    assert sent[N // 2].queue_offset < local_from

    # a lookup waiting for a slow store does not hold the broker: a PING is answered meanwhile
    i = N // 3
    gate.delay = 2.0
    found, slow = [], Admin(namesrv=cluster.namesrv, timeout=30)
    query = threading.Thread(target=lambda: found.extend(slow.query_by_key(TOPIC, f"key-{i}")))
    query.start()
    wait_for(gate.holding.is_set, 30, "the lookup's read from the slow store")
    began = time.monotonic()
    admin.ping(broker.addr, timeout=10)
    ping_s = time.monotonic() - began
    query.join(60)
    gate.delay = 0.0
    slow.shutdown()
    assert {m.body for m in found} == {body(i)}
    assert ping_s < 1.0, f"a PING took {ping_s:.2f} s while a lookup waited for the store"

    # an object corrupted in the store: reported, never served. The segment of message N/2: read by
    # a lookup above, then pushed out of the cache (4 segments) by the many lookups after it
    victim = got[(sent[N // 2].queue_id, sent[N // 2].queue_offset)]
    key = f"brokers/a/commitlog/{victim.commit_log_offset // SEGMENT * SEGMENT:020d}"
    data = bytearray(client.get_object(Bucket=BUCKET, Key=key)["Body"].read())
    data[2000] ^= 0x5A
    client.put_object(Bucket=BUCKET, Key=key, Body=bytes(data))
    from quiver.client import queue_puller
    from quiver.client.access import broker_access
    from quiver.errors import QuiverError
    access = broker_access(admin)
    addr = access.broker_addr(broker_name(cluster), TOPIC)
    with pytest.raises(QuiverError) as err:
        pulled = queue_puller.fetch(access, addr, queue_puller.request(TOPIC, victim.queue_id, victim.queue_offset,
                                                                       max_msgs=32))
        raise AssertionError(f"served: {pulled.status}")
    assert "checksum" in err.value.remark
    assert status_of(cluster, broker)["store"]["tiered"]["damaged_chunks"] >= 1

    # the Kafka gateway fetches a remote-only offset (a pull, served from the store)
    bootstrap = f"127.0.0.1:{free_port()}"
    cluster.add_service("kafka", "quiver_kafka", "--kafka-listen", bootstrap, data=False)
    cluster.wait()
    first = kafka_first(bootstrap, 0)
    assert first.offset() == 0 and first.value() == got[(0, 0)].body
    admin.shutdown()


def broker_name(cluster) -> str:
    b = next(s for s in cluster.services if s.role == "broker")
    return b.args[b.args.index("--broker-name") + 1]
