"""Fixtures that start real Quiver services as processes on loopback ports.

Every process started here is stopped by PID at teardown, whatever the test did.
"""

import pytest

from quiver.tools.local import LocalCluster


@pytest.fixture
def make_cluster(tmp_path):
    made = []

    def make(brokers: int = 1, namesrvs: int = 1, broker_args=(), namesrv_args=()) -> LocalCluster:
        c = LocalCluster(str(tmp_path / f"cluster{len(made)}"))
        made.append(c)
        for _ in range(namesrvs):
            c.add_namesrv(None, *namesrv_args)
        c.wait()
        for _ in range(brokers):
            c.add_broker(None, None, *broker_args)
        c.wait()
        c.wait_registered(brokers)
        return c

    yield make
    for c in made:
        for svc in c.services:
            if svc.alive():
                svc.kill()


@pytest.fixture
def cluster(make_cluster):
    """One name server and one broker (async flush, auto-create on)."""
    return make_cluster()
