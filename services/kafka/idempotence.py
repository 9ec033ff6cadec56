"""InitProducerId and idempotent produce: a batch sent twice (a client's retry) is stored once.

As a Kafka broker does, the gateway keeps per producer id and partition the epoch and the last
five batches' sequence ranges with their sends: a batch whose sequence range is one of them is
a duplicate and answered with the first send's offset; the next batch must start right after
the last sequence (else OUT_OF_ORDER_SEQUENCE_NUMBER); an older epoch is INVALID_PRODUCER_EPOCH.
The state is the gateway's memory: a producer whose partition it has not seen (a new gateway,
one restarted) starts at any sequence, so a duplicate in flight across a gateway restart can
be stored twice. Producer ids are unique across gateways and restarts (time and randomness).
Transactional ids are refused: transactions are not served.
"""

import os
import threading
import time
from collections import deque

from .protocol import INIT_PRODUCER_ID, NONE, UNSUPPORTED_VERSION

OUT_OF_ORDER_SEQUENCE, INVALID_PRODUCER_EPOCH = 45, 47
KEPT_BATCHES = 5          # Kafka's max.in.flight.requests.per.connection bound for idempotence
MAX_PRODUCERS = 100_000   # partitions' states kept; the least recently used go first


class Idempotence:
    def __init__(self):
        self._lock = threading.Lock()
        self._state: dict[tuple, tuple[int, deque]] = {}   # (pid, topic, partition) -> (epoch, batches)

    def apis(self) -> dict:
        return {INIT_PRODUCER_ID: self.init_producer_id}

    def init_producer_id(self, body) -> dict:
        if body.transactional_id is not None:
            return {"error_code": UNSUPPORTED_VERSION, "producer_id": -1, "producer_epoch": -1}
        pid, epoch = getattr(body, "producer_id", -1), getattr(body, "producer_epoch", -1)
        if pid >= 0 and 0 <= epoch < 32767:
            return {"error_code": NONE, "producer_id": pid, "producer_epoch": epoch + 1}   # a bumped epoch
        new = ((int(time.time()) & 0x7FFFFFFF) << 31 | int.from_bytes(os.urandom(4), "big") >> 1)
        return {"error_code": NONE, "producer_id": new, "producer_epoch": 0}

    def check(self, topic: str, partition: int, batch):
        """(error, None), (NONE, the first send of this batch: a duplicate) or (NONE, None): send it."""
        if batch.producer_id < 0:
            return NONE, None
        key = (batch.producer_id, topic, partition)
        first, last = batch.base_sequence, batch.base_sequence + len(batch.records) - 1
        with self._lock:
            epoch, kept = self._state.get(key, (batch.producer_epoch, None))
            if batch.producer_epoch < epoch:
                return INVALID_PRODUCER_EPOCH, None
            if kept is None or batch.producer_epoch > epoch:
                return NONE, None
            for seq_first, seq_last, sent in kept:
                if (seq_first, seq_last) == (first, last):
                    return NONE, sent
            if first != kept[-1][1] + 1:
                return OUT_OF_ORDER_SEQUENCE, None
            return NONE, None

    def record(self, topic: str, partition: int, batch, sent) -> None:
        """`batch` was sent as `sent`: the next one continues after its last sequence."""
        if batch.producer_id < 0:
            return
        key = (batch.producer_id, topic, partition)
        with self._lock:
            epoch, kept = self._state.pop(key, (batch.producer_epoch, None))
            if kept is None or batch.producer_epoch > epoch:
                kept = deque(maxlen=KEPT_BATCHES)
            kept.append((batch.base_sequence, batch.base_sequence + len(batch.records) - 1, sent))
            self._state[key] = (batch.producer_epoch, kept)   # re-inserted: most recently used last
            while len(self._state) > MAX_PRODUCERS:
                del self._state[next(iter(self._state))]

    def forget(self, topic: str, partition: int, batch) -> None:
        """`batch` failed: its retry must be taken, so the partition's state starts over."""
        if batch.producer_id >= 0:
            with self._lock:
                self._state.pop((batch.producer_id, topic, partition), None)
