"""AsyncProducer and AsyncTransactionProducer: the sync producers' sends, awaited.

Every send goes through the sync Producer's non-blocking path (auto-batched
`send_async`, `send_batch_async`, `_call_async` with its retries on another
broker) and is bridged to an asyncio Future (bridge.py); the first send to a
topic awaits its route on the control thread. Does not own queue choice,
batching, retries or the transaction protocol (quiver.client owns them).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from quiver.aio.bridge import AsyncClient, resolver
from quiver.client.base import MessageQueue
from quiver.client.message import Message, MessageExt, SendResult, SendStatus, TransactionState
from quiver.client.producer import Producer, QueueSelector
from quiver.client.request_reply import send_reply
from quiver.client.transaction_producer import TransactionProducer, TransactionSendResult
from quiver.errors import RequestTimeoutError
from quiver.wire import record
from quiver.wire.codes import RequestCode
from quiver.wire.futures import LightFuture

log = logging.getLogger(__name__)

T = TypeVar("T")
CHECK_WAIT_S = 30.0   # a coroutine checker's answer is awaited this long (then the broker asks again)

# execute(msg, arg) / checker(msg) of AsyncTransactionProducer: a coroutine function or a plain one
Execute = Callable[[Message, Any], "Awaitable[TransactionState] | TransactionState"]
Checker = Callable[[MessageExt], "Awaitable[TransactionState] | TransactionState"]


class AsyncProducer(AsyncClient[Producer]):
    """A Producer for asyncio: the same options (`quiver.Producer`'s keywords, `credentials=`
    or QUIVER_CREDENTIALS), every send awaitable, many in flight from one task.

        async with AsyncProducer("pg", namesrv="127.0.0.1:9876") as p:
            r = await p.send(Message("Orders", b"o-1", keys=["o-1"]))
            futs = [p.send_async(Message("Orders", b"%d" % i)) for i in range(1000)]
            results = await asyncio.gather(*futs)        # no task or thread per send
    """

    _kind: type[Producer] = Producer

    def __init__(self, group: str = "DEFAULT_PRODUCER", namesrv: str | list[str] | None = None,
                 **options: Any) -> None:
        super().__init__()
        self._sync = self._make(self._kind, group, namesrv, **options)

    @property
    def group(self) -> str:
        """The producer group."""
        return self._sync.group

    # ---- sends -------------------------------------------------------------------------------

    def send_async(self, msg: Message, *, queue: MessageQueue | None = None, selector: QueueSelector | None = None,
                   arg: object = None) -> asyncio.Future[SendResult]:
        """Start a send and return its asyncio Future at once (call from the loop's thread).
        Sends to one queue are auto-batched while one is in flight; `queue` / `selector` / `arg`
        as in `Producer.send`. A message that is not valid raises here, not in the Future."""
        loop = self._need_started()
        afut: asyncio.Future[SendResult] = loop.create_future()
        ready = self._route_ready(msg.topic)
        if ready is None:
            self._submit(afut, msg, queue, selector, arg)
            return afut
        self._sync._encode(msg)  # an invalid message raises now, as without the route wait

        def go(f: asyncio.Future[Any]) -> None:
            if afut.done():
                return
            err = None if f.cancelled() else f.exception()
            if err is not None:
                afut.set_exception(err)
                return
            try:
                self._submit(afut, msg, queue, selector, arg)
            except Exception as exc:
                afut.set_exception(exc)
        ready.add_done_callback(go)
        return afut

    def _submit(self, afut: asyncio.Future[Any], msg: Message, queue: MessageQueue | None,
                selector: QueueSelector | None, arg: object) -> None:
        assert self._loop is not None
        self._sync.send_async(msg, resolver(self._loop, afut), queue=queue, selector=selector, arg=arg)

    async def send(self, msg: Message, timeout: float | None = None, *, queue: MessageQueue | None = None,
                   selector: QueueSelector | None = None, arg: object = None) -> SendResult:
        """Send one message and await the broker's answer (retried on another broker while the
        error is retryable; a chosen `queue` / `selector` queue is not). `timeout` bounds the
        wait (RequestTimeoutError); the send itself is bounded by the producer's send_timeout."""
        return await _within(self.send_async(msg, queue=queue, selector=selector, arg=arg), timeout)

    async def send_orderly(self, msg: Message, sharding_key: str, timeout: float | None = None) -> SendResult:
        """Same key -> same queue, not retried on another (that would break the order)."""
        await self._route(msg.topic)
        mq, _ = self._sync._orderly_queue(msg, sharding_key)
        return await _within(self.send_async(msg, queue=mq), timeout)

    async def send_batch(self, msgs: list[Message], timeout: float | None = None) -> list[SendResult]:
        """One batch request (one topic, no delays), retried on another broker on failure."""
        loop = self._need_started()
        if msgs:
            await self._route(msgs[0].topic)
        afut: asyncio.Future[list[SendResult]] = loop.create_future()
        self._sync.send_batch_async(msgs).add_done_callback(resolver(loop, afut))  # its Condition: once per batch
        return await _within(afut, timeout)

    async def send_oneway(self, msg: Message) -> None:
        """Send without an answer (queued on the IO thread: returns at once)."""
        await self._route(msg.topic)
        self._sync.send_oneway(msg)

    async def cancel_scheduled(self, msg_id: str, group: str = "SCHEDULE_CONSUMER", timeout: float = 3.0) -> bool:
        """`Producer.cancel_scheduled`, on the control thread."""
        self._need_started()
        return await self._blocking(self._sync.cancel_scheduled, msg_id, group, timeout)

    async def request(self, msg: Message, timeout: float = 3.0) -> MessageExt:
        """Send `msg` as a request and await its reply (Producer.request): the reply message, or
        RequestTimeoutError after `timeout` seconds. Many may be awaited at once from one task."""
        loop = self._need_started()
        await self._route(msg.topic)
        requests = self._sync.requests
        if requests is not None and requests.prepared:
            cfut = self._sync.request_async(msg, timeout)
        else:   # the first: heartbeats to every broker, on the control thread
            cfut = await self._blocking(self._sync.request_async, msg, timeout)
        afut: asyncio.Future[MessageExt] = loop.create_future()
        cfut.add_done_callback(resolver(loop, afut))
        return await afut

    async def reply(self, request: MessageExt, body: bytes, properties: dict[str, str] | None = None) -> SendResult:
        """Reply to `request` (Producer.reply): the SendResult of the stored reply."""
        loop = self._need_started()
        await self._route(request.topic)
        afut: asyncio.Future[SendResult] = loop.create_future()
        send_reply(self._sync, request, body, properties).add_done_callback(resolver(loop, afut))
        return await afut

    async def _route(self, topic: str) -> None:
        self._need_started()
        ready = self._route_ready(topic)
        if ready is not None:
            await asyncio.shield(ready)  # shared by every send waiting for it


