"""Client-side sockets: one DEALER per peer, owned by one IO thread.

Any thread may call `call()` (blocking) or `send()` (callback): the request is
queued, the IO thread is woken through an eventfd, sends it on the peer's
DEALER and matches the reply by request id, so many requests to one peer are
in flight at once (pipelined). Requests a server pushes to us (no "r" in the
header) go to `on_push(peer, envelope)` on a small worker pool, never on the
IO thread. When a peer's connection drops (the DEALER's socket monitor says
so), the requests it has not answered fail at once instead of at their
timeouts; ZeroMQ reconnects on its own, and requests made meanwhile fail
fast as "not reachable" after CONNECT_WAIT_S.

Whatever the socket layer raises (a zmq.ZMQError on connecting to an address
that is not host:port, a socket closed under us) reaches the caller as a
ClientError; the IO thread logs an unexpected error once and goes on, so one
bad peer cannot stop the requests to the others.
"""

import collections
import itertools
import logging
import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import zmq
from zmq.utils.monitor import parse_monitor_message

from quiver.wire import frames as wire_frames, protocol
from quiver.errors import (ClientError, ProtocolError, QuiverError, RequestTimeoutError, VersionNotSupportedError,
                           error_for)
from quiver.wire.codes import ResponseCode
from quiver.wire.curve import credentials_from, secure_client
from quiver.wire.direct import HANDSHAKE_FAILED, REFUSED_RETRY_S, DirectCalls, handshake_problem, unreachable

if TYPE_CHECKING:  # requests given as schema objects (the code is their CODE)
    from quiver.wire.schema import Schema

log = logging.getLogger(__name__)

_ids = itertools.count(1)
CONNECT_WAIT_S = 1.0  # a request waits this long for a first connection to its peer
CLOSE_LINGER_MS = 500  # at close, frames already queued get this long to leave
_MAX_ERRORS_REMEMBERED = 256  # distinct IO-thread errors logged with a traceback


def next_request_id() -> int:
    return next(_ids)


def _told(listener, addr: str, state: str) -> None:
    try:
        listener(addr, state)
    except Exception:
        log.exception("connection listener failed on %s %s", addr, state)


