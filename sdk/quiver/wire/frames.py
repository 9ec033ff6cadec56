"""A multipart message in and out of a zmq socket without pyzmq's per-frame sugar.

Socket.send_multipart ORs enum flags per frame (an enum construction each) and type-checks
every part; recv_multipart reads RCVMORE through the enum too, and a drained socket costs a
raised zmq.Again. On the IO thread that is several µs of every pull round trip: these take the
flags as plain ints, read each frame's own more flag, and `ready` asks instead of raising.
"""

import zmq
from zmq.backend import zmq_poll

_NOBLOCK = int(zmq.NOBLOCK)
_MORE_NOBLOCK = int(zmq.SNDMORE) | _NOBLOCK
_POLLIN = int(zmq.POLLIN)
COPY_BELOW = 65536   # frames up to this size are copied into zmq; a larger last frame is lent


def send(sock, frames) -> None:
    """Send `frames` (bytes-like) as one message without blocking; zmq.Again (nothing sent) when
    the peer cannot take it now. Once the first frame is taken, zmq takes the rest."""
    copy = len(frames[-1]) < COPY_BELOW
    last = len(frames) - 1
    put = sock.send
    for i in range(last):
        put(frames[i], _MORE_NOBLOCK, copy=copy)
    put(frames[last], _NOBLOCK, copy=copy)


def recv(sock) -> list:
    """One whole message as a list of bytes, without blocking (zmq.Again when there is none).
    A frame's own `more` flag, not a RCVMORE getsockopt (an enum lookup and a call a frame)."""
    parts = []
    while True:
        frame = sock.recv(_NOBLOCK, copy=False)
        parts.append(frame.bytes)
        if not frame.more:
            return parts


def ready(sock) -> bool:
    """Whether a message waits to be read (what recv would not raise zmq.Again for): a zero
    timeout zmq_poll, cheaper than an EVENTS getsockopt and without the GIL."""
    return bool(zmq_poll([(sock, _POLLIN)], 0))
