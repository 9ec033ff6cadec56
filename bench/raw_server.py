"""A bare pyzmq ROUTER that acks every request with 1 byte: the wire ceiling.

Usage: python -m bench.raw_server PORT
"""

import sys

import zmq


def main(port: int) -> None:
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.RCVHWM, 0)
    sock.bind(f"tcp://127.0.0.1:{port}")
    ack = b"k"
    while True:
        frames = sock.recv_multipart()
        if frames[1] == b"STOP":
            sock.send_multipart([frames[0], ack])
            break
        sock.send_multipart([frames[0], ack])


if __name__ == "__main__":
    main(int(sys.argv[1]))
