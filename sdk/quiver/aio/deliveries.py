"""`async for` over an AsyncPushConsumer: one Delivery per message, settled by the app.

The consumer keeps all of PushConsumer's machinery (rebalancing, flow control,
send-back, orderly locks, offsets). Its listener, run on the loop, puts each
message in an asyncio queue as a Delivery and waits for the app to settle it:
`ack()` consumes it, `later()` sends it back for redelivery. The waiting
listener calls are what bound the messages in the app's hands (at most
`consume_threads`; orderly: one per queue, in order). A delivery not settled
within `settle_timeout_s` counts as `later()` (RocketMQ's consumeTimeout).
Does not own the consume logic (quiver.client.push_consumer).
"""

from __future__ import annotations

import asyncio

from quiver.client.message import ConsumeResult, MessageExt, ReconsumeLater
from quiver.errors import ClientError

SETTLE_TIMEOUT_S = 15 * 60.0   # RocketMQ's consumeTimeout (15 minutes)


class Delivery:
    """One message of `async for d in consumer`; settle it once with `ack()` or `later()`."""

    __slots__ = ("message", "_result")

    def __init__(self, message: MessageExt, result: asyncio.Future[ConsumeResult | ReconsumeLater]) -> None:
        self.message = message
        self._result = result

    @property
    def settled(self) -> bool:
        """Whether ack() or later() was called (or the settle timeout passed)."""
        return self._result.done()

    def ack(self) -> None:
        """Consumed: its offset may be committed."""
        self._settle(ConsumeResult.SUCCESS)

    def later(self, delay_level: int | None = None, seconds: float | None = None) -> None:
        """Not consumed: redelivered later (the broker's next delay level, or the one given, as
        `ConsumeResult.later`); after max_reconsume_times, the dead-letter topic."""
        self._settle(ConsumeResult.RECONSUME_LATER if delay_level is None and seconds is None
                     else ConsumeResult.later(delay_level=delay_level, seconds=seconds))

    def _settle(self, result: ConsumeResult | ReconsumeLater) -> None:
        if self._result.done():
            raise ClientError(f"message {self.message.msg_id} is settled already")
        self._result.set_result(result)


class DeliveryQueue:
    """The listener side (on the loop) and the iterator side of `async for`."""

    def __init__(self, settle_timeout_s: float = SETTLE_TIMEOUT_S) -> None:
        self.settle_timeout_s = settle_timeout_s
        self._queue: asyncio.Queue[Delivery | None] = asyncio.Queue()
        self._unsettled: set[asyncio.Future[ConsumeResult | ReconsumeLater]] = set()
        self.closed = False

    async def listener(self, msgs: list[MessageExt]) -> ConsumeResult | ReconsumeLater:
        """The consumer's listener: hands the message out and waits for its settlement."""
        if self.closed:
            return ConsumeResult.RECONSUME_LATER
        result: asyncio.Future[ConsumeResult | ReconsumeLater] = asyncio.get_running_loop().create_future()
        (msg,) = msgs   # consume_batch_size 1: settled one by one
        self._queue.put_nowait(Delivery(msg, result))
        self._unsettled.add(result)
        try:
            return await asyncio.wait_for(asyncio.shield(result), self.settle_timeout_s)
        except TimeoutError:
            if not result.done():
                result.set_result(ConsumeResult.RECONSUME_LATER)
            return ConsumeResult.RECONSUME_LATER
        finally:
            self._unsettled.discard(result)

    def close(self) -> None:
        """The consumer stops: iteration ends at once (what was queued but not handed out is
        not), and what is unsettled counts as later() (redelivered), so no listener call holds
        the shutdown."""
        if not self.closed:
            self.closed = True
            while not self._queue.empty():   # not handed out yet: never shown, settled below
                self._queue.get_nowait()
            self._queue.put_nowait(None)
        for result in list(self._unsettled):   # handed out, never settled: not consumed
            if not result.done():
                result.set_result(ConsumeResult.RECONSUME_LATER)

    async def next(self) -> Delivery:
        d = await self._queue.get()
        if d is None:
            self._queue.put_nowait(None)   # every other iterator ends too
            raise StopAsyncIteration
        return d
