"""InitProducerId and idempotent produce: a batch sent twice (a client's retry) is stored once.

As a Kafka broker does, the gateway keeps per producer id and partition the epoch and the last
five batches' sequence ranges with their sends: a batch whose sequence range is one of them is
a duplicate and answered with the first send's offset; the next batch must start right after
the last sequence (else OUT_OF_ORDER_SEQUENCE_NUMBER); an older epoch is INVALID_PRODUCER_EPOCH.
The state is kept in memory and in the queue itself: the first message of an idempotent batch
carries property kafka.seq ("pid:epoch:first sequence:count"), so a gateway that meets a
producer and partition it has no state of (it restarted, or another gateway served them)
reads it back from the partition's last TAIL_MESSAGES messages before taking the batch - a
retry across a gateway restart is still stored once. Producer ids are unique across gateways
and restarts (time and randomness); ids this gateway gave out since it started need no look.
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
TAIL_MESSAGES = 256       # how far back a partition is read for a producer's stored batches
SEQ = "kafka.seq"         # the property of an idempotent batch's first message


def seq_property(batch) -> str:
    return f"{batch.producer_id}:{batch.producer_epoch}:{batch.base_sequence}:{len(batch.records)}"


class Stored:
    """A batch found in the queue: answered with the offset it was stored at."""

    def __init__(self, offset: int):
        self._offset = offset

    def offset(self) -> int:
        return self._offset


class Idempotence:
    def __init__(self):
        self._lock = threading.Lock()
        self._state: dict[tuple, tuple[int, deque]] = {}   # (pid, topic, partition) -> (epoch, batches)
        self._issued: set[int] = set()   # producer ids given out here: no state of them can predate it

    def apis(self) -> dict:
        return {INIT_PRODUCER_ID: self.init_producer_id}

    def init_producer_id(self, body) -> dict:
        if body.transactional_id is not None:
            return {"error_code": UNSUPPORTED_VERSION, "producer_id": -1, "producer_epoch": -1}
        pid, epoch = getattr(body, "producer_id", -1), getattr(body, "producer_epoch", -1)
        if pid >= 0 and 0 <= epoch < 32767:
            return {"error_code": NONE, "producer_id": pid, "producer_epoch": epoch + 1}   # a bumped epoch
        new = ((int(time.time()) & 0x7FFFFFFF) << 31 | int.from_bytes(os.urandom(4), "big") >> 1)
        with self._lock:
            if len(self._issued) >= MAX_PRODUCERS:
                self._issued.clear()   # those forgotten are merely looked for in their queues
            self._issued.add(new)
        return {"error_code": NONE, "producer_id": new, "producer_epoch": 0}

    def needs_tail(self, topic: str, partition: int, batch) -> bool:
        """Whether the partition's stored batches of this producer must be read (`restore`) first."""
        if batch.producer_id < 0:
            return False
        with self._lock:
            return batch.producer_id not in self._issued and (batch.producer_id, topic, partition) not in self._state

    def restore(self, topic: str, partition: int, pid: int, stored) -> None:
        """The state of producer `pid` in a partition from its stored messages: (queue offset,
        kafka.seq property or None), ascending. The last epoch's last KEPT_BATCHES batches count."""
        found = []
        for offset, value in stored:
            parts = value.split(":") if value else ()
            if len(parts) == 4 and all(x.lstrip("-").isdigit() for x in parts) and int(parts[0]) == pid:
                epoch, first, count = int(parts[1]), int(parts[2]), int(parts[3])
                found.append((epoch, first, first + count - 1, offset))
        if not found:
            return
        epoch = found[-1][0]
        kept = deque(((f, last, Stored(off)) for e, f, last, off in found if e == epoch), maxlen=KEPT_BATCHES)
        with self._lock:
            self._state.setdefault((pid, topic, partition), (epoch, kept))

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
