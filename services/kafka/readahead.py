"""Read-ahead of Fetch: a partition's next pull leaves as soon as an answer is built.

A Kafka consumer sends its next Fetch only once it has taken the last answer in, so pulled
one Fetch at a time the broker would idle while the client reads and the client while the
broker reads. After a Fetch answered records of a partition with more stored behind them,
the pull of the next offset is sent at once and kept here under (topic, partition, offset);
the next Fetch of that offset - from any connection of the same user (each SASL user has its
own) - takes it instead of pulling. A pull
nobody asks for within AHEAD_TTL_S is dropped; at most MAX_AHEAD are kept (the oldest go), each
of at most AHEAD_BYTES (a client with a larger partition budget gets answers of that size from
it), so what is held is bounded whatever the clients ask.
Its answer is also read and converted ahead (`prepare`, on one worker thread), while the client
takes in the last answer, so the next Fetch finds its records ready. Only records are taken
from it: an answer that found none is pulled again, so a read-ahead never hides what was stored
after it left.
"""

import logging
import queue
import threading
import time
from concurrent.futures import Future

log = logging.getLogger(__name__)

AHEAD_TTL_S = 5.0
MAX_AHEAD = 64
AHEAD_BYTES = 1 << 20   # librdkafka's and the Java client's default partition budget


class ReadAhead:
    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self._lock = threading.Lock()
        self._pulls: dict[tuple, tuple[float, object]] = {}   # (topic, partition, offset) -> (when, future)
        self.taken = self.dropped = 0
        self._work: queue.Queue | None = None

    def put(self, topic: str, partition: int, offset: int, future, prepare=None) -> None:
        """Keep `future` (a pull under way) for the Fetch of this offset; with `prepare`, what is kept
        is a future of `prepare(future)`, run on the worker thread."""
        if prepare is not None:
            future = self._prepared(future, prepare)
        now = self.clock()
        with self._lock:
            self._pulls.pop((topic, partition, offset), None)
            self._pulls[(topic, partition, offset)] = (now, future)
            while self._pulls:
                key, (when, _) = next(iter(self._pulls.items()))
                if len(self._pulls) <= MAX_AHEAD and now - when <= AHEAD_TTL_S:
                    break
                del self._pulls[key]
                self.dropped += 1

    def take(self, topic: str, partition: int, offset: int):
        """The pull sent ahead for this offset (its future), or None."""
        with self._lock:
            got = self._pulls.pop((topic, partition, offset), None)
            if got is None:
                return None
            if self.clock() - got[0] > AHEAD_TTL_S:
                self.dropped += 1
                return None
            self.taken += 1
            return got[1]

    def _prepared(self, pull, prepare) -> Future:
        out: Future = Future()
        with self._lock:
            if self._work is None:
                self._work = queue.Queue()
                threading.Thread(target=self._worker, args=(self._work,), name="kafka-readahead", daemon=True).start()
        self._work.put((pull, prepare, out))
        return out

    @staticmethod
    def _worker(work: queue.Queue) -> None:
        while True:
            pull, prepare, out = work.get()
            try:
                out.set_result(prepare(pull))
            except BaseException as exc:   # handed to the Fetch that takes it: it pulls again
                out.set_exception(exc)
