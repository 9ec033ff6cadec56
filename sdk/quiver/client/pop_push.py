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
from collections.abc import Callable

from quiver.client.consume_service import ConsumeService
from quiver.client.message import MessageExt, MessageSelector, ReconsumeLater
from quiver.client.options import ConsumerOptions
from quiver.client.popping import Popper
from quiver.errors import QuiverError
from quiver.wire.receipt_handle import MAX_INVISIBLE_MS, MIN_INVISIBLE_MS

log = logging.getLogger(__name__)

RECEIVE_WAIT_S = 2.0


def retry_delay_ms(later: ReconsumeLater, reconsume: int, levels_ms: tuple[int, ...]) -> int:
    """The invisible time a failed message gets: the listener's choice, else the delay level
    table's (`levels_ms`, as the brokers' for a push retry: the n-th failure waits level 2 + n)."""
    if later.delay_ms:
        ms = later.delay_ms
    else:
        level = later.delay_level or reconsume + 3
        ms = levels_ms[min(level, len(levels_ms)) - 1]
    return min(max(ms, MIN_INVISIBLE_MS), MAX_INVISIBLE_MS)


class PopPushLoop:
    """Receives with `popper` what `subscriptions()` names and hands it to `consume` (its
    threads, or this receive thread with consume_inline); `wait_s`: how long stop() waits for
    a receive under way (it waits on the broker at most RECEIVE_WAIT_S)."""

    def __init__(self, popper: Popper, consume: ConsumeService, subscriptions: Callable[[], dict[str, MessageSelector]],
                 options: ConsumerOptions, wait_s: float) -> None:
        self.popper, self.consume, self.subscriptions, self.options = popper, consume, subscriptions, options
        self.group = popper.group
        self.capacity = threading.BoundedSemaphore(options.consume_threads * options.consume_batch_size)
        self._wait_s = RECEIVE_WAIT_S + wait_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"pop-{self.group}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():   # a start() that failed its checks never started it
            self._thread.join(self._wait_s + 1)

    def _run(self) -> None:
        opts = self.options
        hand = self.consume.run if opts.consume_inline else self.consume.submit   # inline: on this receive thread
        while not self._stop.is_set():
            free = self._reserve(min(32, opts.consume_threads * opts.consume_batch_size))
            if not free:
                continue
            try:
                msgs = self.popper.receive(dict(self.subscriptions()), free, opts.pop_invisible_ms, RECEIVE_WAIT_S)
            except Exception as exc:   # a broker down, a route missing: try again shortly
                log.warning("POP receive of %s failed: %s", self.group, exc)
                msgs = []
                self._stop.wait(opts.pull_delay_on_error_ms / 1000)
            for _ in range(free - len(msgs)):
                self.capacity.release()
            bs = opts.consume_batch_size
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
            later = self.consume.call_listener(msgs)
            for m in msgs:
                try:
                    if later is None:
                        self.popper.ack(m)
                    else:
                        self.popper.change_invisible(m, retry_delay_ms(later, m.reconsume_times,
                                                                       self.options.delay_levels_ms))
                except QuiverError as exc:   # stale handle: it comes back anyway (at least once)
                    log.warning("POP %s of %s failed: %s", "ack" if later is None else "retry", m.msg_id, exc)
        finally:
            for _ in msgs:
                self.capacity.release()
