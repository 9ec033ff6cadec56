"""The partition harness itself: cuts drop what they say (one way or both, per pair; a side
against the rest), heal restores every link, and nothing of a run outlives it."""

import os
import subprocess
import sys

import pytest

from support import netns

pytestmark = [pytest.mark.slow, pytest.mark.partition]

PROBE = """import socket, sys
s = socket.socket(); s.settimeout(1.0)
try:
    s.connect((sys.argv[1], 9))
except ConnectionRefusedError:
    print("reached")      # the peer's kernel answered: the link carries both ways
except OSError:
    print("cut")
"""


@pytest.fixture
def net():
    why = netns.available()
    if why:
        pytest.skip(why)
    n = netns.Net(["a", "b", "c"], prefix=f"qp{os.getpid()}h")
    try:
        yield n.create()
    finally:
        assert n.remove() == []
        assert netns.leftovers(n.prefix) == []


def reach(n, src, dst) -> bool:
    out = subprocess.run([*n.exec_prefix(src), sys.executable, "-c", PROBE, n.addr[dst]],
                         capture_output=True, text=True, timeout=30).stdout.strip()
    return out == "reached"


def links(n) -> dict:
    return {(x, y): reach(n, x, y) for x in n.nodes for y in n.nodes if x != y}


def test_cuts_drop_what_they_say_and_heal_restores_all(net):
    assert all(links(net).values())
    net.cut("a", "b")
    got = links(net)
    assert not got["a", "b"] and not got["b", "a"] and got["a", "c"] and got["c", "b"]
    net.heal()
    net.cut("a", "b", both=False)   # a's packets to b dropped: no TCP either way, b still sees c
    assert "10.213.0.12" in net.rules("a") and "10.213.0.11" in net.rules("b")
    assert not reach(net, "a", "b") and reach(net, "b", "c")
    net.heal()
    net.partition({"a"}, {"b", "c"})
    got = links(net)
    assert [k for k, ok in got.items() if ok] == [("b", "c"), ("c", "b")]
    net.heal()
    assert all(links(net).values())


def test_the_host_namespace_gets_no_address_or_interface(net):
    host = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True).stdout
    assert netns.SUBNET not in host
    assert net.prefix not in subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
