"""A Kafka connection's answers, written in request order by whichever thread completes the oldest.

The reader writes its own answers at once while nothing earlier is pending: no thread hand-off
on the common path (a Fetch, a held one too, is written in the turn its pull arrives). An
answer that waits for the brokers (a Produce's, `Deferred`) keeps its place; the thread its last
broker reply arrives on (the SDK's IO thread) builds it and writes it, and the ready answers
behind it, only as far as the socket takes them without waiting. What the socket does not take
then goes to the connection's writer thread, so a client that does not read stalls only itself,
never the IO thread every connection shares. A TLS socket is always written by the reader or
the writer thread (an SSL socket has no non-blocking send beside a blocking recv).
"""

import collections
import itertools
import logging
import queue
import socket
import ssl
import threading

log = logging.getLogger(__name__)

MAX_IN_FLIGHT = 64   # answers a connection may have pending (a pipelining client's produces); then it waits
IOV_MAX = 512        # buffers in one sendmsg (Linux takes up to 1024)


def _after(bufs: list, sent: int) -> list:
    """What is left of `bufs` once their first `sent` bytes went."""
    for i, b in enumerate(bufs):
        if sent < len(b):
            return [memoryview(b)[sent:], *bufs[i + 1:]] if sent else bufs[i:]
        sent -= len(b)
    return []


class Deferred:
    """An answer waiting for broker replies: `build()` gives its frame once every future is done."""

    __slots__ = ("futures", "build")

    def __init__(self, futures, build):
        self.futures, self.build = futures, build

    def when_done(self, then) -> None:
        """then() once every future is done, on the thread that completes the last (this one if
        none is pending). The futures' callbacks keep no path back to them once it ran: no
        reference cycle per answer for the collector to find."""
        futures, self.futures = self.futures, ()
        if not futures:
            then()
            return
        waiting, done, n = [then], itertools.count(1), len(futures)

        def one(_f):
            if next(done) == n:   # count's next is atomic: callbacks may run on two threads at once
                waiting.pop()()
        for f in futures:
            f.add_done_callback(one)


class Outbox:
    def __init__(self, conn: socket.socket, limit: int = MAX_IN_FLIGHT):
        self.conn = conn
        self.nonblocking = not isinstance(conn, ssl.SSLSocket)
        self.limit = limit
        self.cond = threading.Condition()
        self.slots: collections.deque = collections.deque()   # [frame, or None while waiting] in request order
        self.writing = False   # a thread is sending (outside the lock): only it writes
        self.broken = False
        self.rest: queue.SimpleQueue = queue.SimpleQueue()   # the writer thread's: bytes not taken at once

    def put(self, answer) -> None:
        """On the reader, in request order: a frame (b"" for none; or a list of buffers) or a Deferred."""
        slot = [None if isinstance(answer, Deferred) else answer]
        with self.cond:
            while len(self.slots) >= self.limit and not self.broken:
                self.cond.wait()
            self.slots.append(slot)
        if isinstance(answer, Deferred):
            answer.when_done(lambda: self._fill(slot, answer))
        else:
            self._flush(block=True)

    def _fill(self, slot: list, answer: Deferred) -> None:
        try:
            frame = answer.build()
        except Exception:   # an answer that cannot be built: this connection ends, no other
            log.exception("an answer could not be built; closing the connection")
            self._break()
            frame = b""
        with self.cond:
            slot[0] = frame
        self._flush(block=False)

    def _flush(self, block: bool) -> None:
        with self.cond:
            if self.writing:
                return   # the thread sending now writes this one too
            self.writing = True
        self._write_ready(block)

    def _write_ready(self, block: bool) -> None:
        """Owning the sending: the ready answers at the head, in order, until the next is not ready."""
        while True:
            with self.cond:
                ready = []
                while self.slots and self.slots[0][0] is not None:
                    ready.append(self.slots.popleft()[0])
                self.cond.notify_all()   # room for the reader; close() may be waiting
                if not ready:
                    self.writing = False
                    return
                if self.broken:
                    continue   # dropped: the reader ends at its next recv
            bufs = [b for frame in ready for b in (frame if isinstance(frame, list) else (frame,)) if len(b)]
            if not bufs:
                continue
            try:
                if block:
                    self._send_all(bufs)
                    continue
                sent = self._try_send(bufs)
            except OSError:
                self._break()
                continue
            rest = _after(bufs, sent)
            if rest:
                self.rest.put(rest)   # the writer thread owns the sending from here
                return

    def _try_send(self, bufs: list) -> int:
        if not self.nonblocking:
            return 0
        try:
            return self.conn.sendmsg(bufs[:IOV_MAX], (), socket.MSG_DONTWAIT)
        except BlockingIOError:
            return 0

    def _send_all(self, bufs: list) -> None:
        """Every buffer, in order: one sendmsg for several (a Fetch answer's records are not joined)."""
        if not self.nonblocking:   # an SSL socket has no sendmsg
            self.conn.sendall(b"".join(bufs))
            return
        while bufs:
            bufs = _after(bufs, self.conn.sendmsg(bufs[:IOV_MAX]))

    def _break(self) -> None:
        with self.cond:
            self.broken = True
            self.cond.notify_all()
        try:
            self.conn.shutdown(socket.SHUT_RDWR)   # the reader's recv returns: it stops
        except OSError:
            pass

    def write_rest(self) -> None:
        """The writer thread: what the socket did not take at once, then what became ready meanwhile."""
        while (rest := self.rest.get()) is not None:
            try:
                self._send_all(rest)
            except OSError:
                self._break()
            self._write_ready(block=True)

    def close(self, timeout: float) -> None:
        """On the reader as it ends: wait (up to `timeout`) for the pending answers to be written."""
        with self.cond:
            self.cond.wait_for(lambda: self.broken or (not self.slots and not self.writing), timeout)
        self.rest.put(None)
