"""The HTTP side of /metrics: one thread, bounded connections, every connection on a deadline.

prometheus_client's own server spends a thread and a file descriptor on each connection and never
times one out, so idle connections from anyone who reaches the port add threads without bound and
take CPU and memory from the service's own work. This server is one thread around a selector:

- at most `max_connections` open; one more evicts the oldest (a scraper sends its request at once
  and is answered in one pass, so idle connections cannot keep it out);
- each connection is closed `timeout_s` after it was accepted, answered or not (slow senders and
  slow readers alike);
- a request head over 8 KiB gets 431, anything but GET or HEAD 405, / a one-link index, any path
  but /metrics and / 404; one request per connection (`Connection: close`).

A scrape renders the registry on this thread (prometheus_client.exposition, the text or
OpenMetrics format the Accept header asks for); the collectors only read what their service keeps.
"""

import logging
import selectors
import socket
import threading
import time
from urllib.parse import urlsplit

from prometheus_client.exposition import choose_encoder

log = logging.getLogger(__name__)

MAX_HEAD_BYTES = 8192
INDEX = b'<!doctype html><title>Quiver metrics</title><a href="/metrics">/metrics</a>\n'
_REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 431: "Request Header Fields Too Large"}


class _Conn:
    __slots__ = ("sock", "deadline", "head", "out")

    def __init__(self, sock: socket.socket, deadline: float):
        self.sock, self.deadline, self.head, self.out = sock, deadline, b"", b""


def _response(status: int, body: bytes, content_type: str = "text/plain; charset=utf-8", head_only=False) -> bytes:
    lines = [f"HTTP/1.1 {status} {_REASONS[status]}", f"Content-Type: {content_type}",
             f"Content-Length: {len(body)}", "Connection: close", "", ""]
    return "\r\n".join(lines).encode("latin-1") + (b"" if head_only else body)


class BoundedHttpServer:
    """Serve `registry` at http://host:port/metrics (see the module docstring)."""

    def __init__(self, host: str, port: int, registry, max_connections: int = 64, timeout_s: float = 5.0):
        self.registry = registry
        self.max_connections = max_connections
        self.timeout_s = timeout_s
        self.stats = {"accepted": 0, "evicted": 0, "timed_out": 0, "scrapes": 0, "bad_requests": 0}
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listen = socket.socket(family, socket.SOCK_STREAM)
        self._listen.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listen.bind((host, port))
        self._listen.listen(128)
        self._listen.setblocking(False)
        self.server_address = self._listen.getsockname()
        self._wake_r, self._wake_w = socket.socketpair()
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._listen, selectors.EVENT_READ, None)
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        self._conns: dict[int, _Conn] = {}
        self._running = True
        self._thread = threading.Thread(target=self._loop, name="metrics-http", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._running = False
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        self._thread.join(5)
        for conn in list(self._conns.values()):
            self._close(conn)
        for s in (self._listen, self._wake_r, self._wake_w):
            s.close()
        self._sel.close()

    def open_connections(self) -> int:
        return len(self._conns)

    # ---- the loop --------------------------------------------------------------------------

    def _loop(self) -> None:
        while self._running:
            now = time.monotonic()
            wait = min((c.deadline for c in self._conns.values()), default=now + 1.0) - now
            try:
                events = self._sel.select(max(0.0, min(wait, 1.0)))
            except OSError:
                log.exception("metrics server: select failed")
                time.sleep(0.1)
                continue
            accept = False
            for key, mask in events:  # reads and writes before accepts: a waiting scrape is never evicted
                if key.fileobj is self._listen:
                    accept = True
                elif key.fileobj is not self._wake_r:
                    self._step(key.data, mask)
            if accept:
                self._accept()
            now = time.monotonic()
            for conn in [c for c in self._conns.values() if c.deadline <= now]:
                self.stats["timed_out"] += 1
                self._close(conn)

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._listen.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:   # out of file descriptors, ...: the connections we hold go on
                log.warning("metrics server: accept failed: %s", exc)
                return
            if len(self._conns) >= self.max_connections:
                self.stats["evicted"] += 1
                self._close(min(self._conns.values(), key=lambda c: c.deadline))
            sock.setblocking(False)
            conn = _Conn(sock, time.monotonic() + self.timeout_s)
            self._conns[sock.fileno()] = conn
            self._sel.register(sock, selectors.EVENT_READ, conn)
            self.stats["accepted"] += 1

    def _step(self, conn: _Conn, mask: int) -> None:
        try:
            if conn.out:
                sent = conn.sock.send(conn.out)
                conn.out = conn.out[sent:]
                if not conn.out:
                    self._close(conn)
                return
            data = conn.sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(conn)
            return
        if not data:
            self._close(conn)
            return
        conn.head += data
        end = conn.head.find(b"\r\n\r\n")
        if end < 0:
            end = conn.head.find(b"\n\n")
        if end < 0:
            if len(conn.head) > MAX_HEAD_BYTES:
                self._answer(conn, _response(431, b"request head over 8 KiB\n"))
            return
        try:
            out = self._handle(conn.head[:end].decode("latin-1"))
        except Exception:   # a scrape must not end the loop
            log.exception("metrics server: a scrape failed")
            out = _response(405, b"bad request\n")
        self._answer(conn, out)

    def _handle(self, head: str) -> bytes:
        request_line, *header_lines = head.splitlines()
        parts = request_line.split()
        if len(parts) != 3 or parts[0] not in ("GET", "HEAD"):
            self.stats["bad_requests"] += 1
            return _response(405, b"only GET /metrics\n")
        path = urlsplit(parts[1]).path
        if path == "/":
            return _response(200, INDEX, "text/html; charset=utf-8", head_only=parts[0] == "HEAD")
        if path != "/metrics":
            self.stats["bad_requests"] += 1
            return _response(404, b"not found: the metrics are at /metrics\n")
        headers = {}
        for line in header_lines:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        encoder, content_type = choose_encoder(headers.get("accept", ""))
        self.stats["scrapes"] += 1
        return _response(200, encoder(self.registry), content_type, head_only=parts[0] == "HEAD")

    def _answer(self, conn: _Conn, out: bytes) -> None:
        conn.out = out
        try:
            self._sel.modify(conn.sock, selectors.EVENT_WRITE, conn)
        except (KeyError, ValueError, OSError):
            self._close(conn)

    def _close(self, conn: _Conn) -> None:
        fd = conn.sock.fileno()
        if fd >= 0 and self._conns.get(fd) is conn:
            del self._conns[fd]
            try:
                self._sel.unregister(conn.sock)
            except (KeyError, ValueError):
                pass
        conn.sock.close()
