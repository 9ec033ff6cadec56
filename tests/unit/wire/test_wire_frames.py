"""quiver.wire.frames: a multipart message out and in with plain-int flags, as pyzmq's own calls do it."""

import pytest
import zmq

from quiver.wire import frames


@pytest.fixture
def pair():
    ctx = zmq.Context()
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    a.bind("inproc://wire-frames")
    b.connect("inproc://wire-frames")
    yield a, b
    a.close(0)
    b.close(0)
    ctx.term()


def test_a_message_arrives_whole_and_in_order(pair):
    a, b = pair
    assert not frames.ready(b)
    with pytest.raises(zmq.Again):
        frames.recv(b)
    frames.send(a, [b"v1", b"head", b"body"])
    frames.send(a, [b"one"])
    assert frames.ready(b)
    assert frames.recv(b) == [b"v1", b"head", b"body"]
    assert frames.recv(b) == [b"one"]
    assert not frames.ready(b)


def test_a_large_last_frame_is_lent_and_still_arrives(pair):
    a, b = pair
    big = bytearray(b"x" * (frames.COPY_BELOW + 1))
    frames.send(a, [b"v1", memoryview(big)])
    got = frames.recv(b)
    assert got == [b"v1", bytes(big)]


def test_a_peer_that_cannot_take_it_raises_again_with_nothing_sent():
    ctx = zmq.Context()
    d = ctx.socket(zmq.DEALER)   # no peer connected: a DEALER blocks (here: Again) on send
    try:
        with pytest.raises(zmq.Again):
            frames.send(d, [b"v1", b"head"])
    finally:
        d.close(0)
        ctx.term()
