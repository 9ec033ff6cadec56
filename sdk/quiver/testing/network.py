"""The fake network of quiver.testing: addresses served by in-process Services, the
transport clients use on it, and the faults a test can inject.

    Producer -> FakeTransport --frames--> _Router -> Service inbox -> Service.handle -> handler
             <- its IO thread <--frames--  send_multipart by identity  <- req.reply / push

`FakeNetwork.plug(service, addr)` serves an address with a real Service (its socket replaced
by a `_Router`); `FakeNetwork.transport()` is what a client attached by `attach()` uses in
place of the ZeroMQ Transport, with the same calls, callbacks, timeouts and pushes. Faults:
`disconnect(addr)`, `hold`/`release(addr)`, `fail(code, reply_code)`; `count(code, addr)`
says what was sent. The cluster of services on it is quiver.testing's FakeCluster.
"""

import collections
import errno
import itertools
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import zmq

from quiver.wire import protocol
from quiver.wire.codes import ResponseCode
from quiver.errors import ClientError, ProtocolError, QuiverError, RequestTimeoutError, error_for
from quiver.wire.transport import _check_addr, _wire, next_request_id

if TYPE_CHECKING:
    from quiver.wire.schema import Schema

log = logging.getLogger(__name__)

FAKE_HOST = "192.0.2.1"  # TEST-NET-1 (RFC 5737): a client that is not attached fails, it reaches nothing real
NAMESRV_PORT = 9876
FIRST_BROKER_PORT = 10911
_SCAN_S = 0.02          # how often a fake transport looks for expired requests

T = TypeVar("T")
# a pushed request's handler, a request's callback (an Envelope or the QuiverError it failed with)
OnPush = Callable[[str, protocol.Envelope], Any]
Callback = Callable[[Any], Any]


class _Attachable(Protocol):
    """A client attach() can give a network: a ClientBase, or a quiver.aio client."""
    _transport_factory: Any


C = TypeVar("C", bound=_Attachable)


