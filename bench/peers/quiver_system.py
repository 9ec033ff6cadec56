"""Quiver itself, one name server + one broker on loopback, in ASYNC or SYNC flush.

ASYNC flush (the broker acks after the page-cache write, a flusher fsyncs
behind) compares with JetStream and Redis; SYNC flush (ack after the group
fsync) compares with RabbitMQ's confirms and the disk ceiling.
Produce: send_async with a window of 1000 receipts in flight; batch: send_batch_async
of 100 with 10 in flight; consume: PullConsumer (pull batch 256) then commit
(the offset commit is Quiver's ack); e2e: bench.e2e_consumer in another process.
"""

import collections
import json
import os
import subprocess
import sys
import tempfile
import time

from quiver import Admin, Message, Producer, PullConsumer
from quiver.wire.curve import init_auth_dir

from bench.core import pipelined_batches
from bench.peers import base


class Client:
    def __init__(self, conn: dict):
        self.p = Producer(base.unique("bench-p"), namesrv=conn["namesrv"], credentials=conn.get("credentials"),
                          trace=conn.get("trace", False)).start()

    def produce(self, topic: str, n: int, size: int, window: int = base.WINDOW) -> int:
        """`window` sends in flight: each new one waits for the oldest's receipt. Waiting only
        when the oldest is not in yet wakes this thread once per window, not once per ack as a
        semaphore released by a callback would (2x the rate at 64 B on 2 cores)."""
        msg, acked, inflight = Message(topic, b"x" * size), 0, collections.deque()
        for _ in range(n):
            inflight.append(self.p.send_async(msg))
            if len(inflight) >= window:
                acked += base.acked(inflight.popleft())
        while inflight:
            acked += base.acked(inflight.popleft())
        return acked

    def trace_drained(self, timeout_s: float = 30.0) -> None:
        """Returns once the trace dispatcher (trace on) has sent and seen answered all it holds."""
        tracer = self.p.tracer
        deadline = time.monotonic() + timeout_s
        while tracer is not None and time.monotonic() < deadline:
            st = tracer.dispatcher.stats()
            if not st["pending"] and not st["in_flight"]:
                return
            time.sleep(0.01)

    def close(self) -> None:
        self.p.shutdown()


