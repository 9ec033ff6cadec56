"""Blocking calls made on the calling thread's own socket.

A thread that waits for its reply gains nothing from handing the request to
the IO thread and having the reply handed back: each hand-off is a thread
wake-up, and on this kind of machine a wake-up costs about as much as the
network round trip itself (measured: a sync send paced at 2k/s took 3x an
unpaced one). So a blocking call uses a DEALER of the calling thread (one per
thread and peer, made on first use) and waits on it directly. Pipelined and
callback requests stay on the IO thread's DEALER, which is also the one the
broker knows from heartbeats and pushes to.

Like the IO thread's sockets, these queue only on a live connection and watch
a disconnect monitor, so a call to a peer that goes away fails at once and the
caller can retry elsewhere. Whatever the socket layer raises (connecting to an
address zmq cannot parse, a socket closed by shutdown) reaches the caller as a
ClientError, and a socket that failed half-way is closed, not kept. A socket
is only ever used by its own thread: `close()` closes the idle ones and marks
the transport closed; a socket in the middle of a call is closed by its thread
when the call ends (never under it).
"""

import functools
import socket
import threading
import time
import weakref

import zmq

from zmq.utils.monitor import parse_monitor_message

from quiver.wire import frames as wire_frames, protocol
from quiver.errors import ClientError, ProtocolError, RequestTimeoutError, VersionNotSupportedError
from quiver.wire.curve import secure_client

CONNECT_WAIT_S = 1.0  # a first connection to a peer may take this long
REFUSED_RETRY_S = 0.25  # a refused handshake is tried again this often while a request waits


# the handshake of a connection failed: a security mismatch, never retried into success
HANDSHAKE_FAILED = (zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)


def handshake_problem(addr: str, event: int, secured: bool) -> str:
    """What a failed handshake with `addr` means, in words that say what to do."""
    if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
        return (f"{addr} refused this client's key: the cluster does not know it (check credentials= or "
                f"QUIVER_CREDENTIALS; a deleted or rotated user needs a new key file)")
    if not secured:
        return (f"{addr} did not accept a plain connection: the cluster runs with auth on; pass "
                f"credentials= (or QUIVER_CREDENTIALS, or the CLI's --credentials) a key file from "
                f"'quiver acl user add'")
    return (f"{addr} did not complete a CURVE handshake: either it runs with auth off, or its server key "
            f"differs from the one in this key file")


class _Peer:
    __slots__ = ("sock", "mon", "poller", "thread", "busy", "refused", "refused_at", "secured", "addr")

    def __init__(self, ctx: zmq.Context, addr: str, creds=None):
        self.busy = False  # inside a call on its thread: only that thread may close it
        self.refused = None  # why the last handshake failed
        self.refused_at = 0.0
        self.secured = creds is not None
        self.sock = ctx.socket(zmq.DEALER)
        self.mon = None
        try:
            self.sock.setsockopt(zmq.LINGER, 0)
            self.sock.setsockopt(zmq.IMMEDIATE, 1)
            secure_client(self.sock, creds)
            self.mon = self.sock.get_monitor_socket(zmq.EVENT_DISCONNECTED | HANDSHAKE_FAILED)
            self.addr = addr
            self.sock.connect(f"tcp://{addr}")
        except Exception:  # e.g. an address zmq cannot parse: leave no socket behind
            self.close()
            raise
        self.poller = zmq.Poller()
        self.poller.register(self.sock, zmq.POLLIN)
        self.poller.register(self.mon, zmq.POLLIN)
        self.thread = weakref.ref(threading.current_thread())

    def lost(self) -> bool:
        """True if the monitor reported a disconnect (drains what it reported; a failed
        handshake is kept in `refused`)."""
        lost = False
        while self.mon.getsockopt(zmq.EVENTS) & zmq.POLLIN:   # nothing to read is the common case: no Again raised
            event = parse_monitor_message(self.mon.recv_multipart(zmq.NOBLOCK))["event"]
            if event & HANDSHAKE_FAILED:
                self.refused = handshake_problem(self.addr, event, self.secured)
                self.refused_at = time.monotonic()
            else:
                lost = True
        return lost

    def retry_refused(self) -> None:
        """ZeroMQ does not reconnect after a refused handshake; a key may become known a moment
        later (a user just added), so connect again — at most every REFUSED_RETRY_S."""
        if self.refused and time.monotonic() - self.refused_at >= REFUSED_RETRY_S:
            self.refused_at = time.monotonic()
            url = f"tcp://{self.addr}"
            try:
                self.sock.disconnect(url)
            except zmq.ZMQError:
                pass
            self.sock.connect(url)

    def close(self) -> None:
        if self.sock.closed:
            return
        try:
            if self.mon is not None:
                self.sock.disable_monitor()
                self.mon.close(0)
        except zmq.ZMQError:
            pass
        self.sock.close(0)


