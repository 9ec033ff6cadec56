"""How quiver.aio reaches the sync clients' machinery without blocking the event loop.

Each async client wraps one sync client (`.sync`) and reuses all of it: the
transport's IO thread, auto-batching, retries, rebalancing, the consume pool.
Nothing is rewritten for asyncio; what differs is how a caller waits:

    data path (send, send_batch, send_orderly, send_oneway, pulled messages)
        the sync client's non-blocking call (`send_async`, `_call_async`, the
        pull buffer) completes on the IO thread, whose callback hands the
        result to the loop with `loop.call_soon_threadsafe` -> an asyncio
        Future. No thread per call: thousands of sends may be in flight from
        one task, and the sync futures keep their cheap no-Condition path
        (the callback is given at creation, never by `add_done_callback`).
    control path (start, shutdown, route refresh, commit, admin, lookups)
        the sync client's blocking call runs on this client's one control
        thread (`run_in_executor` on a 1-worker pool made at start), so a name
        server or broker round trip never stalls the loop. It is per client,
        not per call; its jobs run one at a time.

A route is fetched on the control thread before the first send to a topic and
again shortly before it would go stale, so `Producer._pick` (which would ask a
name server inline) only ever reads the cache when called from the loop.

Does not own: any protocol, retry or consume logic (quiver.client owns them),
nor the loop (the caller's; a client binds to the loop it was started on).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Generic, Self, TypeVar

from quiver.errors import ClientError
from quiver.client.base import ClientBase

C = TypeVar("C", bound=ClientBase)
K = TypeVar("K", bound=ClientBase)  # _make may build a subclass of C
T = TypeVar("T")

ROUTE_MARGIN_S = 2.0        # a cached route is refreshed this long before the sync client would
NEW_TOPIC_ROUTE_S = 3.0     # a topic with no route yet: sends use every broker's default queues this long


def settle(afut: asyncio.Future[Any], cfut: Future[Any]) -> None:
    """Copy a finished concurrent Future into an asyncio one (on the loop's thread)."""
    if afut.done():  # cancelled by its awaiter meanwhile
        return
    exc = cfut.exception()
    if exc is not None:
        afut.set_exception(exc)
    else:
        afut.set_result(cfut.result())


def resolver(loop: asyncio.AbstractEventLoop, afut: asyncio.Future[Any]) -> Callable[[Future[Any]], None]:
    """A done-callback for a concurrent Future (run on any thread) that settles `afut` on `loop`."""
    def done(cfut: Future[Any]) -> None:
        try:
            loop.call_soon_threadsafe(settle, afut, cfut)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            pass
    return done


class AsyncClient(Generic[C]):
    """The part every async client shares: the wrapped sync client, its loop, its control thread."""

    # quiver.testing.attach() sets this before __init__ (as on a sync client): the wrapped client gets it
    _transport_factory: Any = None
    _started = False

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._control: ThreadPoolExecutor | None = None
        self._refreshing: dict[str, asyncio.Future[Any]] = {}

    def _make(self, cls: type[K], *args: Any, **kw: Any) -> K:
        """The wrapped sync client, attached to a fake network if this one is (quiver.testing)."""
        obj = cls.__new__(cls)
        if self._transport_factory is not None:
            obj._transport_factory = self._transport_factory
        cls.__init__(obj, *args, **kw)
        return obj

    @property
    def sync(self) -> C:
        """The wrapped sync client (for what quiver.aio does not wrap); do not call its blocking
        methods from the event loop."""
        return self._sync

    _sync: C

    # ---- lifecycle -------------------------------------------------------------------------

    async def start(self) -> Self:
        """Start the wrapped client on the control thread; the client binds to the running loop."""
        if self._started:
            return self
        self._loop = asyncio.get_running_loop()
        try:
            await self._blocking(self._sync.start)
        except BaseException:
            self._close_control()
            raise
        self._started = True
        return self

    async def shutdown(self) -> None:
        """Stop the wrapped client (its own bounded waits, e.g. in-flight sends) off the loop."""
        if not self._started:
            return
        self._started = False
        try:
            await self._blocking(self._sync.shutdown)
        finally:
            self._close_control()

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    def on_connection(self, fn: Callable[[str, str], object] | None) -> None:
        """Call `fn(address, state)` on this client's loop when a connection changes ("connected",
        "disconnected", "refused": see ClientBase.on_connection); `fn` may be a coroutine
        function (then run as a task). None: no more calls."""
        if fn is None:
            self._sync.on_connection(None)
            return

        def on_loop(addr: str, state: str) -> None:
            out = fn(addr, state)
            if inspect.isawaitable(out):
                asyncio.ensure_future(out)

        def changed(addr: str, state: str) -> None:   # a worker thread of the sync client
            loop = self._loop
            if loop is not None and not loop.is_closed():
                loop.call_soon_threadsafe(on_loop, addr, state)
        self._sync.on_connection(changed)

    def _need_started(self) -> asyncio.AbstractEventLoop:
        if not self._started or self._loop is None:
            raise ClientError(f"{type(self).__name__} is not started: use `async with` or await start() first")
        return self._loop

    # ---- the control thread ----------------------------------------------------------------

    async def _blocking(self, fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        """`fn(*args, **kw)` on this client's control thread, awaited."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._control_pool(), functools.partial(fn, *args, **kw))

    def _control_pool(self) -> ThreadPoolExecutor:
        if self._control is None:  # its one thread starts with the first job
            self._control = ThreadPoolExecutor(1, thread_name_prefix=f"aio-{type(self).__name__}")
        return self._control

    def _close_control(self) -> None:
        if self._control is not None:
            self._control.shutdown(wait=False)  # its thread ends after the job under way
            self._control = None

    # ---- routes ------------------------------------------------------------------------------

    def _route_ready(self, topic: str) -> asyncio.Future[Any] | None:
        """None if `topic`'s cached route is fresh, else the (shared) refresh under way."""
        cached = self._sync._routes.get(topic)
        if cached is not None and time.monotonic() - cached[0] < self._sync._route_refresh_s - ROUTE_MARGIN_S:
            return None
        fut = self._refreshing.get(topic)
        if fut is None:
            loop = self._need_started()
            fut = self._refreshing[topic] = loop.run_in_executor(self._control_pool(), self._refresh_route, topic)
            fut.add_done_callback(lambda _: self._refreshing.pop(topic, None))
        return fut

    def _refresh_route(self, topic: str) -> None:
        """Control thread: fetch the route into the sync client's cache. A topic no name server
        knows yet (a producer's auto-create) gets the default route, cached briefly."""
        sync = self._sync
        route = sync._route(topic, refresh=True)
        cached = sync._routes.get(topic)
        if cached is None or cached[1] is not route:
            stamp = time.monotonic() - sync._route_refresh_s + ROUTE_MARGIN_S + NEW_TOPIC_ROUTE_S
            sync._routes[topic] = (stamp, route)
