"""The poll loop every Quiver service runs on its ROUTER socket.

One thread owns the socket and all service state: handlers run on it, other
threads (flush, APScheduler jobs) hand work to it with `call_soon_threadsafe`.
Every request's ext is decoded through the schema of its code
(`quiver.wire.requests`) before its handler runs, which reads the typed object as
`req.args`. A handler returns reply frames, or None when it answers later
(long polling, group commit) through `Request.reply`. No input can end the
loop: a malformed frame or a field of the wrong type or range gets BAD_REQUEST
(or the field's own code, or VERSION_NOT_SUPPORTED) with a remark naming the
field, an unknown code REQUEST_CODE_NOT_SUPPORTED, a QuiverError its own code,
anything else SYSTEM_ERROR with a logged traceback. The socket refuses frames
over `max_frame_bytes` (ZMQ_MAXMSGSIZE: the peer is disconnected).
"""

import collections
import gc
import heapq
import itertools
import logging
import os
import time
from collections.abc import Callable

import zmq

from quiver import __version__
from quiver.wire import protocol
from quiver.wire.codes import RequestCode, ResponseCode
from quiver.errors import ProtocolError, QuiverError
from quiver.runtime.histogram import RequestStats
from quiver.runtime.loops import Failures
from quiver.wire.replies import REPLIES, PingReply, StatusReply
from quiver.wire.requests import SCHEMAS
from quiver.wire.schema import Schema

log = logging.getLogger(__name__)

# Far above any header (1 MiB) of a service that takes no message bodies; the broker
# sizes its own from max_message_bytes.
DEFAULT_MAX_FRAME_BYTES = protocol.MAX_HEADER_BYTES + (1 << 20)


class Answer:
    """A request as its handler answers it: what a `Direct` one-step form hands the handler's
    code (no user, no ACL: auth is off there); Request adds who sent it."""
    __slots__ = ("service", "identity", "env", "args", "answered", "received")

    def __init__(self, service: "Service", identity: bytes, env: protocol.Envelope, args=None):
        self.service = service
        self.identity = identity
        self.env = env
        self.args = args  # the request's schema object (quiver.wire.requests)
        self.answered = False
        self.received = time.monotonic()

    def reply(self, code=ResponseCode.SUCCESS, remark: str = "", ext: Schema | dict | None = None, bodies=()) -> None:
        """Answer (once) from the service thread. `ext`, if any, is built by a reply schema tied to
        the request's code (quiver.wire.replies.REPLIES)."""
        if self.answered:
            return
        if ext is not None:
            ext = reply_ext(self.env.code, ext)
        self.answered = True
        self.service.request_stats.replied(self.env.code, code, self.received)
        self.service.send_frames(self.identity, protocol.reply(code, self.env.id, remark, ext, bodies))


class Request(Answer):
    __slots__ = ("user_id", "source")

    def __init__(self, service: "Service", identity: bytes, env: protocol.Envelope, args=None,
                 user_id: str | None = None, source: str | None = None):
        self.service = service    # Answer's fields set here too: one frame less per request
        self.identity = identity
        self.env = env
        self.args = args
        self.answered = False
        self.received = time.monotonic()
        self.user_id = user_id  # who holds the connection's key (auth on), else None
        self.source = source    # the peer's IP address (auth on)

    def authorize(self, resource: str, *actions: str) -> None:
        """Raise NoPermissionError unless the sender may do one of `actions` on `resource`: the
        check of an Access declared `later`, made once the handler knows the resource."""
        security = self.service.security
        if security is not None and self.user_id is not None:
            security.authorize(self.user_id, self.source, resource, actions)

    def denied_now(self) -> str | None:
        """Why the sender may no longer make this request, checked against the ACL as it is now
        (a held request answered later: its user deleted or its right revoked meanwhile), else None.
        Covers the access its code declares; checks declared `later` are the handler's."""
        security = self.service.security
        if security is None or self.user_id is None:
            return None
        return security.check(self.user_id, self.source, SCHEMAS[self.env.code].ACCESS, self.args)

    @property
    def ext(self) -> dict:
        return self.env.ext


