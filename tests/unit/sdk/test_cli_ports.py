"""`quiver up`'s port check: which ports compose.yaml's services bind, and who holds a taken one."""

import os
import pathlib
import socket

from quiver.tools import compose
from quiver.tools.local import free_port
from quiver.tools.ports import conflicts, holder, taken

COMPOSE = pathlib.Path(__file__).resolve().parents[3] / "compose.yaml"


def test_a_held_port_is_taken_and_its_holder_named():
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert taken("127.0.0.1", port)
        assert holder(port).startswith(f"pid {os.getpid()} (")
        (line,) = conflicts("127.0.0.1", [("namesrv-0", port)])
        assert line.startswith(f"port {port} (namesrv-0) is taken by pid {os.getpid()}")
    port = free_port()
    assert not taken("127.0.0.1", port) and holder(port) is None and conflicts("127.0.0.1", [("x", port)]) == []


def test_planned_ports_are_the_ones_start_binds():
    specs = compose.load(str(COMPOSE))
    planned = dict(compose.planned_ports(specs, {"broker-store": 2}))
    assert planned["namesrv-0"] == 9876 and planned["namesrv-0 QUIVER_METRICS_LISTEN"] == 9301
    assert planned["broker-store-0"] == 10911 and planned["broker-store-1"] == 11911      # + 1000 per replica
    assert planned["broker-store-1 QUIVER_METRICS_LISTEN"] == 10302


def test_free_port_never_hands_out_the_same_port_twice():
    # the kernel may offer a port again before the service given it has bound it
    ports = [free_port() for _ in range(2000)]
    assert len(set(ports)) == len(ports)
