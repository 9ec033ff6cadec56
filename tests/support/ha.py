"""Master/slave broker pairs for the HA tests (integration and faults)."""

import os
import signal

import pytest

from quiver.wire.codes import RequestCode
from quiver.errors import QuiverError
from quiver.tools.local import LocalCluster
from .waiting import wait_for  # noqa: F401  (re-exported for the HA tests)

HA_FAST = ("--ha-heartbeat-interval-ms", "300", "--ha-housekeeping-ms", "3000", "--ha-sync-interval-ms", "1000")


def status(t, svc) -> dict:
    return t.call(svc.addr, RequestCode.STATUS, timeout=3.0).ext["status"]


def wait_slave_connected(t, master, timeout=15.0):
    wait_for(lambda: status(t, master)["ha"]["slaves"], timeout, "the slave to connect")


def wait_converged(t, master, slave, timeout=30.0) -> int:
    def same():
        try:
            m = status(t, master)["store"]["max_phys_offset"]
            return m if m and status(t, slave)["store"]["max_phys_offset"] == m else 0
        except QuiverError:  # a restarted peer: the socket reconnects
            return 0
    return wait_for(same, timeout, "the slave to reach the master's max offset")


@pytest.fixture
def ha_cluster(tmp_path):
    made = []

    def make(role="ASYNC_MASTER", master_args=(), slave_args=()):
        c = LocalCluster(str(tmp_path / f"ha{len(made)}"))
        made.append(c)
        c.add_namesrv()
        c.wait()
        m = c.add_master(None, "bk", role, *HA_FAST, *master_args)
        s = c.add_slave(m, *HA_FAST, *slave_args)
        c.wait()
        c.wait_registered(2)
        return c, m, s

    yield make
    for c in made:
        for svc in c.services:
            if svc.alive():
                try:
                    os.kill(svc.pid, signal.SIGCONT)
                except OSError:
                    pass
                svc.kill()
