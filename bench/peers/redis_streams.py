"""Redis Streams driven by redis-py (+ hiredis): XADD pipelines, XREADGROUP + XACK.

Server: `appendonly yes`, `appendfsync everysec` (replies before the fsync).
Produce: pipelines of 1000 XADDs (the window); batch: pipelines of 100, one at
a time; consume: a consumer group, XREADGROUP COUNT 1000 then one XACK per batch.
"""

import time

import redis

from bench.peers import base
from bench.peers.servers import RedisServer


class Client:
    def __init__(self, conn: dict):
        self.r = redis.Redis(host="127.0.0.1", port=conn["port"])

    def produce(self, key: str, n: int, size: int, window: int = base.WINDOW) -> int:
        body, acked = b"x" * size, 0
        while acked < n:
            pipe = self.r.pipeline(transaction=False)
            for _ in range(min(window, n - acked)):
                pipe.xadd(key, {"b": body})
            acked += sum(1 for i in pipe.execute() if i)
        return acked

    def close(self) -> None:
        self.r.close()


def e2e_consume(conn: dict, key: str, count: int, seconds: float, ready) -> list[float]:
    r = redis.Redis(host="127.0.0.1", port=conn["port"])
    r.xgroup_create(key, "e2e", id="$", mkstream=True)
    ready()
    lat, deadline = [], time.monotonic() + seconds
    while len(lat) < count and time.monotonic() < deadline:
        for _, entries in r.xreadgroup("e2e", "c1", {key: ">"}, count=100, block=100) or []:
            now = time.time()
            lat.extend(now - float(fields[b"t"]) for _, fields in entries)
            r.xack(key, "e2e", *[i for i, _ in entries])
    r.close()
    return lat


class RedisStreams(base.System):
    name = "redis"
    durability = "AOF appendfsync everysec (reply before fsync)"
    notes = {"batch": "pipeline of 100 XADDs per call, one call at a time"}

    def __enter__(self):
        self.server = RedisServer().__enter__()
        self.client = Client(self.conn())
        return self

    def __exit__(self, *exc):
        try:
            self.client.close()
        finally:
            self.server.stop()

    def conn(self) -> dict:
        return {"port": self.server.port}

    def drop_topic(self, key: str) -> None:
        self.client.r.delete(key)

    def _timed_produce(self, n: int, size: int, window: int) -> float:
        key = base.unique("p")
        t0 = time.perf_counter()
        acked = self.client.produce(key, n, size, window)
        rate = acked / (time.perf_counter() - t0)
        self.drop_topic(key)
        return rate

    def produce(self, n: int, size: int) -> dict:
        return {"msgs_s": self._timed_produce(n, size, base.WINDOW)}

    def batch(self, n: int) -> dict:
        return {"msgs_s": self._timed_produce(n, 1024, 100)}

    def consume(self, n: int) -> dict:
        key, r = base.unique("c"), self.client.r
        self.client.produce(key, n, 1024)
        r.xgroup_create(key, "g", id="0")
        got, t0 = 0, time.perf_counter()
        deadline = time.monotonic() + 120
        while got < n and time.monotonic() < deadline:
            for _, entries in r.xreadgroup("g", "c1", {key: ">"}, count=1000, block=100) or []:
                got += r.xack(key, "g", *[i for i, _ in entries])
        rate = got / (time.perf_counter() - t0)
        self.drop_topic(key)
        return {"msgs_s": rate}

    def sync(self, samples: int) -> dict:
        key, body, lat = base.unique("s"), b"x" * 1024, []
        for _ in range(samples):
            t = time.perf_counter()
            self.client.r.xadd(key, {"b": body})
            lat.append(time.perf_counter() - t)
        self.drop_topic(key)
        return base.latency_stats(lat, "sync")

    def e2e(self, rate: int, seconds: float) -> dict:
        key, body = base.unique("e"), b"x" * 1024
        r = self.client.r

        def send_many(k):   # one XADD, or a pipeline of those due when it fell behind
            if k == 1:
                r.xadd(key, {"b": body, "t": repr(time.time())})
                return
            pipe = r.pipeline(transaction=False)
            for _ in range(k):
                pipe.xadd(key, {"b": body, "t": repr(time.time())})
            pipe.execute()

        def produce_paced(n):
            base.paced_runs(rate, n, send_many)
        out = base.e2e_run(self.name, self, key, rate, seconds, produce_paced)
        self.drop_topic(key)
        return out
