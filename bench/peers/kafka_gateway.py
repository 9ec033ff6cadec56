"""A Kafka app moved to Quiver: confluent-kafka (librdkafka) through quiver_kafka.

Cluster: one name server, one broker (flush ASYNC) and one Kafka gateway on loopback.
Produce: `Producer.produce` pipelined (acks=all, linger 5 ms: librdkafka batches on its own,
so there is no separate batch workload), delivery reports counted after `flush`; consume: a
`Consumer` of a group (`subscribe`, the gateway coordinating it) taking 500 a call, offsets
committed automatically; sync: one `produce` + `flush` at a time; e2e: a paced producer here and
a group consumer in another process, the send time in a header, both with the settings a
latency-minded Kafka user sets (E2E_PRODUCER, E2E_CONSUMER).
"""

import time

from confluent_kafka import Consumer, KafkaException, Producer

from quiver.tools.local import free_port

from bench.peers import base


def _producer(conn: dict, **extra) -> Producer:
    return Producer({"bootstrap.servers": conn["bootstrap"], "acks": "all", "linger.ms": 5,
                     "queue.buffering.max.messages": 200_000, **extra})


# what a latency-minded Kafka user sets for e2e, whatever the broker behind: a produce() waits at
# most 1 ms for others to share its request (linger.ms, alias queue.buffering.max.ms; at 0 each
# message is a Produce of its own, 2,000 a second, more than the gateway serves on 2 loaded cores,
# and the producer falls behind), no Nagle delay on small requests, a Fetch answered as soon as
# one byte is there (fetch.min.bytes 1, the broker holding it up to fetch.wait.max.ms meanwhile)
E2E_PRODUCER = {"linger.ms": 1, "socket.nagle.disable": True}
E2E_CONSUMER = {"fetch.min.bytes": 1, "fetch.wait.max.ms": 50, "socket.nagle.disable": True}


def _consumer(conn: dict, group: str, **extra) -> Consumer:
    return Consumer({"bootstrap.servers": conn["bootstrap"], "group.id": group, "auto.offset.reset": "earliest",
                     "fetch.wait.max.ms": 50, **extra})


def _until_assigned(c: Consumer, topic: str, timeout_s: float = 60.0) -> list:
    """Subscribe and poll until the group gave this member its partitions; what it read meanwhile."""
    assigned, early = [], []
    c.subscribe([topic], on_assign=lambda _c, parts: assigned.extend(parts))
    deadline = time.monotonic() + timeout_s
    while not assigned:
        if time.monotonic() > deadline:
            raise RuntimeError(f"no partitions of {topic} assigned in {timeout_s} s")
        m = c.poll(0.1)
        if m is not None and not m.error():
            early.append(m)
    return early


def e2e_consume(conn: dict, topic: str, count: int, seconds: float, ready) -> list[float]:
    c = _consumer(conn, base.unique("e2e"), **E2E_CONSUMER)
    try:
        early = _until_assigned(c, topic)
        warm = time.monotonic() + 0.5   # librdkafka looks its start offsets up after the assignment: fetching by then
        while time.monotonic() < warm:
            m = c.poll(0.05)
            if m is not None and not m.error():
                early.append(m)
        ready()
        lat, deadline = [], time.monotonic() + seconds

        def seen(msgs):
            now = time.time()
            lat.extend(now - float(dict(m.headers())["t"]) for m in msgs if not m.error())
        seen(early)
        while len(lat) < count and time.monotonic() < deadline:
            # poll returns with the first message; consume(n, t) would wait for n or t
            m = c.poll(0.05)
            if m is not None:
                seen([m, *c.consume(500, 0)])
        return lat
    finally:
        c.close()


class Client:
    def __init__(self, conn: dict):
        self.producer = _producer(conn)

    def produce(self, topic: str, n: int, size: int, window: int = base.WINDOW) -> int:
        body, acked = b"x" * size, [0]

        def delivered(err, _msg):
            if err is None:
                acked[0] += 1
        for _ in range(n):
            while True:
                try:
                    self.producer.produce(topic, body, on_delivery=delivered)
                    break
                except BufferError:     # librdkafka's queue is full: let deliveries drain it
                    self.producer.poll(0.01)
            self.producer.poll(0)
        if self.producer.flush(120):
            raise RuntimeError("messages still queued after 120 s")
        return acked[0]

    def close(self) -> None:
        self.producer.flush(10)


class KafkaGateway(base.GatewaySystem):
    name = "kafka-gateway"
    durability = "Quiver flush ASYNC behind quiver_kafka (acks=all)"
    notes = {"batch": "N/A: librdkafka batches every produce itself (linger.ms 5): the produce column",
             "consume": "a group's Consumer (subscribe), consume(500) a call, auto commit; the rate from the first "
                        "message on, as Kafka's consumer-perf-test leaves out the join (the start is first_ms)"}

    tmp_prefix = "quiver-bench-kafka-"
    client_class = Client

    def add_gateway(self, cluster) -> None:
        self.bootstrap = f"127.0.0.1:{free_port()}"
        cluster.add_service("kafka", "quiver_kafka", "--kafka-listen", self.bootstrap, data=False)

    def conn(self) -> dict:
        return {"bootstrap": self.bootstrap}

    def consume(self, n: int) -> dict:
        topic = self.new_topic()
        if self.client.produce(topic, n, 1024) != n:
            raise RuntimeError("prefill not fully delivered")
        c = _consumer(self.conn(), base.unique("bench-c"))
        try:
            # the rate from the first message on, as Kafka's consumer-perf-test reports its fetch rate
            # without the group's join; the start (join, offset lookup, first fetch) is first_ms
            t_sub = time.perf_counter()
            done = sum(not m.error() for m in _until_assigned(c, topic))
            first, t0 = 0, None
            deadline = time.monotonic() + 120
            while done < n and time.monotonic() < deadline:
                got = sum(not m.error() for m in c.consume(500, 0.5))
                if t0 is None and got:
                    first, t0 = done + got, time.perf_counter()
                done += got
            t_end = time.perf_counter()
        finally:
            c.close()
        if done < n or t0 is None:
            raise RuntimeError(f"{done} of {n} consumed")
        return {"msgs_s": (done - first) / (t_end - t0), "first_ms": (t0 - t_sub) * 1000}

    def sync(self, samples: int) -> dict:
        topic = self.new_topic()
        p, body, lat = self.client.producer, b"x" * 1024, []
        p.produce(topic, body)
        p.flush(30)
        for _ in range(samples):
            t = time.perf_counter()
            p.produce(topic, body)
            if p.flush(30):
                raise KafkaException("a sync produce was not delivered in 30 s")
            lat.append(time.perf_counter() - t)
        return base.latency_stats(lat, "sync")

    def e2e(self, rate: int, seconds: float) -> dict:
        topic, body, p = self.new_topic(), b"x" * 1024, _producer(self.conn(), **E2E_PRODUCER)
        p.list_topics(topic, timeout=30)   # connected, the topic's partitions known, before the timing

        def send_many(k):
            for _ in range(k):
                p.produce(topic, body, headers=[("t", repr(time.time()).encode())])
            p.poll(0)

        def produce_paced(n):
            base.paced_runs(rate, n, send_many)
            p.flush(30)
        return base.e2e_run(self.name, self, topic, rate, seconds, produce_paced)
