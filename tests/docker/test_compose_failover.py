"""compose.yaml's `failover` profile on a real Docker engine: three name servers running the
controller, three brokers with --auto-failover; kill -9 the master's container, a member of the
SyncStateSet takes over, every acknowledged message is read back, and the old master's container,
started again, rejoins the SyncStateSet.
"""

import importlib.util
import pathlib
import time

import pytest

# this directory's conftest, by path ("conftest" on sys.path is tests/conftest.py)
_spec = importlib.util.spec_from_file_location("quiver_docker_support", pathlib.Path(__file__).with_name("conftest.py"))
_support = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_support)
new_project = _support.new_project

pytestmark = [pytest.mark.slow, pytest.mark.docker, pytest.mark.timeout(900)]

SERVICES = ["ctl-1", "ctl-2", "ctl-3", "fo-1", "fo-2", "fo-3"]
TOPIC = "FailoverOrders"


@pytest.fixture
def failover_project(image):
    with new_project() as p:
        yield p


def _group(project, check, what: str, timeout_s: float = 120) -> dict:
    """The controller's view of broker-fo once `check(group)` holds."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        groups = project.client("fo_view")["groups"]
        last = next((g for g in groups if g.get("group", "").endswith("broker-fo")), None)
        if last is not None and check(last):
            return last
        time.sleep(1)
    raise AssertionError(f"not within {timeout_s} s: {what}; last view {last}")


def _container_of(project, addr: str) -> str:
    service = addr.split(":")[0]            # members advertise <service>:10911
    (row,) = [r for r in project.containers(service) if r["state"] == "running"]
    return row["id"]


def test_kill_9_of_the_master_container_fails_over_and_loses_nothing(failover_project):
    p = failover_project
    p.compose("--profile", "failover", "up", "-d", "--no-build", *SERVICES)
    p.wait_healthy({s: 1 for s in SERVICES}, timeout_s=180)
    g = _group(p, lambda g: g.get("master") and len(g.get("sync_state_set", [])) == 3,
               "a master and all three members in sync")
    members = [m["addr"] for m in g["members"]]
    p.client("fo_create", topic=TOPIC, members=members)
    before = p.client("fo_send", topic=TOPIC, prefix="before", count=300)
    assert len(before["acked"]) == 300
    # replicas learn topics by the metadata sync: every 10 s, or at once when a replicated record
    # names a topic they do not know (the sends above); the kill waits until all know it
    deadline = time.monotonic() + 60
    while not all(v is True for v in p.client("fo_create", topic=TOPIC, members=members, create=False)["known"].values()):
        assert time.monotonic() < deadline, "the replicas never learned the topic"
        time.sleep(2)

    old_master, old_epoch = g["master"], g["epoch"]
    victim = _container_of(p, old_master)
    p.docker("kill", "-s", "KILL", victim)
    after = p.client("fo_send", topic=TOPIC, prefix="after", count=100, timeout_s=90)
    assert len(after["acked"]) == 100, after
    print(f"\nkill -9 of {old_master}: first SEND_OK after {after['first_ok_s']} s")
    g = _group(p, lambda g: g.get("master") not in (None, "", old_master) and g["epoch"] > old_epoch,
               "a new master at a newer epoch")
    assert g["master"] in [a for a in g["sync_state_set"]]

    acked = before["acked"] + after["acked"]
    got = p.client("fo_consume", topic=TOPIC, group="fo-check", want=len(acked), timeout_s=60)["bodies"]
    missing = sorted(set(acked) - set(got))
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {missing[:5]}"

    p.docker("start", victim)
    _group(p, lambda g: old_master in g.get("sync_state_set", []) and len(g["sync_state_set"]) == 3,
           "the old master back in the SyncStateSet as a replica", timeout_s=180)