class Transport:
    """The IO thread and its DEALER sockets. Shared by the clients of a process."""

    def __init__(self, name: str = "quiver", on_push=None, identity_prefix: str | None = None,
                 credentials=None):
        self._ctx = zmq.Context.instance()
        # CURVE identity of every socket (auth on); None: QUIVER_CREDENTIALS or the process's service key
        self._creds = credentials_from(credentials)
        self._refused: dict[str, str] = {}  # peer -> why its last handshake failed
        self._refused_at: dict[str, float] = {}
        self._queue = collections.deque()
        self._wake_fd = os.eventfd(0, os.EFD_NONBLOCK)
        self._wake_lock = threading.Lock()  # close() must not free the fd under a writer
        self._io_errors: set = set()
        self._pending: dict[int, tuple] = {}
        self._peers: dict[str, zmq.Socket] = {}
        self._by_socket: dict[zmq.Socket, str] = {}
        self._on_push = on_push
        self._push_pool = ThreadPoolExecutor(4, thread_name_prefix=f"{name}-push")
        self._identity_prefix = identity_prefix
        self._stopped = threading.Event()
        self._direct = DirectCalls(self._ctx, self._creds)
        self._down: set[str] = set()  # peers the IO thread's monitors saw disconnect
        self._up: set[str] = set()    # peers whose connection's handshake succeeded (and not lost since)
        # fn(peer, state): "connected", "disconnected" or "refused" (a failed handshake: the key is
        # not known there); called on the push pool, never on the IO thread
        self.connection_listener: "Callable[[str, str], object] | None" = None
        self._io_ident: int | None = None   # the IO thread's, once it runs
        self._backlog: collections.deque = collections.deque()
        self._thread = threading.Thread(target=self._run, name=f"{name}-io", daemon=True)
        self._thread.start()

    # ---- caller side ----------------------------------------------------

    def send(self, addr: str, code: "int | Schema", ext: dict[str, Any] | None, bodies, callback,
             timeout: float = 3.0) -> int:
        """Queue a request; `callback(envelope | QuiverError)` runs on the IO thread."""
        if self._stopped.is_set():
            raise ClientError("transport is shut down")
        _check_addr(addr)
        code, ext = _wire(code, ext)
        req_id = next(_ids)
        self._pending[req_id] = (callback, time.monotonic() + timeout, addr)
        frames = protocol.request(code, req_id, ext, bodies)
        if threading.get_ident() == self._io_ident:
            # a callback's request (a consumer's next pull): out now, or at this turn's flush when
            # something queued earlier must leave first; no wake-up either way
            if self._queue or self._backlog or not self._send_now(addr, frames):
                self._queue.append((addr, frames, req_id))
            return req_id
        self._queue.append((addr, frames, req_id))
        if not self._wake():
            self._pending.pop(req_id, None)
            raise ClientError("transport is shut down")
        return req_id

    def oneway(self, addr: str, code: "int | Schema", ext: dict[str, Any] | None = None, bodies=()) -> None:
        if self._stopped.is_set():
            raise ClientError("transport is shut down")
        _check_addr(addr)
        code, ext = _wire(code, ext)
        self._queue.append((addr, protocol.request(code, next(_ids), ext, bodies), 0))
        if not self._wake():
            raise ClientError("transport is shut down")

    def reply_to_push(self, addr: str, frames: list) -> None:
        self._queue.append((addr, frames, 0))
        if not self._wake():  # answered after close: the peer asks again (CHECK_TRANSACTION_STATE)
            log.debug("reply to %s dropped: transport is shut down", addr)

    def _wake(self) -> bool:
        """Wake the IO thread; False once closed (the fd may not be written after close)."""
        with self._wake_lock:
            if self._wake_fd < 0:
                return False
            os.eventfd_write(self._wake_fd, 1)
            return True

    def call_future(self, addr: str, code: "int | Schema", ext: dict[str, Any] | None = None, bodies=(),
                    timeout: float = 3.0) -> Future:
        fut: Future = Future()

        def done(result):
            if isinstance(result, Exception):
                fut.set_exception(result)
            else:
                fut.set_result(result)
        self.send(addr, code, ext, bodies, done, timeout)
        return fut

    def call(self, addr: str, code: "int | Schema", ext: dict[str, Any] | None = None, bodies=(), timeout: float = 3.0,
             ok=(ResponseCode.SUCCESS,)) -> protocol.Envelope:
        """Blocking request; raises the server's error unless its code is in `ok`.

        Made on the calling thread's own socket (direct.py), the IO thread's
        too (a push consumer's inline listener): a reply only the IO thread
        could read would never come while it waits."""
        if self._stopped.is_set():
            raise ClientError("transport is shut down")
        _check_addr(addr)
        code, ext = _wire(code, ext)
        req_id = next(_ids)
        env = self._direct.call(addr, protocol.request(code, req_id, ext, bodies), req_id, timeout, self._down)
        if env.code not in ok:
            raise error_for(env.code, env.remark or "")
        return env

    def close(self) -> None:
        if self._stopped.is_set():
            return
        self._stopped.set()
        self._wake()
        self._thread.join(5)
        self._direct.close()
        self._push_pool.shutdown(wait=False, cancel_futures=True)
        with self._wake_lock:
            os.close(self._wake_fd)
            self._wake_fd = -1

    # ---- IO thread ------------------------------------------------------

    def _peer(self, addr: str) -> zmq.Socket:
        sock = self._peers.get(addr)
        if sock is None:
            sock = self._ctx.socket(zmq.DEALER)
            mon = None
            try:
                sock.setsockopt(zmq.LINGER, 0)
                sock.setsockopt(zmq.SNDHWM, 100_000)
                sock.setsockopt(zmq.RCVHWM, 100_000)
                # Queue only on a live connection: a request to a dead peer must fail
                # (and be retried elsewhere), not be stored when the peer returns.
                sock.setsockopt(zmq.IMMEDIATE, 1)
                if self._identity_prefix:
                    sock.setsockopt(zmq.IDENTITY, f"{self._identity_prefix}@{addr}".encode()[:255])
                secure_client(sock, self._creds)
                mon = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED | zmq.EVENT_HANDSHAKE_SUCCEEDED
                                              | HANDSHAKE_FAILED)
                sock.connect(f"tcp://{addr}")
            except Exception:  # e.g. an address zmq cannot parse: leave no socket behind
                _close_quietly(sock, mon)
                raise
            self._peers[addr] = sock
            self._by_socket[sock] = addr
            self._monitors[mon] = addr
            self._poller.register(sock, zmq.POLLIN)
            self._poller.register(mon, zmq.POLLIN)
        return sock

    def _retry_refused(self, addr: str, now: float) -> None:
        """ZeroMQ does not reconnect after a refused handshake, but the key may be known now
        (a user added a moment ago): connect again, at most every REFUSED_RETRY_S."""
        self._refused_at[addr] = now
        sock = self._peers.get(addr)
        if sock is not None:
            try:
                sock.disconnect(f"tcp://{addr}")
            except zmq.ZMQError:
                pass
            sock.connect(f"tcp://{addr}")

    def _close_peer(self, addr: str, linger_ms: int = 0) -> None:
        sock = self._peers.pop(addr, None)
        self._up.discard(addr)
        if sock is not None:
            self._by_socket.pop(sock, None)
            self._poller.unregister(sock)
            for mon, a in list(self._monitors.items()):
                if a == addr:
                    del self._monitors[mon]
                    self._poller.unregister(mon)
                    mon.close(0)
            sock.disable_monitor()
            sock.close(linger_ms)

    def _run(self) -> None:
        self._poller = zmq.Poller()
        self._monitors: dict = {}
        self._poller.register(self._wake_fd, zmq.POLLIN)
        next_scan = time.monotonic() + 0.05
        self._io_ident = threading.get_ident()
        try:
            while not self._stopped.is_set():
                try:
                    events = self._poller.poll(5 if self._backlog else 50)
                except Exception as exc:  # a socket closed under the poller: log once, go on
                    self._io_error("poll", exc)
                    events = []
                    time.sleep(0.01)
                for sock, _ in events:
                    self._guarded("reading", self._on_event, sock)
                self._guarded("sending", self._flush_queue)
                now = time.monotonic()
                if now >= next_scan:
                    self._guarded("expiring requests", self._expire, now)
                    next_scan = now + 0.05
        finally:
            # requests queued before close (one-way sends) still leave: flush, then linger briefly
            try:
                self._flush_queue()
                until = time.monotonic() + CLOSE_LINGER_MS / 1000
                while self._backlog and time.monotonic() < until:  # a connection still being made
                    self._poller.poll(5)
                    self._flush_queue()
            except Exception as exc:
                self._io_error("flushing the send queue at close", exc)
            for addr in list(self._peers):
                self._guarded("closing", self._close_peer, addr, CLOSE_LINGER_MS)
            for req_id in list(self._pending):
                self._fail(req_id, ClientError("transport closed"))

    def _on_event(self, sock) -> None:
        if sock == self._wake_fd:
            try:
                os.eventfd_read(self._wake_fd)
            except BlockingIOError:
                pass
        elif sock in self._monitors:
            self._on_monitor(sock)
        else:
            self._drain(sock)

    def _guarded(self, what: str, fn, *args) -> None:
        """One step of the IO loop: an error is logged (once per kind), never ends the thread."""
        try:
            fn(*args)
        except Exception as exc:
            self._io_error(what, exc)

    def _io_error(self, what: str, exc: Exception) -> None:
        key = (what, type(exc).__name__, str(exc)[:200])
        if key in self._io_errors:
            log.debug("transport IO thread, %s: %s (again)", what, exc)
            return
        if len(self._io_errors) < _MAX_ERRORS_REMEMBERED:
            self._io_errors.add(key)
        log.error("transport IO thread, %s: %s (going on)", what, exc, exc_info=exc)

    def _on_monitor(self, mon) -> None:
        addr = self._monitors[mon]
        lost = False
        while True:
            try:
                event = parse_monitor_message(mon.recv_multipart(zmq.NOBLOCK))["event"]
            except zmq.Again:
                break
            if event & HANDSHAKE_FAILED:  # requests wait for their deadline (reconnecting), then say why
                if addr not in self._refused:
                    self._connection_changed(addr, "refused")
                self._refused[addr] = handshake_problem(addr, event, self._creds is not None)
                self._refused_at[addr] = time.monotonic()
                continue
            lost = event == zmq.EVENT_DISCONNECTED
            if lost and addr not in self._refused:
                self._down.add(addr)
            elif not lost:
                self._down.discard(addr)
                self._refused.pop(addr, None)
            if lost and addr in self._up:
                self._up.discard(addr)
                self._connection_changed(addr, "disconnected")
            elif not lost and addr not in self._up:
                self._up.add(addr)
                self._connection_changed(addr, "connected")
        if lost:
            # the peer went away: whatever it had not answered will never be answered; after a
            # refused handshake, requests still waiting to go retry it (a user added a moment ago)
            # until their deadline, as calls on the caller's own socket do (direct.py)
            waiting = {rid for a, _, rid, _ in self._backlog if a == addr} if addr in self._refused else ()
            gone = [rid for rid, entry in list(self._pending.items()) if entry[2] == addr and rid not in waiting]
            why = self._refused.get(addr) or f"connection to {addr} lost before it replied"
            for rid in gone:
                self._fail(rid, ClientError(why))

    def _connection_changed(self, addr: str, state: str) -> None:
        listener = self.connection_listener
        if listener is not None:
            self._push_pool.submit(_told, listener, addr, state)

    def _flush_queue(self) -> None:
        if self._backlog:
            waiting, self._backlog = self._backlog, collections.deque()
            now = time.monotonic()
            for addr, frames, req_id, since in waiting:
                if (req_id and req_id not in self._pending) or (not req_id and now - since > 3.0):
                    continue  # expired meanwhile: its caller has been told
                # a refused handshake waits out the request's own deadline (a user added a moment
                # ago is known once the service has fetched the ACL); no connection, CONNECT_WAIT_S
                if addr in self._down or (now - since > CONNECT_WAIT_S and addr not in self._refused):
                    if req_id:
                        self._fail(req_id, ClientError(self._refused.get(addr) or unreachable(addr)))
                    continue
                if addr in self._refused and now - self._refused_at.get(addr, 0) >= REFUSED_RETRY_S:
                    self._retry_refused(addr, now)
                self._send(addr, frames, req_id, since)
        q = self._queue
        while q:
            addr, frames, req_id = q.popleft()
            self._send(addr, frames, req_id, None)

    def _send_now(self, addr: str, frames) -> bool:
        """Send on the IO thread without queueing; False (nothing sent) when the peer is not
        plainly up: the flush then sends it, backs it off or fails it with its reason."""
        sock = self._peers.get(addr)
        if sock is None or addr in self._down or addr in self._refused:
            return False
        try:
            wire_frames.send(sock, frames)
        except Exception:   # zmq.Again (no connection yet) or worse: the flush decides
            return False
        return True

    def _send(self, addr, frames, req_id, since) -> None:
        try:
            wire_frames.send(self._peer(addr), frames)
        except zmq.Again:
            # not connected (yet): retry until the request's deadline
            self._backlog.append((addr, frames, req_id, since or time.monotonic()))
        except Exception as exc:  # ZMQError (an address zmq cannot connect to, a closed socket) or worse
            log.warning("send to %s failed: %s", addr, exc)
            if req_id:
                self._fail(req_id, ClientError(f"send to {addr} failed: {exc}"))

    def _drain(self, sock) -> None:
        addr = self._by_socket.get(sock)
        for i in range(1000):
            # the poller saw this one readable; past the first, asking beats a raised zmq.Again
            if i and not wire_frames.ready(sock):
                return
            try:
                frames = wire_frames.recv(sock)
            except zmq.Again:
                return
            try:
                env = protocol.decode(frames)
            except ProtocolError as exc:
                rid = protocol.request_id_of(exc)
                log.warning("malformed frame from %s: %s", addr, exc)
                if rid in self._pending:
                    self._fail(rid, VersionNotSupportedError(f"{addr}: {exc.remark}")
                               if getattr(exc, "version_mismatch", False) else exc)
                continue
            if env.is_reply:
                entry = self._pending.pop(env.id, None)
                if entry is not None:
                    self._deliver(entry[0], env)
                elif env.id == protocol.UNATTRIBUTED_ID:
                    log.warning("%s rejected a frame: %s", addr, env.remark)
            elif self._on_push is not None:
                self._push_pool.submit(self._handle_push, addr, env)

    def _handle_push(self, addr, env) -> None:
        try:
            out = self._on_push(addr, env)
            if out is not None:
                self.reply_to_push(addr, out)
        except Exception:
            log.exception("handling pushed request %s from %s failed", env.code, addr)

    @staticmethod
    def _deliver(callback, result) -> None:
        try:
            callback(result)
        except Exception:
            log.exception("request callback failed")

    def _fail(self, req_id: int, exc: QuiverError) -> None:
        entry = self._pending.pop(req_id, None)
        if entry is not None:
            self._deliver(entry[0], exc)

    def _expire(self, now: float) -> None:
        late = [rid for rid, (_, deadline, _) in list(self._pending.items()) if deadline <= now]
        for rid in late:
            entry = self._pending.get(rid)
            if entry is None:
                continue
            refused = self._refused.get(entry[2])   # never connected: say why, not "no reply"
            self._fail(rid, ClientError(refused) if refused else
                       RequestTimeoutError(f"no reply from {entry[2]} in time (request {rid})"))


def _wire(code: "int | Schema", ext: dict[str, Any] | None) -> tuple[int, dict[str, Any] | None]:
    """(code, ext) of a request given as a code and an ext map, or as a schema object of
    quiver.wire.requests in place of the code (its CODE and ext(); an ext map given too is merged in)."""
    if isinstance(code, int):  # RequestCode included: the common case, first
        return code, ext
    return code.CODE, code.ext() if not ext else {**code.ext(), **ext}


def _check_addr(addr) -> None:
    if not isinstance(addr, str) or not addr:
        raise ClientError(f"peer address {addr!r} is not host:port" if addr in (None, "")
                          else f"peer address must be a 'host:port' string, got {type(addr).__name__}")


def _close_quietly(sock, mon=None) -> None:
    try:
        if mon is not None:
            sock.disable_monitor()
            mon.close(0)
        sock.close(0)
    except zmq.ZMQError:
        pass
