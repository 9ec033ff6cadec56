"""Caps on what one access key (and everyone together) holds of the proxy's gRPC workers.

grpcio's synchronous server runs every RPC on a worker of its thread pool for the RPC's whole
life: a Telemetry stream holds its worker as long as the client is connected, a long-polling
receive for its poll. Without caps, idle streams of one user take every worker and everyone
else's calls wait in the pool's queue until they time out. So:

  - open Telemetry streams: at most --max-streams-per-key per access key and --max-streams in
    all (below --grpc-threads, so the other workers always serve calls);
  - long polls in flight (ReceiveMessage, PullMessage: the calls that hold a worker while
    nothing comes): at most --max-calls-per-key per access key (half the workers the streams
    leave), and those workers in all.

Unary calls (sends, acks, routes) are not counted: each ends within the request timeout, and a
pipelining client's 1,000 sends in flight wait in the pool's queue as grpcio queues them, rather
than being refused past a count of workers.

So one user holds at most its stream cap and half the call workers; the rest serve everyone else.

A refusal is TOO_MANY_REQUESTS saying which cap. Without access keys every client is one
identity (""), held to the totals only.
"""

import contextlib
import threading
from collections import Counter

from rocketmq.grpc_protocol.definition_pb2 import Code

from .statuses import Refused

TOTAL = None   # the key of a table's total (access keys are strings)


class Limits:
    def __init__(self, streams_per_key: int, streams_total: int, calls_per_key: int, calls_total: int):
        self.streams_per_key = streams_per_key
        self.streams_total = streams_total
        self.calls_per_key = calls_per_key
        self.calls_total = calls_total
        self._streams: Counter = Counter()      # access key -> held; TOTAL -> all of them
        self._calls: Counter = Counter()
        self._lock = threading.Lock()
        self.refused = 0

    @classmethod
    def of(cls, config) -> "Limits":
        return cls(min(config.max_streams_per_key, config.streams_cap), config.streams_cap,
                   config.calls_per_key_cap, config.calls_cap)

    def counts(self) -> dict:
        with self._lock:
            return {"open_streams": self._streams[TOTAL], "calls_in_flight": self._calls[TOTAL],
                    "refused_over_caps": self.refused}

    def open_stream(self, access_key: str) -> None:
        self._take(self._streams, access_key, self.streams_per_key, self.streams_total, "Telemetry streams")

    def close_stream(self, access_key: str) -> None:
        self._give(self._streams, access_key)

    @contextlib.contextmanager
    def call(self, access_key: str):
        self._take(self._calls, access_key, self.calls_per_key, self.calls_total, "calls in flight")
        try:
            yield
        finally:
            self._give(self._calls, access_key)

    def _take(self, table: Counter, key: str, per_key: int, total: int, what: str) -> None:
        with self._lock:
            if table[TOTAL] >= total:
                self.refused += 1
                raise Refused(Code.TOO_MANY_REQUESTS, f"the proxy holds {total} {what} already (all clients): "
                                                      "retry later, or run another proxy")
            if key and table[key] >= per_key:
                self.refused += 1
                raise Refused(Code.TOO_MANY_REQUESTS, f"access key {key!r} holds {per_key} {what} already: close "
                                                      "some (each client instance opens one stream) or retry later")
            table[key] += 1
            table[TOTAL] += 1

    def _give(self, table: Counter, key: str) -> None:
        with self._lock:
            table[TOTAL] -= 1
            table[key] -= 1
            if table[key] <= 0:
                del table[key]
