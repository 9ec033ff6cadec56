"""A push consumer's per-queue cache (ProcessQueue) and its timer thread.

ProcessQueue holds the pulled, unfinished messages of one owned queue, keyed
by queue offset; its lowest key is the offset safe to commit. DelayedCalls runs
the consumer's delayed and periodic calls on one thread.
"""

import heapq
import itertools
import logging
import threading
import time

from quiver.client.base import MessageQueue
from quiver.client.message import MessageExt

log = logging.getLogger(__name__)


class DelayedCalls:
    """One thread running delayed calls (pull back-off, suspends, periodic jobs)."""

    def __init__(self, name: str):
        self._heap: list = []
        self._cond = threading.Condition()
        self._seq = itertools.count()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def call_later(self, delay_s: float, fn, *args) -> None:
        with self._cond:
            heapq.heappush(self._heap, (time.monotonic() + delay_s, next(self._seq), fn, args))
            self._cond.notify()

    def every(self, interval_s: float, fn) -> None:
        def tick():
            try:
                fn()
            finally:
                if not self._stopped:
                    self.call_later(interval_s, tick)
        self.call_later(interval_s, tick)

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped:
                    now = time.monotonic()
                    if self._heap and self._heap[0][0] <= now:
                        break
                    self._cond.wait(self._heap[0][0] - now if self._heap else None)
                if self._stopped:
                    return
                _, _, fn, args = heapq.heappop(self._heap)
            try:
                fn(*args)
            except Exception:
                log.exception("timer job %s failed", getattr(fn, "__name__", fn))


class ProcessQueue:
    """Cached messages of one owned queue, keyed by queue offset (pulled in order)."""

    def __init__(self, mq: MessageQueue, addr: str, offset: int):
        self.mq, self.addr = mq, addr
        self.lock = threading.Lock()
        self.msgs: dict[int, MessageExt] = {}
        self.bytes = 0
        self.next_offset = offset
        self.narrow_until = 0      # below this offset pull one record at a time (after an unwalkable answer)
        self.dropped = False       # released, or replaced by an offset reset: late answers and commits are ignored
        # orderly
        self.consume_lock = threading.Lock()
        self.locked = False
        self.lock_ts = 0.0
        self.scheduled = False
        self.suspended_until = 0.0
        self.rebalance_t0: float | None = None

    def add(self, msgs: list[MessageExt], next_offset: int) -> None:
        with self.lock:
            for m in msgs:
                self.msgs[m.queue_offset] = m
                self.bytes += len(m.body)
            self.next_offset = next_offset

    def remove(self, msgs) -> int:
        """Forget finished messages; returns the offset now safe to commit."""
        with self.lock:
            for m in msgs:
                if self.msgs.pop(m.queue_offset, None) is not None:
                    self.bytes -= len(m.body)
            return self.commit_offset()

    def commit_offset(self) -> int:
        for off in self.msgs:  # the lowest unfinished message
            return off
        return self.next_offset

    def head(self, n: int) -> list[MessageExt]:
        with self.lock:
            return list(itertools.islice(self.msgs.values(), n))

    def span(self) -> int:
        if len(self.msgs) < 2:
            return 0
        return next(reversed(self.msgs)) - next(iter(self.msgs))
