"""The controller's elections counter in STATUS, on a one-node Raft group in process."""

import socket
import time
from types import SimpleNamespace

from quiver_namesrv.controller import Controller
from quiver_namesrv.controller_state import Liveness


def _addr():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def _tick_until(ctl, cond, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "the controller did not get there in time"
        ctl.node.doTick(0)
        time.sleep(0.002)


def test_each_election_is_counted_in_status(tmp_path):
    me = _addr()
    config = SimpleNamespace(controller_heartbeat_timeout_ms=1500, raft_self=me, raft_peers=[me], auth_dir="",
                             data_dir=str(tmp_path), controller_scan_interval_ms=100)
    ctl = Controller(config, service=None)
    now = [1000.0]
    ctl.live = Liveness(1.5, clock=lambda: now[0])
    ctl.started -= 10  # settled: silence means something
    try:
        _tick_until(ctl, lambda: ctl.is_leader)
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
