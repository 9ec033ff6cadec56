"""One whole cluster for the user journeys: name server, broker, scheduler, txn-checker, filter.

Real processes on loopback ports (quiver.tools.local.LocalCluster, as tests/conftest.py's
fixtures), started once per journey module and killed by PID at its end (not per session:
a cluster left running would write under the basetemp other tests watch). Each journey
uses its own topics and groups, so journeys share the cluster without seeing each
other. Delay levels are short except level 1 (1 s, the demo's "see you in a
second"): a retry starts at level 3, so retries take 100-200 ms.
"""

import time

import pytest

from quiver import Admin
from quiver.tools.local import LocalCluster
from support.scheduler import UNITS, wait_owned

LEVELS = "1s 500ms " + " ".join(["100ms"] * 4 + ["200ms"] * 12)
FAST_CHECKS = ("--check-interval-ms", "300", "--transaction-timeout-ms", "600")


@pytest.fixture(scope="module")
def e2e(tmp_path_factory):
    """The running LocalCluster (its `.namesrv` is the address to give clients)."""
    c = LocalCluster(str(tmp_path_factory.mktemp("e2e")))
    try:
        c.add_namesrv()
        c.wait()
        c.add_broker(None, None, "--delay-levels", LEVELS)
        c.wait()
        c.wait_registered(1)
        schedulers = [c.add_service("scheduler", "quiver_scheduler")]
        c.add_service("txn-checker", "quiver_txn", *FAST_CHECKS)
        filters = [c.add_service("filter", "quiver_filter", "--register-interval-ms", "1000", data=False)]
        c.wait()
        admin = Admin(namesrv=c.namesrv)
        try:
            wait_owned(admin, schedulers, UNITS)
            _wait_filter_routed(admin, {f.addr for f in filters})
        finally:
            admin.shutdown()
        yield c
    finally:
        for svc in c.services:
            if svc.alive():
                svc.kill()


def _wait_filter_routed(admin: Admin, want: set, timeout: float = 20.0) -> None:
    """A filter server registers with its broker, which tells the name servers (routes carry it)."""
    admin.create_topic("E2eWarmUp", queues=1)
    deadline = time.monotonic() + timeout
    while True:
        servers = admin.topic_route("E2eWarmUp").get("filter_servers", {})
        if want <= {a for addrs in servers.values() for a in addrs}:
            return
        assert time.monotonic() < deadline, f"filter servers {want} never appeared in a route: {servers}"
        time.sleep(0.1)