class AsyncTransactionProducer(AsyncProducer):
    """A TransactionProducer for asyncio: `execute` and `checker` may be coroutine functions.

    `execute(msg, arg)` is awaited on the loop between the half message and END_TRANSACTION;
    a coroutine `checker(msg)` runs on the loop too (the transport's push thread waits for it),
    a plain one on that thread, so it must not touch loop-bound objects.

        async def execute(msg, arg):
            await db.insert_order(transaction_id(msg), arg)
            return TransactionState.COMMIT

        async with AsyncTransactionProducer("tpg", namesrv=ns, checker=check) as tp:
            r = await tp.send_in_transaction(Message("Orders", b"o-1"), execute, arg=order)
    """

    _kind = TransactionProducer
    _sync: TransactionProducer

    def __init__(self, group: str, namesrv: str | list[str] | None = None, checker: Checker | None = None,
                 **options: Any) -> None:
        self._checker = checker
        super().__init__(group, namesrv, checker=self._check if checker is not None else None, **options)

    def _check(self, msg: MessageExt) -> TransactionState:
        # a transport push thread: a coroutine checker runs on the loop, this thread waits for it
        assert self._checker is not None
        out = self._checker(msg)
        if not inspect.isawaitable(out):
            return out
        loop = self._loop
        if loop is None or loop.is_closed():
            if inspect.iscoroutine(out):
                out.close()
            return TransactionState.UNKNOWN  # the broker asks again later
        return asyncio.run_coroutine_threadsafe(_awaited(out), loop).result(CHECK_WAIT_S)

    async def send_in_transaction(self, msg: Message, execute: Execute, arg: object = None,
                                  check_immunity_ms: int | None = None) -> TransactionSendResult:
        """Half message -> await execute(msg, arg) -> END_TRANSACTION; the half's SendResult with
        its local_state. An exception in execute counts as UNKNOWN (the checker will be asked)."""
        tp = self._sync
        loop = self._need_started()
        msg_id, props = tp._half_properties(msg, execute, check_immunity_ms)
        await self._route(msg.topic)
        afut: asyncio.Future[Any] = loop.create_future()
        t0 = time.monotonic()
        tp._call_async(LightFuture(resolver(loop, afut)), msg.topic, [props], [msg.body], [msg.flag],
                      RequestCode.SEND_MESSAGE, lambda env, mq, addr: tp._half_sent(env, mq, addr, msg_id, props, t0),
                      sys_flag=record.TX_PREPARED)
        res, half = await afut
        state: object = TransactionState.ROLLBACK  # not safely stored: RocketMQ rolls back
        if res.status is SendStatus.SEND_OK:
            try:
                state = execute(tp._local_view(msg, msg_id), arg)
                if inspect.isawaitable(state):
                    state = await state
            except Exception:
                log.exception("local transaction %s failed: its state is UNKNOWN (the checker will ask)", msg_id)
                state = TransactionState.UNKNOWN
        return tp._end_transaction(res, half, msg_id, state)


async def _awaited(aw: Awaitable[TransactionState]) -> TransactionState:
    return await aw


async def _within(fut: asyncio.Future[T], timeout: float | None) -> T:
    if timeout is None:
        return await fut
    try:
        return await asyncio.wait_for(fut, timeout)
    except TimeoutError:
        raise RequestTimeoutError(f"no answer within {timeout} s") from None