def wait_until(predicate: Callable[[], T], timeout: float = 5.0, interval: float = 0.005) -> T:
    """Call `predicate` until it returns something true (returned) or `timeout` passes (returns it falsy)."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()) and time.monotonic() < deadline:
        time.sleep(interval)
    return value


def _safely(fn: Callable[..., Any], *args: Any) -> Any:
    """A request callback or push handler: what it raises is logged, and the IO loop goes on."""
    try:
        return fn(*args)
    except Exception:
        log.exception("%s failed", getattr(fn, "__qualname__", fn))
        return None


def _as_bytes(frames: Iterable[Any]) -> list[bytes]:
    # the wire copies: a sender that reuses its buffer afterwards must not change what was sent
    return [f if type(f) is bytes else bytes(f) for f in frames]


class Fault:
    """Requests the network answers itself with `reply_code` (`times` of them; None: until healed)."""

    def __init__(self, code: int, reply_code: int, remark: str, addr: str | None, times: int | None) -> None:
        self.code, self.reply_code, self.remark, self.addr, self.left = code, reply_code, remark, addr, times
        self.hits: list[str] = []   # the addresses of the requests it answered

    def _take(self, code: int | None, addr: str) -> bool:
        if self.left == 0 or code != self.code or (self.addr is not None and addr != self.addr):
            return False
        if self.left is not None:
            self.left -= 1
        self.hits.append(addr)
        return True


class _Router:
    """A Service's ROUTER socket, in process. Frames in go to the service thread's inbox
    (`Service.handle` there, on the real loop: zmq's poller reports a bare fd for a
    non-zmq object, so the eventfd it polls here is never written); frames out go to
    the network by identity."""

    def __init__(self, network: "FakeNetwork", addr: str, service: Any) -> None:
        self.network, self.addr, self.service, self._mandatory = network, addr, service, False
        self._fd = os.eventfd(0, os.EFD_NONBLOCK)

    def fileno(self) -> int:
        return self._fd

    def put(self, frames: list[bytes]) -> bool:
        if self._fd < 0:
            return False
        self.service.call_soon_threadsafe(self.service.handle, frames)
        return True

    def recv_multipart(self, flags: int = 0, copy: bool = True) -> list[bytes]:
        raise zmq.Again()

    def send_multipart(self, frames: Sequence[Any], flags: int = 0, copy: bool = True, **_kw: Any) -> None:
        identity, *rest = frames
        if not self.network._to_client(self.addr, bytes(identity), _as_bytes(rest)) and self._mandatory:
            raise zmq.ZMQError(errno.EHOSTUNREACH)

    def setsockopt(self, option: int, value: Any) -> None:
        if option == zmq.ROUTER_MANDATORY:
            self._mandatory = bool(value)

    def close(self, linger: int | None = None) -> None:
        self.network._unbind(self.addr, self)
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)


class FakeTransport:
    """`quiver.wire.transport.Transport`'s interface over a FakeNetwork: requests go straight to the
    peer's inbox; callbacks run on this transport's IO thread, pushed requests on a small pool;
    an unreachable or silent peer gives the real transport's ClientError / RequestTimeoutError."""

    def __init__(self, network: "FakeNetwork", name: str = "quiver", on_push: OnPush | None = None,
                 identity_prefix: str | None = None,
                 credentials: object = None) -> None:  # noqa: ARG002  (the fake network has no sockets to secure)
        self.network, self.name, self._on_push = network, name, on_push
        self._prefix = identity_prefix or f"{name}#{next(network._serial)}"
        self._pending: dict[int, tuple[Callback, float, str]] = {}   # request id -> (callback, deadline, addr)
        self._events: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()   # work for the IO thread
        self._unmatched: queue.SimpleQueue[protocol.Envelope] = queue.SimpleQueue()  # replies to exchange()
        self._raw = 0  # exchange() calls waiting: only then are unmatched replies kept
        self._push_pool = ThreadPoolExecutor(2, thread_name_prefix=f"{name}-push")
        self._stopped = threading.Event()
        self._next_scan = 0.0
        self._thread = threading.Thread(target=self._run, name=f"{name}-fake-io", daemon=True)
        self._thread.start()

    def identity(self, addr: str) -> bytes:
        """The identity a service sees for this transport (the real DEALER's: prefix@addr)."""
        return f"{self._prefix}@{addr}".encode()[:255]

    # ---- caller side (Transport's interface) ------------------------------------------

    def send(self, addr: str, code: "int | Schema", ext: dict[str, Any] | None, bodies: Sequence[bytes],
             callback: Callback, timeout: float = 3.0) -> int:
        """Send a request; `callback(envelope | QuiverError)` runs on this transport's IO thread."""
        self._open(addr)
        code, ext = _wire(code, ext)
        req_id = next_request_id()
        frames = _as_bytes(protocol.request(code, req_id, ext, bodies))  # a bad body raises here, not later
        self._pending[req_id] = (callback, time.monotonic() + timeout, addr)
        self.network._deliver(self, addr, code, frames, req_id)
        return req_id

    def oneway(self, addr: str, code: "int | Schema", ext: dict[str, Any] | None = None,
               bodies: Sequence[bytes] = ()) -> None:
        """Send a request that wants no reply."""
        self._open(addr)
        code, ext = _wire(code, ext)
        self.network._deliver(self, addr, code, protocol.request(code, next_request_id(), ext, bodies), 0)

    def call_future(self, addr: str, code: "int | Schema", ext: dict[str, Any] | None = None,
                    bodies: Sequence[bytes] = (), timeout: float = 3.0) -> Future[protocol.Envelope]:
        """Send a request: a Future of its reply envelope (or of the QuiverError it failed with)."""
        fut: Future[protocol.Envelope] = Future()
        self.send(addr, code, ext, bodies,
                  lambda r: fut.set_exception(r) if isinstance(r, Exception) else fut.set_result(r), timeout)
        return fut

    def call(self, addr: str, code: "int | Schema", ext: dict[str, Any] | None = None, bodies: Sequence[bytes] = (),
             timeout: float = 3.0, ok: tuple[int, ...] = (ResponseCode.SUCCESS,)) -> protocol.Envelope:
        """A blocking request: the reply, or the error its code means unless it is in `ok`;
        RequestTimeoutError when nothing answers in `timeout` seconds."""
        fut = self.call_future(addr, code, ext, bodies, timeout)
        if threading.current_thread() is self._thread:  # a callback calling: run the IO loop here
            deadline = time.monotonic() + timeout + 1.0
            while not fut.done() and time.monotonic() < deadline:
                self._step(0.01)
        try:
            env = fut.result(timeout + 1.0)
        except TimeoutError:
            raise RequestTimeoutError(f"no reply from {addr} in time") from None
        if env.code not in ok:
            raise error_for(env.code, env.remark or "")
        return env

    def reply_to_push(self, addr: str, frames: list[bytes]) -> None:
        """Send the reply frames of a request `addr` pushed to this client (dropped once closed)."""
        if not self._stopped.is_set():
            self.network._deliver(self, addr, None, frames, 0)

    def exchange(self, addr: str, frames: list[bytes], timeout: float = 2.0) -> protocol.Envelope:
        """Send raw frames (malformed ones too) and return the next reply not matched to a request."""
        self._open(addr)
        self._raw += 1
        try:
            self.network._deliver(self, addr, None, list(frames), 0)
            return self._unmatched.get(timeout=timeout)
        except queue.Empty:
            raise RequestTimeoutError(f"no reply from {addr} to the raw frames") from None
        finally:
            self._raw -= 1

    def close(self) -> None:
        """Stop the IO thread; requests still waiting fail with ClientError. Again: does nothing."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        self._events.put(None)
        if threading.current_thread() is not self._thread:
            self._thread.join(5)
        for req_id in list(self._pending):
            self._fail(req_id, ClientError("transport closed"))
        self._push_pool.shutdown(wait=False, cancel_futures=True)
        self.network._forget(self)

    def _open(self, addr: str) -> None:
        if self._stopped.is_set():
            raise ClientError("transport is shut down")
        _check_addr(addr)

    # ---- IO thread ---------------------------------------------------------------------

    def _later(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run on the IO thread (callbacks, never on the caller's or a service's thread)."""
        if not self._stopped.is_set():
            self._events.put((fn, *args))

    def _fail(self, req_id: int, exc: QuiverError) -> None:
        entry = self._pending.pop(req_id, None)
        if entry is not None:
            _safely(entry[0], exc)

    def _fail_peer(self, addr: str, why: str) -> None:
        for rid in [rid for rid, entry in list(self._pending.items()) if entry[2] == addr]:
            self._later(self._fail, rid, ClientError(why))

    def _run(self) -> None:
        while not self._stopped.is_set():
            self._step(_SCAN_S)

    def _step(self, wait_s: float) -> None:
        try:
            event = self._events.get(timeout=wait_s)
            if event is not None:
                event[0](*event[1:])
        except queue.Empty:
            pass
        except Exception:
            log.exception("fake transport %s: an IO step failed (going on)", self.name)
        now = time.monotonic()
        if now >= self._next_scan:
            self._next_scan = now + _SCAN_S
            for rid, (_, deadline, addr) in list(self._pending.items()):
                if deadline <= now:
                    self._fail(rid, RequestTimeoutError(f"no reply from {addr} in time (request {rid})"))

    def _receive(self, addr: str, frames: list[bytes]) -> None:
        try:
            env = protocol.decode(frames)
        except ProtocolError as exc:
            log.warning("malformed frame from %s: %s", addr, exc)
            self._fail(protocol.request_id_of(exc), exc)
            return
        if not env.is_reply:
            if self._on_push is not None:
                self._push_pool.submit(self._handle_push, self._on_push, addr, env)
            return
        entry = self._pending.pop(env.id, None)
        if entry is not None:
            _safely(entry[0], env)
        elif self._raw:
            self._unmatched.put(env)
        else:  # answered after its deadline, or after a disconnect failed it
            log.debug("late reply %s from %s dropped", env.id, addr)

    def _handle_push(self, on_push: OnPush, addr: str, env: protocol.Envelope) -> None:
        out = _safely(on_push, addr, env)
        if out is not None:
            self.reply_to_push(addr, out)


