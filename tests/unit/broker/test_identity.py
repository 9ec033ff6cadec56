"""--broker-name auto: a broker claims a broker-N slot of its volume under a flock and keeps it."""

import dataclasses
import os
import signal
import socket
import subprocess
import sys
import threading

import pytest

from quiver.wire import names
from quiver_broker.config import Config
from quiver_broker.identity import claim_slot, existing_slots, try_claim

HOLDER = """
import sys
from quiver_broker.identity import claim_slot
print(claim_slot(sys.argv[1]).name, flush=True)
sys.stdin.read()  # hold the slot until the test closes stdin or kills this process
"""


@pytest.fixture
def holder(tmp_path):
    """Start processes that each claim a slot of `tmp_path` and hold it; killed by PID at teardown."""
    procs = []

    def start() -> tuple[subprocess.Popen, str]:
        p = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
        procs.append(p)
        return p, p.stdout.readline().strip()
    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()


def test_first_claim_makes_broker_1_with_its_directory_and_holder_note(tmp_path):
    slot = claim_slot(str(tmp_path / "broker"))
    try:
        assert slot.name == "broker-1"
        assert slot.path == os.path.realpath(tmp_path / "broker" / "broker-1") and os.path.isdir(slot.path)
        assert (tmp_path / "broker" / "broker-1.lock").read_text().split()[1] == str(os.getpid())
    finally:
        slot.release()


def test_two_processes_never_hold_one_slot(tmp_path, holder):
    p, name = holder()
    assert name == "broker-1"
    assert try_claim(str(tmp_path), 1) is None          # another process holds it
    mine = claim_slot(str(tmp_path))
    assert mine.name == "broker-2"
    _, third = holder()
    assert third == "broker-3"
    mine.release()


def test_a_killed_holders_slot_is_claimed_again_with_its_data(tmp_path, holder):
    p, name = holder()
    (tmp_path / name / "00000000000000000000").write_bytes(b"old data")
    os.kill(p.pid, signal.SIGKILL)                      # kill -9: the kernel drops the flock
    p.wait()
    slot = claim_slot(str(tmp_path))
    assert slot.name == name
    assert (tmp_path / name / "00000000000000000000").read_bytes() == b"old data"
    slot.release()


def test_a_released_slot_is_reclaimed_before_a_new_one(tmp_path):
    a, b = claim_slot(str(tmp_path)), claim_slot(str(tmp_path))   # separate flocks conflict in one process too
    assert (a.name, b.name) == ("broker-1", "broker-2")
    a.release()
    again = claim_slot(str(tmp_path))
    assert again.name == "broker-1"
    for s in (b, again):
        s.release()


def test_existing_slots_come_before_unused_numbers(tmp_path):
    (tmp_path / "broker-3").mkdir()                     # scaled down from 3: its data waits
    first, second = claim_slot(str(tmp_path)), claim_slot(str(tmp_path))
    assert (first.name, second.name) == ("broker-3", "broker-1")
    for s in (first, second):
        s.release()


def test_the_slot_this_hostname_held_last_comes_first(tmp_path):
    (tmp_path / "broker-1").mkdir()
    (tmp_path / "broker-2").mkdir()
    (tmp_path / "broker-2.lock").write_text(f"{socket.gethostname()} 4242\n")   # `docker restart` keeps it
    (tmp_path / "broker-1.lock").write_text("another-container 7\n")
    mine, other = claim_slot(str(tmp_path)), claim_slot(str(tmp_path))
    assert (mine.name, other.name) == ("broker-2", "broker-1")
    for s in (mine, other):
        s.release()


def test_other_entries_are_not_slots(tmp_path):
    for n in ("broker-0", "broker-01", "broker-x", "broker-2.lock.tmp", "broker-abcdef123456", "metadata.db"):
        (tmp_path / n).mkdir()
    (tmp_path / "broker-7.lock").write_text("")
    assert existing_slots(str(tmp_path)) == [7]
    assert existing_slots(str(tmp_path / "missing")) == []


def test_racing_claims_get_distinct_valid_names(tmp_path):
    got, barrier = [], threading.Barrier(8)

    def claim():
        barrier.wait()
        got.append(claim_slot(str(tmp_path)))
    threads = [threading.Thread(target=claim) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(s.name for s in got) == sorted(f"broker-{n}" for n in range(1, 9))
    assert all(names.is_valid_broker_name(s.name) for s in got)
    for s in got:
        s.release()


def test_config_auto_name_is_for_masters_and_resolves_to_the_slot_directory(tmp_path):
    config = Config(broker_name="auto", data_dir=str(tmp_path))
    assert config.auto_name
    with pytest.raises(ValueError, match="auto is for masters"):
        Config(broker_name="auto", broker_id=1, data_dir=str(tmp_path))
    slot = claim_slot(config.data_dir)
    named = dataclasses.replace(config, broker_name=slot.name)
    assert not named.auto_name and named.name == "broker-1" and named.store_dir == slot.path
    slot.release()
