"""RabbitMQ driven by pika: durable classic queue, persistent messages, publisher confirms.

Produce: the asynchronous SelectConnection with up to 1000 unconfirmed
publishes (per peers.md ~10x BlockingConnection + confirm_delivery); a confirm
comes after an fsync grouped over many messages. Batch: N/A (AMQP 0-9-1 has no
batch publish; the confirm window is the nearest thing). Consume: prefetch 1000,
basic_ack(multiple=True) every 100 deliveries. Sync: BlockingConnection with
confirm_delivery, one publish waits for its confirm.
"""

import time

import pika
from pika.spec import Basic

from bench.peers import base
from bench.peers.servers import RabbitServer

PERSISTENT = pika.BasicProperties(delivery_mode=2)


def _params(conn: dict) -> pika.ConnectionParameters:
    return pika.ConnectionParameters("127.0.0.1", conn["port"], heartbeat=0, blocked_connection_timeout=60)


def run_select(conn: dict, queue: str, on_ready, confirms: bool, timeout_s: float = 120.0) -> None:
    """Open a SelectConnection + channel, declare `queue` durable, call on_ready(channel, finish); loop until finish()."""
    state = {"error": None}

    def finish(error=None):
        state["error"] = state["error"] or error
        if connection.is_open:
            connection.close()

    def on_channel(ch):
        def declared(_frame):
            on_ready(ch, finish)
        if confirms:
            ch.confirm_delivery(lambda fr: on_ready.on_confirm(fr), callback=lambda _f: ch.queue_declare(
                queue, durable=True, callback=declared))
        else:
            ch.queue_declare(queue, durable=True, callback=declared)

    connection = pika.SelectConnection(
        _params(conn), on_open_callback=lambda c: c.channel(on_open_callback=on_channel),
        on_open_error_callback=lambda c, e: (state.update(error=e), c.ioloop.stop()),
        on_close_callback=lambda c, r: c.ioloop.stop())
    connection.ioloop.call_later(timeout_s, lambda: finish(TimeoutError(f"rabbitmq run over {timeout_s} s")))
    connection.ioloop.start()
    if state["error"]:
        raise RuntimeError(f"rabbitmq: {state['error']}")


class _Publisher:
    """Publishes n persistent messages keeping at most `window` unconfirmed; counts acks."""

    def __init__(self, queue: str, n: int, body: bytes, window: int, rate: int | None = None):
        self.queue, self.n, self.body, self.window, self.rate = queue, n, body, window, rate
        self.sent = self.acked = self.nacked = 0
        self.pending: dict[int, None] = {}        # delivery tags in publish order
        self.timer = False                         # one pacing timer at a time

    def __call__(self, ch, finish):
        self.ch, self.finish, self.t0 = ch, finish, time.perf_counter()
        self.loop = ch.connection.ioloop
        self.more()

    def tick(self) -> None:
        self.timer = False
        self.more()

    def more(self) -> None:
        while self.sent < self.n and len(self.pending) < self.window:
            if self.rate and self.t0 + self.sent / self.rate > time.perf_counter():
                if not self.timer:
                    self.timer = True
                    self.loop.call_later(0.0005, self.tick)
                return
            props = pika.BasicProperties(delivery_mode=2, headers={"t": repr(time.time())}) if self.rate else PERSISTENT
            self.ch.basic_publish("", self.queue, self.body, props)
            self.sent += 1
            self.pending[self.sent] = None

    def on_confirm(self, frame) -> None:
        m = frame.method
        tags = [m.delivery_tag]
        if m.multiple:
            tags = [t for t in self.pending if t <= m.delivery_tag]
        for t in tags:
            if self.pending.pop(t, 0) is None:
                if isinstance(m, Basic.Ack):
                    self.acked += 1
                else:
                    self.nacked += 1
        if self.acked + self.nacked >= self.n:
            self.finish()
        else:
            self.more()


