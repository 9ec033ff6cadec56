"""Connection state callbacks: a client hears when its connection to a peer comes up, drops and
comes back (real sockets on loopback; the peer is a bare ROUTER)."""

import threading

import zmq

from quiver import Producer
from quiver.wire.codes import RequestCode
from support.waiting import wait_for


def _router(port: int | None = None) -> tuple[zmq.Socket, int]:
    sock = zmq.Context.instance().socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    if port is None:
        port = sock.bind_to_random_port("tcp://127.0.0.1")
    else:
        sock.bind(f"tcp://127.0.0.1:{port}")
    return sock, port


def test_a_client_hears_connected_disconnected_and_connected_again():
    server, port = _router()
    addr = f"127.0.0.1:{port}"
    events, lock = [], threading.Lock()

    def heard(peer, state):
        with lock:
            events.append((peer, state, threading.current_thread().name))
    p = Producer("pg-conn", namesrv=addr)
    p.on_connection(heard)                   # before start: kept for the transport start() builds
    p.start()
    try:
        p._transport.call_future(addr, RequestCode.PING, timeout=0.5)   # opens the connection
        wait_for(lambda: [e[:2] for e in events] == [(addr, "connected")], 10, "connected")
        server.close(0)
        wait_for(lambda: [e[:2] for e in events][-1:] == [(addr, "disconnected")], 10, "disconnected")
        server, _ = _router(port)            # back on the same port: ZeroMQ reconnects by itself
        wait_for(lambda: [e[:2] for e in events] == [(addr, "connected"), (addr, "disconnected"),
                                                     (addr, "connected")], 15, "connected again")
        assert all("-io" not in name for _, _, name in events)   # never on the IO thread
        p.on_connection(None)
        server.close(0)
        wait_for(lambda: p._transport._up == set(), 10, "the drop seen")
        assert len(events) == 3              # nobody told after None
    finally:
        p.shutdown()
        server.close(0)


def test_a_listener_that_raises_is_logged_and_the_next_change_still_told():
    server, port = _router()
    addr = f"127.0.0.1:{port}"
    told = []

    def bad(peer, state):
        told.append(state)
        raise RuntimeError("a listener's bug")
    p = Producer("pg-conn2", namesrv=addr).start()
    p.on_connection(bad)                     # after start: the running transport takes it
    try:
        p._transport.call_future(addr, RequestCode.PING, timeout=0.5)
        wait_for(lambda: told == ["connected"], 10, "connected")
        server.close(0)
        wait_for(lambda: told == ["connected", "disconnected"], 10, "disconnected")
    finally:
        p.shutdown()
        server.close(0)


def test_an_async_client_hears_on_its_loop_and_may_be_a_coroutine():
    import asyncio

    from quiver.aio import AsyncProducer
    server, port = _router()
    addr = f"127.0.0.1:{port}"

    async def main():
        heard = asyncio.Queue()

        async def on_change(peer, state):
            await heard.put((peer, state))
        async with AsyncProducer("pg-conn3", namesrv=addr) as p:
            p.on_connection(on_change)
            p.sync._transport.call_future(addr, RequestCode.PING, timeout=0.5)
            first = await asyncio.wait_for(heard.get(), 10)
            server.close(0)
            second = await asyncio.wait_for(heard.get(), 10)
        return first, second
    try:
        assert asyncio.run(main()) == ((addr, "connected"), (addr, "disconnected"))
    finally:
        server.close(0)
