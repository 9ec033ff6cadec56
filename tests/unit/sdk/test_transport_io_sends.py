"""A request made on the transport's IO thread (a callback's: a consumer's next pull) leaves at
once, without waking the IO thread through its eventfd, and after whatever other threads
queued before it; against a ROUTER on loopback that answers every request."""

import threading

import zmq

from quiver.wire import protocol
from quiver.wire.codes import RequestCode, ResponseCode
from quiver.wire.transport import Transport


class Echo:
    """A ROUTER answering SUCCESS to every request, noting the request ids in arrival order."""

    def __init__(self) -> None:
        self.sock = zmq.Context.instance().socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        port = self.sock.bind_to_random_port("tcp://127.0.0.1")
        self.addr = f"127.0.0.1:{port}"
        self.ids: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self.sock.poll(20):
                continue
            ident, *frames = self.sock.recv_multipart()
            env = protocol.decode(frames)
            self.ids.append(env.id)
            self.sock.send_multipart([ident, *protocol.reply(ResponseCode.SUCCESS, env.id)])

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.sock.close(0)


def test_a_callbacks_request_leaves_without_a_wake_up_and_in_order():
    echo, t = Echo(), Transport("io-sends")
    try:
        t.call_future(echo.addr, RequestCode.PING).result(5)   # connected
        wakes = []
        wake = t._wake
        t._wake = lambda: wakes.append(threading.current_thread().name) or wake()
        done = threading.Event()
        second: list[int] = []

        def first(env):   # on the IO thread: the next request goes from here
            assert threading.current_thread() is t._thread
            second.append(t.send(echo.addr, RequestCode.PING, None, (), lambda env2: done.set()))
        # The reply to the first can run `first` before send() returns here, so each id is
        # kept by who made it, not by which append ran first.
        first_id = t.send(echo.addr, RequestCode.PING, None, (), first)
        assert done.wait(5)
        assert wakes == ["MainThread"]     # the callback's request woke nobody
        assert echo.ids[-2:] == [first_id, *second]   # and arrived after the one before it
    finally:
        t.close()
        echo.close()


def test_a_callbacks_request_waits_behind_what_other_threads_queued():
    """A request another thread queued while the IO thread ran a callback leaves first: the
    callback's own request is queued behind it instead of overtaking it."""
    echo, t = Echo(), Transport("io-order")
    try:
        t.call_future(echo.addr, RequestCode.PING).result(5)
        done = threading.Event()
        order: list[int] = []

        def first(env):
            other = threading.Thread(target=lambda: order.append(
                t.send(echo.addr, RequestCode.PING, None, (), lambda e: None)))
            other.start()
            other.join()   # queued, not sent yet: the IO thread is here
            order.append(t.send(echo.addr, RequestCode.PING, None, (), lambda e: done.set()))
        t.send(echo.addr, RequestCode.PING, None, (), first)
        assert done.wait(5)
        assert echo.ids[-2:] == order
    finally:
        t.close()
        echo.close()