class Direct:
    """A handler (called with the Request, the reference) with a one-step form for the plain case:
    `direct(service, identity, envelope)` answers the request itself (through an Answer) and returns
    True, or returns False before it has stored or counted anything, and the handler runs. Only
    with auth off: the ACL check is the handler path's."""
    __slots__ = ("handler", "direct")

    def __init__(self, handler, direct):
        self.handler, self.direct = handler, direct

    def __call__(self, req: "Request"):
        return self.handler(req)


def reply_ext(request_code: int, ext: Schema | dict) -> dict:
    """The wire form of a reply's ext; TypeError unless it is built by a schema tied to the code."""
    tied = REPLIES.get(request_code, ())
    if type(ext) not in tied:
        want = " or ".join(t.__qualname__ for t in tied) or "a reply schema tied to it by @reply_to"
        raise TypeError(f"a reply to {RequestCode(request_code).name} is built by {want} (quiver.wire.replies), "
                        f"not sent as {type(ext).__name__}")
    return ext if isinstance(ext, dict) else ext.ext()   # a schema's Wire map is its ext() already


def freeze_startup_objects() -> None:
    """Everything alive once a service has started (modules, SQLAlchemy and zmq state, tables)
    lives as long as the process: moved out of the cyclic collector's reach, so its full
    collections scan only what the requests made and stay short on the latency path."""
    gc.collect()
    gc.freeze()


