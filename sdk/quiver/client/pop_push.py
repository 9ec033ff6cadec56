"""PushConsumer's POP mode (`PushConsumer(..., pop=True)`): listeners as usual, no queue ownership.

One receive thread pops messages (quiver.client.popping) while the consume pool
has room, and hands them to the listener in batches of `consume_batch_size`
(with `consume_inline`, calls the listener itself).
SUCCESS acks each message; a failure (or ConsumeResult.later) changes its
invisible duration to the retry delay, so the broker delivers it again then,
with reconsume_times + 1, and moves it to `%DLQ%<group>` past the max.
An orderly listener makes the pops FIFO (one message per message group in flight).
"""

import logging
import threading
from typing import TYPE_CHECKING

from quiver.client.message import MessageExt, ReconsumeLater
from quiver.client.popping import Popper
from quiver.errors import QuiverError
from quiver.wire.receipt_handle import MAX_INVISIBLE_MS, MIN_INVISIBLE_MS

if TYPE_CHECKING:
    from quiver.client.push_consumer import PushConsumer

log = logging.getLogger(__name__)

# RocketMQ's retry delays (delay levels 3..18): the n-th failure waits RETRY_DELAYS_MS[n - 1]
RETRY_DELAYS_MS = (10_000, 30_000, 60_000, 120_000, 180_000, 240_000, 300_000, 360_000, 420_000, 480_000,
                   540_000, 600_000, 1_200_000, 1_800_000, 3_600_000, 7_200_000)
LEVELS_MS = (1_000, 5_000) + RETRY_DELAYS_MS
RECEIVE_WAIT_S = 2.0


def retry_delay_ms(later: ReconsumeLater, reconsume: int) -> int:
    """The invisible time a failed message gets: the listener's choice, else RocketMQ's table."""
    if later.delay_ms:
        ms = later.delay_ms
    elif later.delay_level:
        ms = LEVELS_MS[min(later.delay_level, len(LEVELS_MS)) - 1]
    else:
        ms = RETRY_DELAYS_MS[min(reconsume, len(RETRY_DELAYS_MS) - 1)]
    return min(max(ms, MIN_INVISIBLE_MS), MAX_INVISIBLE_MS)


class PopPushLoop:
    """`consumer`: the PushConsumer (its subscriptions, pool, listener call and options)."""

    def __init__(self, consumer: "PushConsumer") -> None:
        self.consumer = consumer
        opts = consumer.options
        self.popper = Popper(consumer, consumer.group, consume_from="first" if opts.consume_from == "first" else "last",
                             fifo=consumer._orderly, max_reconsume_times=opts.max_reconsume_times)
        self.capacity = threading.BoundedSemaphore(opts.consume_threads * opts.consume_batch_size)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"pop-{consumer.group}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(RECEIVE_WAIT_S + self.consumer.request_timeout + 1)

    def _run(self) -> None:
        c = self.consumer
        opts = c.options
        while not self._stop.is_set():
            free = self._reserve(min(32, opts.consume_threads * opts.consume_batch_size))
            if not free:
                continue
            try:
                msgs = self.popper.receive(dict(c.subscriptions), free, opts.pop_invisible_ms, RECEIVE_WAIT_S)
            except Exception as exc:   # a broker down, a route missing: try again shortly
                log.warning("POP receive of %s failed: %s", c.group, exc)
                msgs = []
                self._stop.wait(opts.pull_delay_on_error_ms / 1000)
            for _ in range(free - len(msgs)):
                self.capacity.release()
            bs = opts.consume_batch_size
            hand = c._run_task if opts.consume_inline else c._submit   # inline: on this receive thread
            for i in range(0, len(msgs), bs):
                hand(self._consume, msgs[i:i + bs])

    def _reserve(self, most: int) -> int:
        """Take up to `most` slots of the pool (at least one, waiting briefly for it)."""
        if not self.capacity.acquire(timeout=0.5):
            return 0
        n = 1
        while n < most and self.capacity.acquire(blocking=False):
            n += 1
        return n

    def _consume(self, msgs: list[MessageExt]) -> None:
        try:
            later = self.consumer._call_listener(msgs)
            for m in msgs:
                try:
                    if later is None:
                        self.popper.ack(m)
                    else:
                        self.popper.change_invisible(m, retry_delay_ms(later, m.reconsume_times))
                except QuiverError as exc:   # stale handle: it comes back anyway (at least once)
                    log.warning("POP %s of %s failed: %s", "ack" if later is None else "retry", m.msg_id, exc)
        finally:
            for _ in msgs:
                self.capacity.release()
