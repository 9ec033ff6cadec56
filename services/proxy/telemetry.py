"""The Telemetry stream as a coroutine on the gRPC server's event loop (server.py).

A client keeps its Telemetry stream open as long as it runs, mostly idle: here an open stream
is a task on the loop, not a worker thread, so idle streams cost no worker however many there
are (the stream caps of limits.py still bound them, per access key and in all). What may
block runs on the loop's default executor: the caller's backend (the first call of an access
key starts its SDK clients) and the settings check (which may fetch the ACL). Commands to the
client come through the session's `Outbox`, filled from any thread (a transaction check comes
on a client's IO thread).
"""

import asyncio
import logging
import queue
import threading

from rocketmq.grpc_protocol import service_pb2 as pb

from .clients import QUEUE_BOUND, client_id_of
from .statuses import Refused, status_of

log = logging.getLogger(__name__)

_END = object()


class Outbox:
    """A stream's outbound commands: `put_nowait` from any thread (queue.Full past `bound`), `get` on the loop."""

    def __init__(self, loop, bound: int = QUEUE_BOUND):
        self._loop = loop
        self._q: asyncio.Queue = asyncio.Queue()
        self._n = 0
        self._bound = bound
        self._lock = threading.Lock()

    def put_nowait(self, item) -> None:
        with self._lock:
            if self._n >= self._bound:
                raise queue.Full
            self._n += 1
        try:
            self._loop.call_soon_threadsafe(self._q.put_nowait, item)
        except RuntimeError:          # the loop is closed: the proxy is stopping
            raise queue.Full from None

    def end(self) -> None:
        try:
            self._loop.call_soon_threadsafe(self._q.put_nowait, _END)
        except RuntimeError:
            pass

    async def get(self):
        item = await self._q.get()
        if item is not _END:
            with self._lock:
                self._n -= 1
        return item

    def qsize(self) -> int:
        return self._n

    def empty(self) -> bool:
        return self._n == 0


async def telemetry(servicer, request_iterator, context):
    """MessagingService.Telemetry: settings answered, transaction checks sent, until either side ends."""
    loop = asyncio.get_running_loop()
    md = context.invocation_metadata()
    try:
        b = await loop.run_in_executor(None, servicer.backends.for_call, md)
        session = servicer.clients.session(client_id_of(md), b.access_key)
        servicer.limits.open_stream(b.access_key)      # TOO_MANY_REQUESTS past the stream caps
    except Exception as exc:
        if not isinstance(exc, Refused):
            log.warning("telemetry stream refused: %s", exc)
        answer = status_of(exc)
        servicer.count("Telemetry", answer.code)
        yield pb.TelemetryCommand(status=answer)
        return
    out = session.out = Outbox(loop)        # this stream's: a reconnect gets a fresh one
    session.streaming = True
    reader = loop.create_task(_read_commands(servicer.clients, request_iterator, session, out))
    try:
        while (item := await out.get()) is not _END:
            yield item
    finally:
        reader.cancel()
        session.streaming = False
        servicer.limits.close_stream(b.access_key)


async def _read_commands(clients, commands, session, out: Outbox) -> None:
    loop = asyncio.get_running_loop()
    try:
        async for cmd in commands:
            if cmd.HasField("settings"):
                try:
                    answer = await loop.run_in_executor(None, clients.settings, session, cmd.settings)
                except Refused as exc:
                    answer = pb.TelemetryCommand(status=status_of(exc))
                out.put_nowait(answer)
            # thread stack traces and verify results: nothing asks for them here
    except asyncio.CancelledError:
        raise
    except Exception as exc:   # the stream ended or broke: its writer stops too
        log.debug("telemetry stream of %s ended: %s", session.client_id, exc)
    out.end()