class Client:
    def __init__(self, conn: dict):
        self.conn = conn

    def produce(self, queue: str, n: int, size: int, window: int = base.WINDOW, rate: int | None = None) -> int:
        pub = _Publisher(queue, n, b"x" * size, window, rate)
        run_select(self.conn, queue, pub, confirms=True)
        return pub.acked

    def close(self) -> None:
        pass


def e2e_consume(conn: dict, queue: str, count: int, seconds: float, ready) -> list[float]:
    lat = []

    def on_ready(ch, finish):
        def on_message(ch, method, props, body):
            lat.append(time.time() - float(props.headers["t"]))
            ch.basic_ack(method.delivery_tag)
            if len(lat) >= count:
                finish()
        ch.basic_qos(prefetch_count=100)
        ch.basic_consume(queue, on_message)
        ready()
    run_select(conn, queue, on_ready, confirms=False, timeout_s=seconds)
    return lat


class RabbitMQ(base.System):
    name = "rabbitmq"
    durability = "durable queue + persistent + publisher confirms (grouped fsync)"
    notes = {"batch": "N/A: AMQP 0-9-1 has no batch publish (produce's confirm window is the nearest)"}

    def __enter__(self):
        self.server = RabbitServer().__enter__()
        self.client = Client(self.conn())
        self.blocking = None
        try:
            self.blocking = pika.BlockingConnection(_params(self.conn()))
            self.ch = self.blocking.channel()
        except BaseException:
            self.server.stop()
            raise
        return self

    def __exit__(self, *exc):
        try:
            if self.blocking is not None and self.blocking.is_open:
                self.blocking.close()
        finally:
            self.server.stop()

    def conn(self) -> dict:
        return {"port": self.server.port}

    def new_topic(self) -> str:
        queue = base.unique("q")
        self.ch.queue_declare(queue, durable=True)
        return queue

    def drop_topic(self, queue: str) -> None:
        self.ch.queue_delete(queue)

    def produce(self, n: int, size: int) -> dict:
        queue = self.new_topic()
        t0 = time.perf_counter()
        acked = self.client.produce(queue, n, size)
        rate = acked / (time.perf_counter() - t0)
        self.drop_topic(queue)
        return {"msgs_s": rate}

    def consume(self, n: int) -> dict:
        queue = self.new_topic()
        if self.client.produce(queue, n, 1024) != n:
            raise RuntimeError("prefill not fully confirmed")
        got = [0]
        t0 = [0.0]

        def on_ready(ch, finish):
            def on_message(ch, method, props, body):
                got[0] += 1
                if got[0] % 100 == 0 or got[0] >= n:
                    ch.basic_ack(method.delivery_tag, multiple=True)
                if got[0] >= n:
                    finish()
            ch.basic_qos(prefetch_count=base.WINDOW)
            t0[0] = time.perf_counter()
            ch.basic_consume(queue, on_message)
        run_select(self.conn(), queue, on_ready, confirms=False)
        rate = got[0] / (time.perf_counter() - t0[0])
        self.drop_topic(queue)
        return {"msgs_s": rate}

    def sync(self, samples: int) -> dict:
        queue = self.new_topic()
        ch = self.blocking.channel()
        ch.confirm_delivery()
        body, lat = b"x" * 1024, []
        for _ in range(samples):
            t = time.perf_counter()
            ch.basic_publish("", queue, body, PERSISTENT, mandatory=False)   # returns after the confirm
            lat.append(time.perf_counter() - t)
        ch.close()
        self.drop_topic(queue)
        return base.latency_stats(lat, "sync")

    def e2e(self, rate: int, seconds: float) -> dict:
        queue = self.new_topic()
        out = base.e2e_run(self.name, self, queue, rate, seconds,
                           lambda n: self.client.produce(queue, n, 1024, base.WINDOW, rate=rate))
        self.drop_topic(queue)
        return out
