"""The partition suite's cluster fixture: namespaces and processes made per test and always
removed; the records and logs stay in /tmp/quiver-partition-* only when the test failed (or
QUIVER_PARTITION_KEEP=1)."""

import os
import shutil
import tempfile

import pytest

from support import netns
from support.partition_cluster import PartitionCluster


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    rep = (yield).get_result()
    if rep.failed:
        item.partition_failed = True


@pytest.fixture
def cluster(request):
    """A started PartitionCluster; request.param (indirect) is the --ha-acks mode."""
    why = netns.available()
    if why:
        pytest.skip(why)
    acks = getattr(request, "param", "sync")
    root = tempfile.mkdtemp(prefix=f"quiver-partition-{request.node.name[:40]}-")
    # slaves fetch the master's topics every second, not every 10: each case waits for every
    # broker to know the topic before its cut (the replication links' timers stay the default)
    c = PartitionCluster(root, brokers=3, broker_args=("--ha-acks", acks, "--ha-sync-interval-ms", "1000"))
    c.acks = acks

    def remove():
        errors = c.stop()
        if getattr(request.node, "partition_failed", False) or os.environ.get("QUIVER_PARTITION_KEEP"):
            print(f"partition records and logs kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
        left = netns.leftovers(c.net.prefix)
        assert not errors and not left, f"not removed: {errors} {left}"
    request.addfinalizer(remove)
    return c.start()
