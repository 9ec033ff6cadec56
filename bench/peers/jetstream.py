"""NATS JetStream driven by nats-py (asyncio), file storage.

Server: nats-server 2.9 `-js`, file storage: the PubAck comes before any fsync
(2.9 has no sync_interval). Produce: js.publish_async with at most 1000 acks
pending; batch: N/A (no batch publish in 2.9; the window is the nearest thing);
consume: a durable push consumer, explicit ack of every message (per peers.md a
pull fetch(n) tops out far lower); sync: await js.publish.
"""

import asyncio
import time

import nats
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StorageType

from bench.peers import base
from bench.peers.servers import NatsServer

STREAM = "BENCH"


class Client:
    """One connection on a private event loop, so sync code can drive it."""

    def __init__(self, conn: dict):
        self.loop = asyncio.new_event_loop()
        self.nc = self.run(nats.connect(f"nats://127.0.0.1:{conn['port']}", max_reconnect_attempts=0))
        self.js = self.nc.jetstream(publish_async_max_pending=base.WINDOW)

    def run(self, coro):
        return self.loop.run_until_complete(coro)

    def produce(self, subject: str, n: int, size: int) -> int:
        return self.run(self._produce(subject, n, size))

    async def _produce(self, subject: str, n: int, size: int) -> int:
        body, count = b"x" * size, [0]

        def done(f):
            if not f.cancelled() and f.exception() is None:
                count[0] += 1
        for _ in range(n):
            (await self.js.publish_async(subject, body)).add_done_callback(done)
        await asyncio.wait_for(self.js.publish_async_completed(), 120)
        return count[0]

    def close(self) -> None:
        try:
            self.run(self.nc.close())
        finally:
            self.loop.close()


def e2e_consume(conn: dict, subject: str, count: int, seconds: float, ready) -> list[float]:
    client, lat = Client(conn), []

    async def go():
        done = asyncio.Event()

        async def cb(msg):
            lat.append(time.time() - float(msg.headers["t"]))
            await msg.ack()
            if len(lat) >= count:
                done.set()
        await client.js.subscribe(subject, cb=cb, manual_ack=True, deliver_policy=DeliverPolicy.NEW)
        ready()
        try:
            await asyncio.wait_for(done.wait(), seconds)
        except asyncio.TimeoutError:
            pass
    try:
        client.run(go())
    finally:
        client.close()
    return lat


class JetStream(base.System):
    name = "jetstream"
    durability = "file storage, PubAck before fsync (2.9: no sync_interval)"
    notes = {"batch": "N/A: no batch publish in nats-server 2.9 (produce's window of 1000 is the nearest)"}

    def __enter__(self):
        self.server = NatsServer().__enter__()
        try:
            self.client = Client(self.conn())
            self.client.run(self.client.js.add_stream(name=STREAM, subjects=["bench.>"], storage=StorageType.FILE))
        except BaseException:
            self.server.stop()
            raise
        return self

    def __exit__(self, *exc):
        try:
            self.client.close()
        finally:
            self.server.stop()

    def conn(self) -> dict:
        return {"port": self.server.port}

    def new_topic(self) -> str:
        return base.unique("bench.")

    def drop_topic(self, subject: str) -> None:
        self.client.run(self.client.js.purge_stream(STREAM, subject=subject))

    def produce(self, n: int, size: int) -> dict:
        subject = self.new_topic()
        t0 = time.perf_counter()
        acked = self.client.produce(subject, n, size)
        rate = acked / (time.perf_counter() - t0)
        self.drop_topic(subject)
        return {"msgs_s": rate}

    def consume(self, n: int) -> dict:
        subject = self.new_topic()
        if self.client.produce(subject, n, 1024) != n:
            raise RuntimeError("prefill not fully acked")
        rate = self.client.run(self._consume(subject, n))
        self.drop_topic(subject)
        return {"msgs_s": rate}

    async def _consume(self, subject: str, n: int) -> float:
        done, got = asyncio.Event(), [0]

        async def cb(msg):
            await msg.ack()
            got[0] += 1
            if got[0] >= n:
                done.set()
        durable = base.unique("c")
        cfg = ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, max_ack_pending=base.WINDOW * 10)
        t0 = time.perf_counter()
        sub = await self.client.js.subscribe(subject, cb=cb, durable=durable, manual_ack=True, config=cfg,
                                             deliver_policy=DeliverPolicy.ALL, pending_msgs_limit=n + 1000)
        try:
            await asyncio.wait_for(done.wait(), 120)
        except asyncio.TimeoutError:
            pass
        rate = got[0] / (time.perf_counter() - t0)
        await sub.unsubscribe()
        await self.client.js.delete_consumer(STREAM, durable)
        return rate

    def sync(self, samples: int) -> dict:
        subject = self.new_topic()
        lat = self.client.run(self._sync(subject, samples))
        self.drop_topic(subject)
        return base.latency_stats(lat, "sync")

    async def _sync(self, subject: str, samples: int) -> list[float]:
        body, lat = b"x" * 1024, []
        for _ in range(samples):
            t = time.perf_counter()
            await self.client.js.publish(subject, body)
            lat.append(time.perf_counter() - t)
        return lat

    def e2e(self, rate: int, seconds: float) -> dict:
        subject, body, js = self.new_topic(), b"x" * 1024, self.client.js

        async def paced(n):
            t0 = time.perf_counter()
            for i in range(n):
                delay = t0 + i / rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                await js.publish_async(subject, body, headers={"t": repr(time.time())})
            await asyncio.wait_for(js.publish_async_completed(), 60)
        out = base.e2e_run(self.name, self, subject, rate, seconds, lambda n: self.client.run(paced(n)))
        self.drop_topic(subject)
        return out
