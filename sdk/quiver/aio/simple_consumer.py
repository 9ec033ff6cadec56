"""AsyncSimpleConsumer: SimpleConsumer (POP) awaited, with a per-message ack.

A receive long-polls the brokers for up to `wait_s`: it runs on the default
executor, so a waiting receive never holds the client's control thread (acks
and invisible-time changes go there, one at a time). Does not own the POP
logic (quiver.client.simple_consumer, popping).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator

from quiver.aio.bridge import AsyncClient
from quiver.client.message import MessageExt, MessageSelector
from quiver.client.simple_consumer import SimpleConsumer
from quiver.wire.curve import Credentials


class AsyncSimpleConsumer(AsyncClient[SimpleConsumer]):
    """SimpleConsumer for asyncio: `await receive()`, then `await ack(msg)` for each message
    handled (not acked within its invisible duration: delivered again). Same options.

        async with AsyncSimpleConsumer("billing", namesrv=ns, consume_from="first") as c:
            c.subscribe("Orders", "paid")
            async for msg in c.messages(invisible_duration_s=30):
                await handle(msg)
                await c.ack(msg)
    """

    def __init__(self, group: str, namesrv: str | list[str] | None = None, *,
                 credentials: str | Credentials | None = None, consume_from: str = "last", fifo: bool = False,
                 max_reconsume_times: int | None = None, await_duration_s: float = 5.0,
                 request_timeout: float = 3.0) -> None:
        super().__init__()
        self._sync = self._make(SimpleConsumer, group, namesrv, credentials=credentials, consume_from=consume_from,
                                fifo=fifo, max_reconsume_times=max_reconsume_times,
                                await_duration_s=await_duration_s, request_timeout=request_timeout)

    @property
    def group(self) -> str:
        """The consumer group."""
        return self._sync.group

    def subscribe(self, topic: str, expression: str | MessageSelector = "*") -> None:
        """Receive `topic`'s messages whose tag matches `expression` (tags only, as POP serves)."""
        self._sync.subscribe(topic, expression)

    def unsubscribe(self, topic: str) -> None:
        """Stop receiving `topic`."""
        self._sync.unsubscribe(topic)

    async def receive(self, max_messages: int = 16, invisible_duration_s: float = 60.0,
                      wait_s: float | None = None) -> list[MessageExt]:
        """Up to `max_messages`, each invisible to the group for `invisible_duration_s`; waits up
        to `wait_s` (default await_duration_s) without blocking the loop, then returns []."""
        self._need_started()
        return await asyncio.get_running_loop().run_in_executor(
            None, functools.partial(self._sync.receive, max_messages, invisible_duration_s, wait_s))

    async def messages(self, max_messages: int = 16, invisible_duration_s: float = 60.0) -> AsyncIterator[MessageExt]:
        """Every message received, one at a time, until the consumer shuts down; ack each."""
        while self._started:
            for msg in await self.receive(max_messages, invisible_duration_s):
                yield msg

    async def ack(self, msg: MessageExt) -> None:
        """Done with `msg`: never delivered to the group again (ReceiptHandleExpiredError if its
        handle is stale)."""
        self._need_started()
        await self._blocking(self._sync.ack, msg)

    async def change_invisible_duration(self, msg: MessageExt, seconds: float) -> str:
        """`msg` becomes visible again `seconds` from now; its new receipt handle is returned
        (and set on `msg`)."""
        self._need_started()
        return await self._blocking(self._sync.change_invisible_duration, msg, seconds)
