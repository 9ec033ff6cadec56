"""A RocketMQ 5 app moved to Quiver: rocketmq-python-client 5.1.2 through quiver_proxy.

Cluster: one name server, one broker (flush ASYNC) and one proxy on loopback.
Produce: `Producer.send_async` with a window of 1000 receipts in flight; consume: a
`SimpleConsumer` receiving batches of 32 (POP), each message acked with `ack`, one call
each as the 5.x client acks (its `ack_async` returns None in 5.1.2: no future to wait on);
sync: `Producer.send` latency. The 5.x client sends one message per call (no batch workload)
and fewer than the 2k msg/s the e2e workload asks (no e2e).
What the client itself costs, without the proxy: `python -m bench.proxy` (its ceiling row).
"""

import collections
import logging
import time

from rocketmq import ClientConfiguration, Credentials, FilterExpression
from rocketmq import Message as V5Message
from rocketmq import Producer as V5Producer
from rocketmq import SimpleConsumer as V5SimpleConsumer

from bench.peers import base

logging.getLogger("rocketmq-python-client").setLevel(logging.WARNING)


def _config(conn: dict) -> ClientConfiguration:
    return ClientConfiguration(conn["endpoint"], Credentials())


def _message(topic: str, body: bytes, **props: str) -> V5Message:
    m = V5Message()
    m.topic, m.body = topic, body
    for k, v in props.items():
        m.add_property(k, v)
    return m


class Client:
    def __init__(self, conn: dict):
        self.conn = conn
        self.producers: dict[str, V5Producer] = {}

    def producer(self, topic: str) -> V5Producer:
        p = self.producers.get(topic)
        if p is None:
            p = self.producers[topic] = V5Producer(_config(self.conn), (topic,))
            p.startup()
        return p

    def produce(self, topic: str, n: int, size: int, window: int = base.WINDOW) -> int:
        p, body, acked = self.producer(topic), b"x" * size, 0
        inflight: collections.deque = collections.deque()
        for _ in range(n):
            inflight.append(p.send_async(_message(topic, body)))
            if len(inflight) >= window:
                acked += base.acked(inflight.popleft())
        while inflight:
            acked += base.acked(inflight.popleft())
        return acked

    def close(self) -> None:
        for p in self.producers.values():
            p.shutdown()
        self.producers.clear()


CONSUME_CAP = 20_000   # messages a consume measurement reads at most: the others' 100,000 would take minutes


class RocketMQ5(base.GatewaySystem):
    name = "rocketmq5-proxy"
    durability = "Quiver flush ASYNC behind quiver_proxy (gRPC)"
    notes = {"batch": "N/A: the 5.x client sends one message per SendMessage call",
             "e2e": "N/A: the 5.x client sends fewer than the 2k msg/s asked (python -m bench.proxy)",
             "consume": f"SimpleConsumer (POP) batches of 32, one ack call per message; {CONSUME_CAP:,} messages "
                        "(it reads ~400 a second)"}

    tmp_prefix = "quiver-bench-rocketmq5-"
    client_class = Client

    def add_gateway(self, cluster) -> None:
        self.proxy = cluster.add_proxy("--pop-consume-from", "first")

    def conn(self) -> dict:
        return {"endpoint": self.proxy.url}

    def consume(self, n: int) -> dict:
        n = min(n, CONSUME_CAP)
        topic = self.new_topic()
        if self.client.produce(topic, n, 1024) != n:
            raise RuntimeError("prefill not fully acked")
        sc = V5SimpleConsumer(_config(self.conn()), base.unique("bench-c"), {topic: FilterExpression()},
                              await_duration=1)
        sc.startup()
        try:
            done, t0 = 0, time.perf_counter()
            deadline = time.monotonic() + 120
            while done < n and time.monotonic() < deadline:
                for m in sc.receive(32, 60):
                    sc.ack(m)
                    done += 1
            rate = done / (time.perf_counter() - t0)
        finally:
            sc.shutdown()
        if done < n:
            raise RuntimeError(f"{done} of {n} received and acked")
        return {"msgs_s": rate}

    def sync(self, samples: int) -> dict:
        topic = self.new_topic()
        p, body, lat = self.client.producer(topic), b"x" * 1024, []
        p.send(_message(topic, body))
        for _ in range(samples):
            t = time.perf_counter()
            p.send(_message(topic, body))
            lat.append(time.perf_counter() - t)
        return base.latency_stats(lat, "sync")
