"""The Kafka gateway's per-connection answers (outbox.py): request order kept whoever writes."""

import socket
import threading
import time
from concurrent.futures import Future

import pytest

from quiver_kafka.outbox import Deferred, Outbox


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


def _read(sock: socket.socket, n: int, timeout: float = 10.0) -> bytes:
    sock.settimeout(timeout)
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            break
        buf += chunk
    return buf


def _nothing_readable(sock: socket.socket) -> bool:
    sock.settimeout(0)
    try:
        sock.recv(1)
    except BlockingIOError:
        return True
    return False


def _small_buffered(sock: socket.socket):
    """An Outbox on a socket of a small send buffer, and its writer thread."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    out = Outbox(sock)
    writer = threading.Thread(target=out.write_rest, daemon=True)
    writer.start()
    return out, writer


def _closed(out: Outbox, writer: threading.Thread) -> None:
    out.close(5)
    writer.join(5)
    assert not writer.is_alive()


def test_ready_answers_are_written_at_once_by_the_reader_in_order(pair):
    a, b = pair
    out = Outbox(a)
    out.put(b"one ")
    out.put(b"")          # acks=0: nothing to write, nothing held
    out.put(b"two")
    assert _read(b, 7) == b"one two"


def test_a_deferred_answer_keeps_its_place_and_its_completing_thread_writes_those_behind(pair):
    a, b = pair
    out = Outbox(a)
    first, second = Future(), Future()
    out.put(b"0:")
    out.put(Deferred([first, second], lambda: b"1:"))
    out.put(b"2:")
    out.put(Deferred([], lambda: b"3"))   # nothing to wait for, but behind the pending one
    assert _read(b, 2) == b"0:" and _nothing_readable(b)
    second.set_result(None)
    assert _nothing_readable(b)
    done = threading.Thread(target=first.set_result, args=(None,))   # as the SDK's IO thread would
    done.start()
    done.join(10)
    assert _read(b, 5) == b"1:2:3"


def test_what_the_socket_does_not_take_goes_to_the_writer_thread_not_the_completing_one(pair):
    a, b = pair
    out, writer = _small_buffered(a)
    big = bytes(range(256)) * 16384   # 4 MiB: far more than the socket buffers
    fut = Future()
    out.put(Deferred([fut], lambda: big))
    out.put(b"after")
    t0 = time.monotonic()
    fut.set_result(None)   # the client reads nothing yet: this thread must not wait for it
    assert time.monotonic() - t0 < 2.0
    assert _read(b, len(big) + 5) == big + b"after"
    _closed(out, writer)


def test_an_answer_that_cannot_be_built_ends_the_connection(pair):
    a, b = pair
    out = Outbox(a)
    fut = Future()

    def broken():
        raise ValueError("no")
    out.put(Deferred([fut], broken))
    fut.set_result(None)
    assert _read(b, 1) == b"" and out.broken
    out.close(1)   # returns at once: nothing more will be written


def test_an_answer_of_several_buffers_is_written_whole_in_order_whatever_the_socket_takes(pair):
    a, b = pair
    out, writer = _small_buffered(a)
    records = [bytearray(bytes([i]) * 700_000) for i in range(4)]   # a Fetch's partitions, over the buffers
    parts = [b"head", records[0], b"", memoryview(b"-mid-"), records[1], records[2], b"x", records[3]]
    fut = Future()
    out.put(b"0:")
    out.put(Deferred([fut], lambda: parts))   # written by the completing thread, then the writer thread
    out.put([b"after", b"!"])
    fut.set_result(None)
    expected = b"0:" + b"".join(bytes(p) for p in parts) + b"after!"
    assert _read(b, len(expected)) == expected and _nothing_readable(b)
    out.put([memoryview(b"last")])   # the reader's own, blocking
    assert _read(b, 4) == b"last"
    _closed(out, writer)
