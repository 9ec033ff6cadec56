"""PullConsumer.poll()'s held pulls on the calling thread's own sockets (`direct_poll=True`).

A poll() that finds nothing buffered sends the long-polling pulls of its idle
queues itself, on DEALERs of its own thread (one per broker or filter server),
and waits on them and on a wake-up fd the IO thread writes when it buffers
messages or a queue falls idle. A message that arrives while poll() waits is
read by the thread that returns it: one thread wake-up less than the IO thread
reading it and handing it over (the same reason blocking calls use a socket of
their own: wire/direct.py).

A pull still held when poll() returns stays on its thread's socket and is read
by that thread's next poll(); the consumer takes the queue back (consumer.py)
if it is not read in time. Sockets are only used by their own thread: `close()`
closes the idle ones, a thread inside `wait` closes its own when it leaves.
These sockets are never used for other requests (a blocking call reading
replies in order would drop a held pull's answer).

Owns the sockets, what is pending on them and the wake-up; not the requests
(queue_puller.py) nor what an answer does to a queue (consumer.py).
"""

import itertools
import os
import threading
import weakref
from collections.abc import Hashable
from typing import Any

import zmq

from quiver.errors import ProtocolError
from quiver.wire import frames as wire_frames, protocol
from quiver.wire.curve import Credentials, secure_client

_ids = itertools.count(1 << 48)   # apart from the transport's ids: never mistaken for them in logs


class HeldPulls:
    """One thread's sockets, the pulls pending on them (request id -> the caller's entry) and
    its wake-up fd."""

    def __init__(self, ctx: zmq.Context, creds: Credentials | None) -> None:
        self._ctx, self._creds = ctx, creds
        self.sockets: dict[str, zmq.Socket] = {}
        self.pending: dict[int, Any] = {}
        self.waiting = False     # inside `DirectPolls.wait`: wake-ups are written
        self.busy = False        # in use by its thread: only that thread may close it
        self.wake_fd = os.eventfd(0, os.EFD_NONBLOCK)
        self.poller = zmq.Poller()
        self.poller.register(self.wake_fd, zmq.POLLIN)
        self.thread = weakref.ref(threading.current_thread())

    def socket(self, addr: str) -> zmq.Socket:
        sock = self.sockets.get(addr)
        if sock is None:
            sock = self._ctx.socket(zmq.DEALER)
            try:
                sock.setsockopt(zmq.LINGER, 0)
                sock.setsockopt(zmq.IMMEDIATE, 1)   # no live connection: a send fails at once
                secure_client(sock, self._creds)
                sock.connect(f"tcp://{addr}")
            except Exception:
                sock.close(0)
                raise
            self.sockets[addr] = sock
            self.poller.register(sock, zmq.POLLIN)
        return sock

    def close(self) -> None:
        for sock in self.sockets.values():
            sock.close(0)
        self.sockets.clear()
        self.pending.clear()
        if self.wake_fd >= 0:
            os.close(self.wake_fd)
            self.wake_fd = -1


class DirectPolls:
    """The held pulls of every thread that polls one consumer."""

    def __init__(self, creds: Credentials | None) -> None:
        self._ctx = zmq.Context.instance()
        self._creds = creds
        self._local = threading.local()
        self._all: list[HeldPulls] = []
        self._lock = threading.Lock()   # `_all`, wake-ups and closing
        self._closed = False

    def mine(self) -> HeldPulls | None:
        """This thread's HeldPulls (made on first use), marked busy; None once closed."""
        held = getattr(self._local, "held", None)
        with self._lock:
            if self._closed:
                return None
            if held is None or held.wake_fd < 0:
                self._all = [h for h in self._all if self._alive(h)]
                held = self._local.held = HeldPulls(self._ctx, self._creds)
                self._all.append(held)
            held.busy = True
        return held

    def release(self, held: HeldPulls) -> None:
        with self._lock:
            held.busy = held.waiting = False
            if self._closed:
                held.close()

    def send(self, held: HeldPulls, addr: str, req: Any, entry: Hashable) -> int | None:
        """Send `req` (a quiver.wire.requests schema) on this thread's socket to `addr`: its
        request id, or None when there is no live connection (or `addr` cannot be used)."""
        req_id = next(_ids)
        try:
            wire_frames.send(held.socket(addr), protocol.request(req.CODE, req_id, req.ext(), ()))
        except zmq.ZMQError:   # zmq.Again: not connected; or an address zmq cannot take
            return None
        held.pending[req_id] = entry
        return req_id

    def wait(self, held: HeldPulls, timeout_s: float) -> list[tuple[Any, protocol.Envelope]]:
        """The answers that arrived, waiting up to `timeout_s` for one or for a wake-up (then the
        list may be empty): [(entry given to send, envelope)]."""
        with self._lock:
            held.waiting = True
        events = dict(held.poller.poll(max(0, int(timeout_s * 1000))))
        if held.wake_fd in events:
            try:
                os.eventfd_read(held.wake_fd)
            except BlockingIOError:
                pass
        out = []
        for sock in held.sockets.values():
            while wire_frames.ready(sock):   # asking beats a raised zmq.Again on every idle socket
                try:
                    frames = wire_frames.recv(sock)
                except zmq.Again:
                    break
                try:
                    env = protocol.decode(frames)
                except ProtocolError:
                    continue
                entry = held.pending.pop(env.id, None)
                if entry is not None and env.is_reply:
                    out.append((entry, env))
        return out

    def wake(self) -> None:
        """Wake every thread waiting in `wait` (the IO thread: messages buffered, a queue idle)."""
        with self._lock:
            for held in self._all:
                if held.waiting and held.wake_fd >= 0:
                    os.eventfd_write(held.wake_fd, 1)

    def close(self) -> None:
        """Close the idle threads' sockets; a busy one is closed by its thread (`release`)."""
        with self._lock:
            self._closed = True
            for held in self._all:
                if not held.busy:
                    held.close()
            self._all = []

    @staticmethod
    def _alive(held: HeldPulls) -> bool:
        thread = held.thread()
        if thread is not None and thread.is_alive():
            return True
        if not held.busy:
            held.close()
        return False