class Service:
    """ROUTER socket + handler table + timers + a thread-safe inbox."""

    def __init__(self, listen: str, handlers: dict, name: str, status_fn=None,
                 max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES, security=None):
        self.name = name
        self.security = security  # runtime.security.Security: CURVE + ACL; None: auth off
        self.listen = listen
        self.max_frame_bytes = max_frame_bytes
        self.handlers = dict(handlers)
        self.handlers.setdefault(RequestCode.PING, lambda req: req.reply(ResponseCode.SUCCESS, "pong", PingReply(service=name)))
        self.handlers.setdefault(RequestCode.STATUS, self._status)
        missing = sorted(RequestCode(c).name for c in self.handlers if c not in SCHEMAS)
        if missing:
            raise TypeError(f"{name}: request codes without a schema in quiver.wire.requests: {', '.join(missing)}")
        self.status_fn = status_fn
        self.counters = collections.Counter()
        self.failures = Failures(self.counters)  # loops and per-item steps count into STATUS
        self.request_stats = RequestStats(RequestCode, time.monotonic)  # latency and errors: /metrics
        self.metrics_addr = ""  # where /metrics is served (quiver.runtime.settings), shown in STATUS
        self.freeze_gc = False  # a service process (run_service): start-up objects leave the collector's scans
        self._ctx = zmq.Context.instance()
        self._sock = None
        self._inbox = collections.deque()
        self._wake_fd = os.eventfd(0, os.EFD_NONBLOCK)
        self._timers: list = []
        self._seq = itertools.count()
        self._running = False
        self.started_at = time.time()

    # ---- lifecycle -------------------------------------------------------

    def use_socket(self, sock) -> None:
        """Serve on `sock` (anything with a ROUTER's recv_multipart/send_multipart and a
        fileno or zmq socket to poll) instead of binding one: quiver.testing's fake network."""
        self._sock = sock

    def bind(self) -> None:
        if self._sock is not None:
            return
        sock = self._ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, 200_000)
        sock.setsockopt(zmq.RCVHWM, 200_000)
        sock.setsockopt(zmq.ROUTER_MANDATORY, 0)
        sock.setsockopt(zmq.MAXMSGSIZE, self.max_frame_bytes)
        if self.security is not None:
            self.security.start(self._ctx)
            self.security.secure(sock)
        host, port = self.listen.rsplit(":", 1)
        if self.security is None and not _loopback(host):
            log.warning("%s listens on %s with auth off: anyone who reaches this port can read, write and "
                        "reconfigure the cluster. Turn auth on: quiver auth init DIR, then --auth-dir DIR "
                        "(QUIVER_AUTH_DIR) on every service", self.name, self.listen)
        sock.bind(f"tcp://{'*' if host in ('0.0.0.0', '') else host}:{port}")
        self._sock = sock

    def stop(self) -> None:
        self._running = False
        self.call_soon_threadsafe(lambda: None)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close(0)
            self._sock = None
        if self.security is not None:
            self.security.stop()

    # ---- cross-thread and timers ------------------------------------------

    def call_soon_threadsafe(self, fn, *args) -> None:
        self._inbox.append((fn, args))
        try:
            os.eventfd_write(self._wake_fd, 1)
        except OSError:
            pass

    def call_later(self, delay_s: float, fn, *args):
        entry = [time.monotonic() + delay_s, next(self._seq), fn, args, True]
        heapq.heappush(self._timers, entry)
        return entry

    def every(self, name: str, interval_s: float, step, first_delay_s: float | None = None) -> None:
        """A periodic step on the service thread; a failing run is counted and logged, never fatal."""
        def tick():
            try:
                self.failures.guard(name, step)
            finally:
                self.call_later(interval_s, tick)
        self.call_later(interval_s if first_delay_s is None else first_delay_s, tick)

    @staticmethod
    def cancel(timer) -> None:
        timer[4] = False

    def send_frames(self, identity: bytes, frames: list) -> None:
        try:
            self._sock.send_multipart([identity, *frames], zmq.NOBLOCK, copy=len(frames[-1]) < 65536)
        except zmq.ZMQError as exc:
            self.counters["send_failed"] += 1
            log.debug("reply to %r dropped: %s", identity, exc)

    def send_if_connected(self, identity: bytes, frames: list) -> bool:
        """Send only over a connection that exists now; False when the peer is gone.

        ROUTER_MANDATORY is switched on just for this send: normal replies to a
        vanished client are dropped silently, but a push that must reach a live
        member (transaction checks) has to know."""
        sock = self._sock
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        try:
            sock.send_multipart([identity, *frames], zmq.NOBLOCK)
            return True
        except zmq.ZMQError:
            return False
        finally:
            sock.setsockopt(zmq.ROUTER_MANDATORY, 0)

    def push(self, identity: bytes, code: int, ext: dict | None = None, bodies=()) -> None:
        """A request from the server to a connected client (no reply expected)."""
        from quiver.wire.transport import next_request_id
        self.send_frames(identity, protocol.request(code, next_request_id(), ext, bodies))

    # ---- loop ---------------------------------------------------------------

    def serve(self, jobs, shutdown: Callable[[], None], wait_jobs: bool = False) -> None:
        """run() for a service with background jobs (an APScheduler scheduler): start them, serve
        until stop(), then stop them (`wait_jobs`: let a running one end) and call `shutdown()`,
        however run() ended."""
        jobs.start()
        try:
            self.run()
        finally:
            try:
                jobs.shutdown(wait=wait_jobs)
            except Exception:   # stopped already: shutdown must still run
                log.debug("jobs stopped already", exc_info=True)
            shutdown()

    def run(self) -> None:
        if self._sock is None:
            self.bind()
        poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLIN)
        poller.register(self._wake_fd, zmq.POLLIN)
        self._running = True
        if self.freeze_gc:
            freeze_startup_objects()
        log.info("%s listening on %s", self.name, self.listen)
        while self._running:
            timeout = 100
            if self._timers:
                timeout = max(0, min(100, int((self._timers[0][0] - time.monotonic()) * 1000) + 1))
            for sock, _ in poller.poll(timeout):
                if sock is self._sock:
                    self._drain()
                else:
                    try:
                        os.eventfd_read(self._wake_fd)
                    except BlockingIOError:
                        pass
            self._run_inbox()
            self._run_timers()

    def _run_inbox(self) -> None:
        inbox = self._inbox
        while inbox:
            fn, args = inbox.popleft()
            self._guard(fn, *args)

    def _run_timers(self) -> None:
        now = time.monotonic()
        timers = self._timers
        while timers and timers[0][0] <= now:
            _, _, fn, args, live = heapq.heappop(timers)
            if live:
                self._guard(fn, *args)

    def _guard(self, fn, *args) -> None:
        try:
            fn(*args)
        except Exception:
            log.exception("%s: task %s failed", self.name, getattr(fn, "__name__", fn))

    def _drain(self) -> None:
        sock = self._sock
        if self.security is not None:
            return self._drain_authenticated(sock)
        for _ in range(2000):
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            self.handle(frames)

    def _drain_authenticated(self, sock) -> None:
        """Like _drain, reading who sent each message from its routing frame's ZAP metadata
        (only that frame is received as a Frame: the rest stay plain bytes)."""
        for _ in range(2000):
            try:
                first = sock.recv(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            frames = [first.bytes]
            if first.more:
                frames += sock.recv_multipart()  # the rest of this message: already here
            try:
                user_id, source = first.get("User-Id"), first.get("Peer-Address")
            except zmq.ZMQError:  # no ZAP metadata: cannot happen on a CURVE socket; refused below
                user_id = source = None
            self.handle(frames, user_id or None, source)

    def handle(self, frames: list, user_id: str | None = None, source: str | None = None) -> None:
        if len(frames) < 2:
            self.counters["dropped_frames"] += 1
            return
        identity = frames[0]
        try:
            env = protocol.decode(frames[1:])
        except ProtocolError as exc:
            self.counters["malformed_frames"] += 1
            code = ResponseCode.VERSION_NOT_SUPPORTED if getattr(exc, "version_mismatch", False) \
                else ResponseCode.BAD_REQUEST
            self.request_stats.replied(-1, code, 0.0)
            self.send_frames(identity, protocol.reply(code, protocol.request_id_of(exc), exc.remark))
            return
        if env.is_reply:
            self.counters["replies_in"] += 1
            self.on_client_reply(identity, env)
            return
        handler = self.handlers.get(env.code)
        if handler is None:
            self.counters["unsupported"] += 1
            Request(self, identity, env).reply(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                               f"request code {env.code} is not supported by {self.name}")
            return
        self.counters["requests"] += 1
        if type(handler) is Direct and self.security is None:
            try:
                if handler.direct(self, identity, env):
                    return
            except Exception as exc:   # refused or failed once it stored: answered like _run answers
                self._failed(Request(self, identity, env), exc)
                return
        self._run(Request(self, identity, env, None, user_id, source), handler, recheck=True)

    def _run(self, req: Request, handler, recheck: bool) -> None:
        """Decode, authorize and handle one request: no input ends the loop (module docstring)."""
        env = req.env
        try:
            schema = SCHEMAS[env.code]
            if req.args is None:
                req.args = schema.decode(env.ext)
            if self.security is not None:
                denied = self.security.check(req.user_id, req.source, schema.ACCESS, req.args) if req.user_id \
                    else "no authenticated key on this connection"
                if denied is not None:
                    if recheck and self._held_for_acl(req, handler):
                        return
                    self.counters["denied"] += 1
                    req.reply(ResponseCode.NO_PERMISSION, denied)
                    return
            out = handler(req)
        except Exception as exc:
            self._failed(req, exc)
            return
        if out is not None and not req.answered:
            req.answered = True
            self.request_stats.replied(env.code, ResponseCode.SUCCESS, req.received)  # a handler may return frames
            self.send_frames(req.identity, out)

    def _failed(self, req: Request, exc: Exception) -> None:
        """Answer a request whose decode or handler raised (called in the except block)."""
        if isinstance(exc, ProtocolError):
            self.counters["bad_requests"] += 1
            req.reply(exc.code, exc.remark)
        elif isinstance(exc, QuiverError):
            req.reply(exc.code, exc.remark)
        else:
            log.exception("%s: handler for code %s failed", self.name, req.env.code)
            req.reply(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")

    def _held_for_acl(self, req: Request, handler) -> bool:
        """A follower's ACL may lack a grant made a moment ago: hold the refused request for one
        fresh fetch, then check it once more (runtime.acl_sync). False: refuse it now."""
        hold = self.security.on_denied
        if hold is None:
            return False
        return hold(lambda: self.call_soon_threadsafe(self._run, req, handler, False))

    def on_client_reply(self, identity: bytes, env: protocol.Envelope) -> None:
        """Replies to requests this service pushed; services override if they care.

        A header with "r" is a reply: counted (replies_in), never answered, so a
        request that carries "r" by mistake is visible in STATUS, not lost silently."""

    def _status(self, req: Request):
        status = {"service": self.name, "version": __version__, "listen": self.listen, "pid": os.getpid(),
                  "uptime_s": round(time.time() - self.started_at, 1), "counters": dict(self.counters),
                  "gc": {"frozen_objects": gc.get_freeze_count(),
                         "collections": [g["collections"] for g in gc.get_stats()]}}
        if self.metrics_addr:
            status["metrics"] = self.metrics_addr
        if self.status_fn is not None:
            status.update(self.status_fn())
        req.reply(ResponseCode.SUCCESS, "", StatusReply(status=status))


def _loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")
