"""AsyncPullConsumer: the PullConsumer's buffer, awaited and iterated.

The sync PullConsumer keeps pulling on its IO thread into its buffer; here a
pull answer that buffered messages also sets an asyncio.Event on the loop
(call_soon_threadsafe), and `poll` takes what is buffered without blocking
(`PullConsumer.poll(0)`), waiting on the event in between. Commits, seeks by
time and start/shutdown run on the control thread (bridge.py). Does not own
pulling, rebalancing or offsets (quiver.client.consumer).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, Unpack

from quiver.aio.bridge import AsyncClient
from quiver.client.base import MessageQueue
from quiver.client.consumer import PullConsumer
from quiver.client.message import MessageExt, MessageSelector
from quiver.client.options import ConsumerOptions, ConsumerSettings
from quiver.errors import ClientError, TopicNotExistError
from quiver.wire.curve import Credentials

ITERATE_WAIT_S = 1.0   # `async for` polls in waits this long (it ends once the consumer is shut down)


class _WakingPullConsumer(PullConsumer):
    """A PullConsumer that calls `wake()` (IO thread) whenever a pull buffered messages."""

    wake: Any = None

    def _apply(self, st: Any, gen: int, offset: int, single: bool, pulled: Any) -> bool:
        took = super()._apply(st, gen, offset, single, pulled)
        if self._pulled_buf.items and self.wake is not None:
            self.wake()
        return took


class AsyncPullConsumer(AsyncClient[PullConsumer]):
    """A PullConsumer for asyncio: `async for msg in consumer`, `await consumer.poll()`,
    `await consumer.commit()`. Options are PullConsumer's (`consume_from`, `auto_commit`,
    `options=ConsumerOptions(...)`, `credentials=` ...). `subscribe` and `unsubscribe` work
    before and while running (the group rebalances on a thread of the consumer's own):

        c = AsyncPullConsumer("cg", namesrv=ns, consume_from="first", auto_commit=False)
        c.subscribe("Orders", "*")
        async with c:
            async for msg in c:
                await handle(msg)
                await c.commit()               # at-least-once: commit after handling
    """

    _sync: _WakingPullConsumer

    def __init__(self, group: str, namesrv: str | list[str] | None = None, *,
                 options: ConsumerOptions | None = None, credentials: str | Credentials | None = None,
                 trace: bool | None = None, **settings: Unpack[ConsumerSettings]) -> None:
        super().__init__()
        self._sync = self._make(_WakingPullConsumer, group, namesrv, options=options, credentials=credentials, trace=trace,
                                **settings)
        if self._sync.options.direct_poll:   # its poll never waits in PullConsumer.poll: nothing would hold pulls
            raise ValueError("direct_poll is for PullConsumer.poll(); AsyncPullConsumer waits for the IO thread's pulls")
        self._arrived: asyncio.Event | None = None

    @property
    def group(self) -> str:
        """The consumer group."""
        return self._sync.group

    def subscribe(self, topic: str, expression: str | MessageSelector = "*") -> None:
        """A tag expression ("TagA || TagB", "*") or MessageSelector.sql(...). While running it
        does not wait: the group rebalances off the loop (an SQL92 expression is then checked by
        its first pulls, not here)."""
        if self._started:
            self._sync._change_soon(topic, expression)
        else:
            self._sync.subscribe(topic, expression)

    def unsubscribe(self, topic: str) -> None:
        """Stop consuming `topic`: nothing more of it is handed out; its queues commit their
        consumed offsets and are given up off the loop (PullConsumer.unsubscribe)."""
        if self._started:
            self._sync._change_soon(topic, None)
        else:
            self._sync.unsubscribe(topic)

    async def start(self) -> AsyncPullConsumer:
        """Start the PullConsumer (off the loop) and wake `poll` whenever a pull buffered messages."""
        if self._started:
            return self
        loop = asyncio.get_running_loop()
        arrived = self._arrived = asyncio.Event()

        def wake() -> None:
            try:
                loop.call_soon_threadsafe(arrived.set)
            except RuntimeError:  # the loop is closed
                pass
        self._sync.wake = wake
        return await super().start()

    async def shutdown(self) -> None:
        """Commit (with auto_commit) and stop; an `async for` under way ends."""
        await super().shutdown()
        if self._arrived is not None:
            self._arrived.set()

    # ---- messages ----------------------------------------------------------------------------

    async def poll(self, timeout: float = 1.0, max_messages: int | None = None) -> list[MessageExt]:
        """Messages pulled so far, waiting up to `timeout` s for the first (never blocking the loop).
        Polled messages count as consumed (committed by `commit()` or auto_commit). A subscribed
        topic that does not exist yet is waited for; with wait_for_topic=False TopicNotExistError
        is raised as `PullConsumer.poll` does: only when there is nothing to return."""
        loop = self._need_started()
        assert self._arrived is not None
        deadline = loop.time() + timeout
        while self._started:
            self._arrived.clear()  # before looking: a pull answered after the look sets it again
            try:
                msgs = self._take(max_messages)
            except TopicNotExistError:
                if loop.time() >= deadline or self._sync._missing_topics(every=True):
                    raise
                msgs = []
            left = deadline - loop.time()
            if msgs or left <= 0:
                return msgs
            try:
                await asyncio.wait_for(self._arrived.wait(), left)
            except TimeoutError:
                return self._take(max_messages)
        return []

    def _take(self, max_messages: int | None) -> list[MessageExt]:
        if not self._started:
            return []
        try:
            return self._sync.poll(0, max_messages)
        except ClientError:
            if self._sync._started:
                raise
            return []  # shut down meanwhile (its event woke us): nothing more to hand out

    def __aiter__(self) -> AsyncIterator[MessageExt]:
        return self

    async def __anext__(self) -> MessageExt:
        """The next message, one at a time (each counts as consumed when it is handed out)."""
        while self._started:
            msgs = await self.poll(ITERATE_WAIT_S, max_messages=1)
            if msgs:
                return msgs[0]
        raise StopAsyncIteration

    # ---- offsets ---------------------------------------------------------------------------

    async def commit(self) -> None:
        """Store the consumed position of every queue on its broker (control thread)."""
        self._need_started()
        await self._blocking(self._sync.commit)

    def assignment(self) -> list[MessageQueue]:
        """The queues this consumer owns now."""
        return self._sync.assignment()

    def committed(self, mq: MessageQueue) -> int | None:
        """The offset last stored for `mq`, None if none yet or not assigned."""
        return self._sync.committed(mq)

    def seek(self, mq: MessageQueue, offset: int) -> None:
        """Pull `mq` again from `offset` (what is buffered of it is dropped); no broker call."""
        self._sync.seek(mq, offset)

    async def seek_to_timestamp(self, ts_ms: int) -> None:
        """Every assigned queue from its first message stored at or after `ts_ms` (epoch ms)."""
        self._need_started()
        await self._blocking(self._sync.seek_to_timestamp, ts_ms)

    async def seek_to_begin(self) -> None:
        """Every assigned queue from its first stored message."""
        self._need_started()
        await self._blocking(self._sync.seek_to_begin)

    async def seek_to_end(self) -> None:
        """Every assigned queue past its last stored message: only new ones are consumed."""
        self._need_started()
        await self._blocking(self._sync.seek_to_end)

    def stats(self) -> dict[str, Any]:
        """Counters: records skipped as undecodable, offset resets applied; subscribed topics
        that do not exist yet ("missing_topics")."""
        return self._sync.stats()