class QuiverAsync(base.System):
    name = "quiver-async"
    flush = "async"
    durability = "flush ASYNC: ack after page-cache write, fsync behind"
    notes = {"batch": "send_batch_async of 100, 10 batches in flight"}

    auth = False
    trace = False

    def __enter__(self):
        self.dir = tempfile.TemporaryDirectory(prefix=f"quiver-bench-{self.name}-")
        self.creds = init_auth_dir(os.path.join(self.dir.name, "auth")) if self.auth else None
        try:
            self.cluster = base.one_broker(self.dir.name, "--flush", self.flush,
                                           auth_dir=os.path.join(self.dir.name, "auth") if self.auth else None)
            self.admin = Admin(namesrv=self.cluster.namesrv, credentials=self.creds)
            self.client = Client(self.conn())
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc):
        try:
            for name in ("client", "admin"):
                obj = getattr(self, name, None)
                if obj is not None:
                    obj.close() if name == "client" else obj.shutdown()
        finally:
            if getattr(self, "cluster", None) is not None:
                self.cluster.stop()
            self.dir.cleanup()

    def conn(self) -> dict:
        return {"namesrv": self.cluster.namesrv, "credentials": self.creds, "trace": self.trace}

    def new_topic(self) -> str:
        topic = base.unique("T")
        self.admin.create_topic(topic, queues=4)
        return topic

    def produce(self, n: int, size: int) -> dict:
        """msg/s, and the client's and the broker's CPU per message (the client's every thread of
        this process: with trace on, the dispatcher's building and sending of this run's records
        too, waited for)."""
        topic = self.new_topic()
        self.client.produce(topic, 10, size)           # route lookup outside the timing
        self.client.trace_drained()
        broker = next(s.pid for s in self.cluster.services if s.role == "broker")
        c0, b0, t0 = time.process_time(), base.cpu_s(broker), time.perf_counter()
        acked = self.client.produce(topic, n, size)
        rate = acked / (time.perf_counter() - t0)
        self.client.trace_drained()
        return {"msgs_s": rate, "client_cpu_us": (time.process_time() - c0) / n * 1e6,
                "broker_cpu_us": (base.cpu_s(broker) - b0) / n * 1e6}

    def batch(self, n: int) -> dict:
        topic = self.new_topic()
        batch = [Message(topic, b"x" * 1024)] * 100
        self.client.p.send_batch(batch)
        return {"msgs_s": pipelined_batches(self.client.p, batch, max(1, n // 100), window=10)}

    def scale(self, n: int) -> dict | None:
        """bench.scale on a broker of its own (the run's broker keeps serving the other workloads)."""
        if self.name != "quiver-async":
            return None
        from bench import scale
        with tempfile.TemporaryDirectory(prefix="quiver-bench-scale-") as tmp:
            doc = scale.run(n, 100, 256, 8, min(n, 1_000_000), 2.0, tmp, drop=False)
        return {"rss_mb": doc["rss_settled"]["rss_mb"], "cold_read_msgs_s": doc["cold_read"]["msgs_per_s"],
                "recovery_s": doc["recovery"]["to_queues_whole_s"], "store_msgs_s": doc["store"]["msgs_per_s"]}

    def consume(self, n: int) -> dict:
        topic = self.new_topic()
        if self.client.produce(topic, n, 1024) != n:
            raise RuntimeError("prefill not fully acked")
        with PullConsumer(base.unique("bench-c"), namesrv=self.cluster.namesrv, consume_from="first",
                          pull_batch_size=256, auto_commit=False, credentials=self.creds) as pc:
            pc.subscribe(topic)
            got, t0 = 0, time.perf_counter()
            deadline = time.monotonic() + 120
            while got < n and time.monotonic() < deadline:
                got += len(pc.poll(0.5))
            pc.commit()
            return {"msgs_s": got / (time.perf_counter() - t0)}

    def sync(self, samples: int) -> dict:
        topic = self.new_topic()
        msg, lat = Message(topic, b"x" * 1024), []
        self.client.p.send(msg)
        for _ in range(samples):
            t = time.perf_counter()
            self.client.p.send(msg)
            lat.append(time.perf_counter() - t)
        return base.latency_stats(lat, "sync")

    def e2e(self, rate: int, seconds: float) -> dict:
        topic = self.new_topic()
        n = int(rate * seconds)
        proc = subprocess.Popen([sys.executable, "-m", "bench.e2e_consumer", self.cluster.namesrv, topic, str(n),
                                 str(seconds + 15)], stdout=subprocess.PIPE, text=True, cwd=base.ROOT,
                                start_new_session=True)
        try:
            if proc.stdout.readline().strip() != "ready":
                raise RuntimeError("e2e consumer did not say ready")
            p, body = self.client.p, b"x" * 1024

            def send_many(k: int) -> None:   # one sync send, or those due pipelined when it fell behind
                if k == 1:
                    p.send(Message(topic, body, properties={"t": repr(time.time())}))
                    return
                futures = [p.send_async(Message(topic, body, properties={"t": repr(time.time())}))
                           for _ in range(k)]
                for f in futures:
                    f.result(60)
            t0 = time.perf_counter()
            base.paced_runs(rate, n, send_many)
            rate_done = n / (time.perf_counter() - t0)
            out = json.loads(proc.stdout.readline())
        finally:
            base.stop(proc)
        return base.e2e_result(self.name, n, out, rate_done)


class QuiverSync(QuiverAsync):
    name = "quiver-sync"
    flush = "sync"
    durability = "flush SYNC: ack after group fdatasync"


class QuiverAuth(QuiverAsync):
    """quiver-async with auth on: CURVE on every socket, every request authorized (a SUPER user,
    so the ACL check is the dict lookup every user pays)."""
    name = "quiver-auth"
    auth = True
    durability = "flush ASYNC, auth on (CURVE + ACL)"


class QuiverTrace(QuiverAsync):
    """quiver-async with message trace on in the producer (trace=True): every send also queues a
    Pub event, sent in batches to RMQ_SYS_TRACE_TOPIC on the same broker."""
    name = "quiver-trace"
    trace = True
    durability = "flush ASYNC, message trace on"
