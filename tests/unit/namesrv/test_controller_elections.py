"""The controller's elections counter in STATUS, on a one-node Raft group in process (Raft on its
own thread, its callbacks handed to the test thread as they would be to the service thread)."""

import queue
import socket
import time
from types import SimpleNamespace

from quiver_namesrv.controller import Controller
from quiver_namesrv.controller_state import Liveness


def _addr():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


class FakeService:
    def __init__(self):
        self.inbox = queue.Queue()

    def call_soon_threadsafe(self, fn, *args):
        self.inbox.put((fn, args))

    def run_pending(self):
        while not self.inbox.empty():
            fn, args = self.inbox.get()
            fn(*args)


def _tick_until(ctl, cond, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "the controller did not get there in time"
        ctl.service.run_pending()
        time.sleep(0.005)


def _controller(tmp_path) -> Controller:
    me = _addr()
    key = tmp_path / "controller.key"
    key.write_text("ab" * 32)
    key.chmod(0o600)
    config = SimpleNamespace(controller_heartbeat_timeout_ms=1500, raft_self=me, raft_peers=[me], auth_dir="",
                             controller_key_file=str(key), data_dir=str(tmp_path), controller_scan_interval_ms=100)
    return Controller(config, service=FakeService())


def test_each_election_is_counted_in_status(tmp_path):
    ctl = _controller(tmp_path)
    now = [1000.0]
    ctl.live = Liveness(1.5, clock=lambda: now[0])
    ctl.started -= 10  # settled: silence means something
    try:
        _tick_until(ctl, lambda: ctl.is_leader)
        ctl.lead_term, ctl.lead_since = ctl.term, -1e9  # led long enough: no lease of a predecessor left
        assert ctl.status()["controller"]["elections"] == 0
        for addr in ("h:1", "h:2"):
            ctl.state.register("C", "b", addr, addr + "0")
            ctl.live.beat(addr, 0, 0)
        _tick_until(ctl, lambda: len(ctl.state.data.get("C/b", {}).get("members", {})) == 2)
        assert ctl.scan_step() == [("C/b", "h:2")]  # the first master: most data, then the address
        _tick_until(ctl, lambda: ctl.status()["controller"]["elections"] == 1)
        ctl.state.alter("C/b", "h:2", 1, ["h:2", "h:1"])
        _tick_until(ctl, lambda: ctl.state.data["C/b"]["sss"] == ["h:2", "h:1"])
        now[0] += 2.0
        ctl.live.beat("h:1", 0, 1)  # the master went silent, the in-sync replica did not
        assert ctl.scan_step() == [("C/b", "h:1")]
        _tick_until(ctl, lambda: ctl.status()["controller"]["elections"] == 2)
        assert ctl.state.data["C/b"]["epoch"] == 2
    finally:
        ctl.stop()


def test_a_new_leader_replaces_no_master_before_a_lease_has_passed(tmp_path):
    """A lease the previous leader granted runs lease_ms from the master's heartbeat, which came
    before this term began: the new leader elects nobody in place of a master until then."""
    ctl = _controller(tmp_path)
    ctl.started -= 10
    try:
        _tick_until(ctl, lambda: ctl.is_leader)
        for addr in ("h:1", "h:2"):
            ctl.state.register("C", "b", addr, addr + "0")
            ctl.live.beat(addr, 0, 0)
        _tick_until(ctl, lambda: len(ctl.state.data.get("C/b", {}).get("members", {})) == 2)
        assert ctl.scan_step() == [("C/b", "h:2")]  # no master yet: nobody holds a lease
        _tick_until(ctl, lambda: ctl.state.data["C/b"]["master"] == "h:2")
        ctl.state.alter("C/b", "h:2", 1, ["h:2", "h:1"])
        _tick_until(ctl, lambda: ctl.state.data["C/b"]["sss"] == ["h:2", "h:1"])
        ctl.live.beats["h:2"].at -= 10  # the master is silent, its in-sync replica is not
        ctl.live.beat("h:1", 0, 1)
        ctl.lead_term, ctl.lead_since = ctl.term, time.monotonic()  # just took office
        assert ctl.scan_step() == []
        ctl.lead_since -= ctl.lease_ms / 1000 + 0.01
        assert ctl.scan_step() == [("C/b", "h:1")]
    finally:
        ctl.stop()


def test_leading_needs_a_majority_heard_within_the_fallback(tmp_path):
    """pysyncobj may still call itself leader; without a majority heard lately the controller does not."""
    key = tmp_path / "controller.key"
    key.write_text("ab" * 32)
    key.chmod(0o600)
    peers = ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]
    node = SimpleNamespace(_isLeader=lambda: True, isReady=lambda: True, raftCurrentTerm=1)
    config = SimpleNamespace(controller_heartbeat_timeout_ms=1500, raft_self=peers[0], raft_peers=peers,
                             auth_dir="", controller_key_file=str(key), data_dir=str(tmp_path),
                             controller_scan_interval_ms=100)
    ctl = Controller(config, service=FakeService(), node_factory=lambda *a: node)
    assert ctl.fallback_s < ctl.lease_ms / 1000    # steps down before a lease it granted runs out
    assert not ctl.is_leader and ctl.scan_step() == []
    ctl.heard["127.0.0.1:2"] = time.monotonic()     # itself + one of three: a majority
    assert ctl.is_leader
    ctl.heard["127.0.0.1:2"] = time.monotonic() - ctl.fallback_s - 0.01
    assert not ctl.is_leader