class FakeNetwork:
    """Addresses -> in-process services; identities -> fake transports; faults in between."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._serial = itertools.count(1)
        self._routers: dict[str, _Router] = {}
        self._peers: dict[bytes, tuple[FakeTransport, str]] = {}  # identity -> (transport, the addr it calls)
        self._transports: list[FakeTransport] = []
        self._served: list[tuple[Callable[[], Any], threading.Thread]] = []   # (stop, thread) of every service run here
        self._down: set[str] = set()
        self._held: dict[str, list[tuple[FakeTransport, list[bytes]]]] = {}
        self._faults: list[Fault] = []
        self._sent: collections.Counter[tuple[str, int | None]] = collections.Counter()   # (addr, code) -> requests
        self._closed = False
        self._own = self.transport("fake-network")

    # ---- services ------------------------------------------------------------------------

    def plug(self, service: Any, addr: str | None = None) -> str:
        """Make `service` (a quiver.runtime.service.Service) bind to `addr` on this network when it runs."""
        addr = addr or service.listen
        router = _Router(self, addr, service)
        with self._lock:
            if addr in self._routers:
                raise ValueError(f"{addr} is already served on this network")
            self._routers[addr] = router
        service.use_socket(router)
        return addr

    def run(self, target: Callable[[], Any], stop: Callable[[], Any], name: str) -> threading.Thread:
        """Run `target` (a Service.run or App.run) on a thread; `stop()` ends it at close."""
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._served.append((stop, thread))
        return thread

    def serve(self, service: Any, addr: str | None = None) -> str:
        """Run a Service (your own handler table too) at `addr` until the network closes."""
        addr = self.plug(service, addr)

        def run() -> None:
            try:
                service.run()
            finally:
                service.close()
        self.run(run, service.stop, f"fake-{service.name}")
        return addr

    # ---- clients --------------------------------------------------------------------------

    def transport(self, name: str = "quiver", on_push: OnPush | None = None, identity_prefix: str | None = None,
                  credentials: object = None) -> FakeTransport:
        """A new FakeTransport on this network (what an attached client's start() calls)."""
        t = FakeTransport(self, name, on_push, identity_prefix)
        self._transports.append(t)  # list.append is atomic: no lock
        return t

    def call(self, addr: str, code: "int | Schema", ext: dict[str, Any] | None = None, bodies: Sequence[bytes] = (),
             timeout: float = 3.0, ok: tuple[int, ...] = (0,)) -> protocol.Envelope:
        """One blocking request on the network's own transport (replies not in `ok` raise)."""
        return self._own.call(addr, code, ext, bodies, timeout, ok)

    def call_future(self, addr: str, code: "int | Schema", ext: dict[str, Any] | None = None,
                    bodies: Sequence[bytes] = (), timeout: float = 3.0) -> Future[protocol.Envelope]:
        """One request on the network's own transport, not waited for: Future[Envelope]."""
        return self._own.call_future(addr, code, ext, bodies, timeout)

    def exchange(self, addr: str, frames: list[bytes], timeout: float = 2.0) -> protocol.Envelope:
        """Raw frames to `addr` (malformed ones too); the service's reply, decoded."""
        return self._own.exchange(addr, frames, timeout)

    # ---- faults and counts ------------------------------------------------------------------

    def disconnect(self, addr: str) -> None:
        """`addr` goes away: its unanswered requests fail, new ones fail fast, its replies are lost."""
        self._down.add(addr)
        for t in list(self._transports):
            t._fail_peer(addr, f"connection to {addr} lost before it replied")

    def reconnect(self, addr: str) -> None:
        """`addr` is reachable again (after disconnect)."""
        self._down.discard(addr)

    def hold(self, addr: str) -> None:
        """Requests to `addr` wait in the network (in order) until release(addr)."""
        self._held.setdefault(addr, [])

    def release(self, addr: str) -> None:
        """Deliver the requests held for `addr`, in order, and stop holding. Requests sent while
        they are being delivered (a reply's callback sending the next) queue behind them, as
        on one socket."""
        while True:
            with self._lock:
                waiting = self._held.get(addr)
                if not waiting:
                    self._held.pop(addr, None)
                    return
                self._held[addr] = []
            for sender, frames in waiting:
                self._put(sender, addr, frames)

    def held(self, addr: str) -> int:
        """How many requests to `addr` are held now."""
        return len(self._held.get(addr, ()))

    def fail(self, code: int, reply_code: int, remark: str = "injected by quiver.testing", addr: str | None = None,
             times: int | None = 1) -> Fault:
        """Answer the next `times` requests of `code` (to `addr`, or anywhere) with `reply_code`
        (None: all of them until `heal(fault)`); the service never sees them."""
        fault = Fault(int(code), int(reply_code), remark, addr, times)
        self._faults.append(fault)
        return fault

    def heal(self, fault: Fault) -> None:
        """`fault` answers no more requests."""
        fault.left = 0

    def count(self, code: int | None = None, addr: str | None = None) -> int:
        """Requests sent so far (faulted and held ones included), by code and/or address."""
        with self._lock:
            return sum(n for (a, c), n in self._sent.items()
                       if (code is None or c == code) and (addr is None or a == addr))

    # ---- delivery --------------------------------------------------------------------------

    def _deliver(self, sender: FakeTransport, addr: str, code: int | None, frames: list[bytes], req_id: int) -> None:
        frames = _as_bytes(frames)
        identity = sender.identity(addr)
        with self._lock:
            self._sent[(addr, code)] += 1
            self._peers[identity] = (sender, addr)
            reachable = addr in self._routers and addr not in self._down
            fault = next((f for f in self._faults if f._take(code, addr)), None) if reachable else None
            held = self._held.get(addr) if reachable else None
            if held is not None and fault is None:
                held.append((sender, frames))
                return
        if not reachable and req_id:
            sender._later(sender._fail, req_id, ClientError(f"{addr} is not reachable"))
        elif reachable and fault is not None and req_id:
            sender._later(sender._receive, addr, protocol.reply(fault.reply_code, req_id, fault.remark))
        elif reachable and fault is None:
            self._put(sender, addr, frames)

    def _put(self, sender: FakeTransport, addr: str, frames: list[bytes]) -> None:
        with self._lock:
            router = self._routers.get(addr) if addr not in self._down else None
        if router is None or not router.put([sender.identity(addr), *frames]):
            log.debug("frames to %s dropped: it is gone", addr)

    def _to_client(self, addr: str, identity: bytes, frames: list[bytes]) -> bool:
        with self._lock:
            peer = self._peers.get(identity)
            if peer is None or addr in self._down:
                return False
        peer[0]._later(peer[0]._receive, addr, frames)
        return True

    def _unbind(self, addr: str, router: _Router) -> None:
        with self._lock:
            if self._routers.get(addr) is router:
                del self._routers[addr]

    def _forget(self, transport: FakeTransport) -> None:
        with self._lock:
            if transport in self._transports:
                self._transports.remove(transport)
            for ident in [i for i, (t, _) in self._peers.items() if t is transport]:
                del self._peers[ident]

    def close(self) -> None:
        """Stop what runs here (newest first) and close every transport left open."""
        if self._closed:
            return
        self._closed = True
        for stop, thread in reversed(self._served):
            deadline = time.monotonic() + 15
            while thread.is_alive() and time.monotonic() < deadline:
                stop()  # again until it ends: a stop before the loop started is not seen by it
                thread.join(0.1)
            if thread.is_alive():
                log.warning("%s did not stop in 15 s", thread.name)
        for t in list(self._transports):
            t.close()


# ---- the client seam ---------------------------------------------------------------------------


def attach(client: C, network: FakeNetwork) -> C:
    """Make `client` (any ClientBase, not yet started) use `network` from its next start()."""
    if getattr(client, "_started", False):
        raise ClientError(f"{type(client).__name__} is already started: attach it before start()")
    client._transport_factory = network.transport
    return client