class DirectCalls:
    """Per-thread DEALERs for blocking request/reply."""

    def __init__(self, ctx: zmq.Context, creds=None):
        self._ctx = ctx
        self._creds = creds
        self._local = threading.local()
        self._all: list[tuple[str, _Peer]] = []
        self._lock = threading.Lock()
        self._closed = False

    def _acquire(self, addr: str) -> _Peer:
        """This thread's socket to `addr` (made on first use), marked busy until `_release`."""
        peers = getattr(self._local, "peers", None)
        if peers is None:
            peers = self._local.peers = {}
        with self._lock:
            if self._closed:
                raise ClientError("transport is shut down")
            peer = peers.get(addr)
            if peer is None:
                self._prune()
                peer = peers[addr] = _Peer(self._ctx, addr, self._creds)
                self._all.append((addr, peer))
            peer.busy = True
        return peer

    def _release(self, peer: _Peer) -> None:
        with self._lock:
            peer.busy = False
            if self._closed:  # closed during the call: its socket was left to us
                peer.close()

    def _prune(self) -> None:
        """Close the sockets of threads that have ended (caller holds the lock)."""
        keep = []
        for addr, peer in self._all:
            thread = peer.thread()
            if thread is None or not thread.is_alive():
                peer.close()
            else:
                keep.append((addr, peer))
        self._all = keep

    def _drop(self, addr: str) -> None:
        peer = getattr(self._local, "peers", {}).pop(addr, None)
        if peer is not None:
            with self._lock:
                self._all = [(a, p) for a, p in self._all if p is not peer]
            peer.close()

    def call(self, addr: str, frames: list, req_id: int, timeout: float, down: set) -> protocol.Envelope:
        if addr in down:  # the IO thread's monitor already saw this peer go away
            raise ClientError(unreachable(addr))
        try:
            peer = self._acquire(addr)
        except zmq.ZMQError as exc:
            raise ClientError(f"cannot connect to {addr!r:.80}: {exc}") from None
        try:
            return self._call(peer, addr, frames, req_id, timeout)
        except (zmq.ZMQError, OSError) as exc:
            self._drop(addr)
            raise ClientError(f"call to {addr} failed: {exc}") from None
        finally:
            self._release(peer)

    def _call(self, peer: _Peer, addr: str, frames: list, req_id: int, timeout: float) -> protocol.Envelope:
        now = time.monotonic()
        deadline = now + timeout
        peer.lost()  # disconnects between calls are history: the socket reconnects by itself
        connect_by = min(deadline, now + CONNECT_WAIT_S)
        while True:
            try:
                wire_frames.send(peer.sock, frames)
                peer.refused = None
                break
            except zmq.Again:  # no live connection yet (IMMEDIATE)
                peer.lost()
                peer.retry_refused()
                # a refused handshake is retried until the call's deadline, not only the connect
                # wait: a user added a moment ago is known once the service has fetched the ACL
                left = (deadline if peer.refused else connect_by) - time.monotonic()
                if left <= 0:
                    raise ClientError(peer.refused or unreachable(addr)) from None
                peer.sock.poll(max(1, int(min(left, 0.05) * 1000)), zmq.POLLOUT)  # slices: see refusals
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self._drop(addr)  # its late reply must never be read as another call's
                raise RequestTimeoutError(f"no reply from {addr} in time (request {req_id})")
            events = dict(peer.poller.poll(max(1, int(left * 1000))))
            if peer.mon in events and peer.lost():
                self._drop(addr)
                raise ClientError(f"connection to {addr} lost before it replied")
            if peer.sock in events:
                try:
                    env = protocol.decode(peer.sock.recv_multipart())
                except ProtocolError as exc:
                    if getattr(exc, "version_mismatch", False) and protocol.request_id_of(exc) == req_id:
                        raise VersionNotSupportedError(f"{addr}: {exc.remark}") from None
                    continue
                if env.is_reply and env.id == req_id:
                    return env

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for _, peer in self._all:
                if not peer.busy:  # a busy one is closed by its own thread (_release)
                    peer.close()
            self._all = []


@functools.lru_cache(maxsize=256)
def _resolves(host: str) -> bool:
    try:
        socket.getaddrinfo(host, None)
        return True
    except OSError:
        return False


def unreachable(addr: str) -> str:
    """Why a request to `addr` failed, in words that say what to do (the DNS lookup runs only
    on failure, once per host)."""
    host = addr.rsplit(":", 1)[0]
    if not _resolves(host):
        return (f"{addr} is not reachable: {host!r} does not resolve here; a broker that advertises a "
                f"container hostname is only reachable inside its compose network (clients on the host: "
                f"use the compose dev profile, or set the broker's --advertise to an address you can reach)")
    return f"{addr} is not reachable"
