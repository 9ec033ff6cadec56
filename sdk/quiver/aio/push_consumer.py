"""AsyncPushConsumer: PushConsumer's semantics with a coroutine listener.

Everything PushConsumer does is kept as is: rebalancing, flow control, the
consume pool, send-back and `%RETRY%` redelivery, orderly queues under broker
locks, offsets. Only the listener call differs: the pool thread that would
call `fn(msgs)` submits the coroutine to the loop
(`run_coroutine_threadsafe`) and waits for its ConsumeResult, so the loop
never blocks and `consume_threads` bounds how many listener coroutines run at
once (orderly: one per queue, in order). Start and shutdown run on the
control thread (bridge.py). Does not own any consume logic.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Unpack

from quiver.aio.bridge import AsyncClient
from quiver.aio.deliveries import SETTLE_TIMEOUT_S, Delivery, DeliveryQueue
from quiver.client.base import MessageQueue
from quiver.client.message import ConsumeResult, MessageExt, MessageSelector, ReconsumeLater
from quiver.client.metrics import ClientMetrics
from quiver.client.options import ConsumerOptions, ConsumerSettings
from quiver.client.push_consumer import PushConsumer
from quiver.errors import ClientError
from quiver.wire.curve import Credentials

# listener(msgs) -> ConsumeResult: a coroutine function (or a plain one, which then runs on the loop)
AsyncListener = Callable[[list[MessageExt]],
                         "Awaitable[ConsumeResult | ReconsumeLater] | ConsumeResult | ReconsumeLater"]
_LOOP_CHECK_S = 1.0   # a waiting pool thread looks this often whether the loop is gone


class AsyncPushConsumer(AsyncClient[PushConsumer]):
    """A PushConsumer whose listener is a coroutine; same options and results
    (`ConsumeResult.SUCCESS`, `RECONSUME_LATER`, raising counts as the latter).

        async def handle(msgs):
            for m in msgs:
                await db.save(m.body)
            return ConsumeResult.SUCCESS

        c = AsyncPushConsumer("cg", namesrv=ns, consume_from="first")
        c.subscribe("Orders", "*")
        c.register(handle)                     # orderly=True: one queue's messages in order
        async with c:
            await stop.wait()
    """

    def __init__(self, group: str, namesrv: str | list[str] | None = None, *,
                 options: ConsumerOptions | None = None, credentials: str | Credentials | None = None,
                 trace: bool | None = None, metrics: ClientMetrics | None = None,
                 **settings: Unpack[ConsumerSettings]) -> None:
        super().__init__()
        self._sync = self._make(PushConsumer, group, namesrv, options=options, credentials=credentials, trace=trace,
                                metrics=metrics, **settings)
        self._listener: AsyncListener | None = None
        self._deliveries: DeliveryQueue | None = None

    @property
    def group(self) -> str:
        """The consumer group."""
        return self._sync.group

    def subscribe(self, topic: str, expression: str | MessageSelector = "*") -> None:
        """A tag expression or MessageSelector.sql(...); before start()."""
        if self._started:
            raise ClientError("subscribe before start(): AsyncPushConsumer subscriptions are fixed once started")
        self._sync.subscribe(topic, expression)

    def register(self, fn: AsyncListener, orderly: bool = False) -> None:
        """`async def fn(msgs: list[MessageExt]) -> ConsumeResult`; before start()."""
        self._listener = fn
        self._sync.register(self._call, orderly)

    def __aiter__(self) -> AsyncIterator[Delivery]:
        """`async for d in consumer`, instead of register(): each message as a Delivery to
        settle with `d.ack()` or `d.later()`. Subscribe first; the first iteration starts the
        consumer if it is not started (orderly=True in deliveries(): one queue's in order)."""
        return self.deliveries()

    async def deliveries(self, orderly: bool = False,
                         settle_timeout_s: float = SETTLE_TIMEOUT_S) -> AsyncIterator[Delivery]:
        """The messages as Deliveries (see __aiter__), ending when the consumer shuts down. A
        delivery not settled within `settle_timeout_s` is redelivered later."""
        if self._deliveries is None:
            if self._listener is not None or self._started:
                raise ClientError("iterate an AsyncPushConsumer instead of register(), before it starts")
            if self._sync.options.consume_batch_size != 1:
                raise ClientError("async for settles one message at a time: leave consume_batch_size at 1")
            self._deliveries = DeliveryQueue(settle_timeout_s)
            self.register(self._deliveries.listener, orderly)
        if not self._started:
            await self.start()
        while True:
            try:
                yield await self._deliveries.next()
            except StopAsyncIteration:
                return

    async def __aenter__(self) -> AsyncPushConsumer:
        # as PushConsumer's `with`: starts only once subscribed and registered
        if self._listener is not None and self._sync._subscriptions:
            return await self.start()
        return self

    async def start(self) -> AsyncPushConsumer:
        """Start consuming (off the loop); the listener runs on this loop. ClientError without a
        listener or a subscription."""
        if self._started:
            return self
        self._loop = asyncio.get_running_loop()   # the listener runs here from the first message on
        return await super().start()

    def _call(self, msgs: list[MessageExt]) -> ConsumeResult | ReconsumeLater:
        # a consume pool thread: the listener runs on the loop, this thread waits for its result
        loop = self._loop
        if loop is None or loop.is_closed():
            raise ClientError("the event loop of this consumer is closed")
        fut = asyncio.run_coroutine_threadsafe(self._listen(msgs), loop)
        while True:
            try:
                return fut.result(_LOOP_CHECK_S)
            except FutureTimeout:
                if loop.is_closed():
                    fut.cancel()
                    raise ClientError("the event loop of this consumer closed under a listener call") from None

    async def shutdown(self) -> None:
        """Stop consuming: `async for` ends; what is unsettled is redelivered (at-least-once)."""
        if self._deliveries is not None:
            self._deliveries.close()
        await super().shutdown()

    async def _listen(self, msgs: list[MessageExt]) -> ConsumeResult | ReconsumeLater:
        assert self._listener is not None
        out = self._listener(msgs)
        if inspect.isawaitable(out):
            out = await out
        return out

    def assignment(self, include_retry: bool = False) -> list[MessageQueue]:
        """The queues this consumer owns now (with `include_retry`, its %RETRY% queue too)."""
        return self._sync.assignment(include_retry)

    def stats(self) -> dict[str, Any]:
        """Counters: records skipped as undecodable, offset resets applied; subscribed topics
        that do not exist yet ("missing_topics": waited for unless wait_for_topic=False)."""
        return self._sync.stats()
