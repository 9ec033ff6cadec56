"""Socket fuzz of the broker (issue 13), with a control after each poisoning class.

1. general: every request code x every field x every poison (type confusion,
   out of range, huge, deep), nested entries, properties with system meaning,
   envelope garbage, random mutations, oversized frames; then the canary and
   a round trip, and memory bounded;
2. heartbeats (ctl-stats's own group among them, subscriptions that are not
   maps): GET_CONSUME_STATS still answers for that group and another, and the
   periodic conflict watch still reports a new conflict in a third group;
3. offsets (2^63, 2^64, -1, floats ... through UPDATE_CONSUMER_OFFSET, a pull's
   commit and HA_SYNC_METADATA, in the same save as ctl-offsets's commit):
   ctl-offsets's committed offsets survive a broker restart;
4. poison transaction properties (sent in 1): a normal transaction is still
   checked by the txn-checker and committed; TRANSACTION_LIST_OPEN answers;
5. path-shaped names in every name field, re-put topics then deleted: nothing
   is created or deleted outside the data dir; then the final checks.

Replay a run with QUIVER_FUZZ_SEED=<seed printed in the log>.
"""

import time

import pytest

from quiver.wire.codes import RequestCode
from quiver.wire.transport import Transport

from support.fuzz_cluster import Checks, fuzz_env, out  # noqa: F401  (fixtures)
from support.fuzz_controls import (CANARY_TOPIC, commit_offsets, open_transactions, read_offsets, stats_control,
                                   txn_control)
from support.fuzz_run import FuzzRun

pytestmark = [pytest.mark.slow, pytest.mark.faults, pytest.mark.timeout(600)]

CTL_OFFSETS = {0: 3, 1: 5, 2: 7, 3: 9}
CTL_OFFSETS_AFTER = {0: 4, 1: 6, 2: 8, 3: 10}
STATS = {0: 1, 1: 2, 2: 3, 3: 4}


def _watch_heartbeats(broker_addr: str, group: str) -> None:
    """Two members of `group` that subscribe differently: the group watch must log the conflict."""
    t = Transport("fuzz-watch")
    try:
        for i, expr in enumerate(("tag-a", "tag-b")):
            consumer = {"group": group, "subscriptions": {CANARY_TOPIC: {"type": "TAG", "expression": expr}},
                        "consume_type": "PULL", "model": "CLUSTERING", "consume_from": "first"}
            t.call(broker_addr, RequestCode.HEART_BEAT, {"client_id": f"{group}-member-{i}", "consumers": [consumer]})
    finally:
        t.close()


def _watch_reported(log_path: str, group: str, timeout: float = 15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(log_path, errors="replace") as f:
            lines = [ln for ln in f if f"group {group} has inconsistent" in ln]
        if lines:
            return True, lines[-1].strip()[:200]
        time.sleep(0.3)
    return False, f"no 'inconsistent subscriptions' line for {group} in {timeout} s (the watch runs every 10 s)"


def test_broker_survives_malformed_frames_and_poison_stays_contained(fuzz_env, out):
    env = fuzz_env()
    checks = Checks("broker", out)
    broker = env.broker
    _watch_heartbeats(broker.addr, "watch-before")
    commit_offsets(broker.addr, "ctl-offsets", CANARY_TOPIC, CTL_OFFSETS)
    commit_offsets(broker.addr, "ctl-stats", CANARY_TOPIC, STATS)
    commit_offsets(broker.addr, "ctl-stats-2", CANARY_TOPIC, STATS)
    checks.attempt("baseline: consume stats of ctl-stats", stats_control, env.ns, "ctl-stats", CANARY_TOPIC, STATS)
    checks.attempt("baseline: a normal transaction is checked and committed", txn_control, env.ns, env.txn.addr)
    run = FuzzRun(env, broker, out)
    checks.attempt("baseline: the group watch logs a subscription conflict", _watch_reported, broker.log_path,
                   "watch-before")

    # 1. everything, then the oversized frames
    run.general()
    run.oversized()
    checks.expect(broker.alive(), "alive after the general phase", "" if broker.alive() else broker.log_tail(15))
    checks.attempt("canary intact after the general phase", run.canary.check)
    run.memory_checks(checks)
    checks.attempt("control: a normal transaction is still checked and committed (after the general phase, "
                   "whose sends carried poison transaction properties)", txn_control, env.ns, env.txn.addr)

    # 2. heartbeats
    run.frames("heartbeats", run.src.heartbeat_poison("ctl-stats", CANARY_TOPIC))
    checks.attempt("control: GET_CONSUME_STATS answers for the poisoned group ctl-stats", stats_control, env.ns,
                   "ctl-stats", CANARY_TOPIC, STATS)
    checks.attempt("control: GET_CONSUME_STATS answers for another group", stats_control, env.ns, "ctl-stats-2",
                   CANARY_TOPIC, STATS)
    _watch_heartbeats(broker.addr, "watch-after")
    checks.attempt("control: the group watch still logs a new conflict in another group", _watch_reported,
                   broker.log_path, "watch-after")

    # 3. offsets: ctl-offsets commits, poison lands in the same save, restart
    commit_offsets(broker.addr, "ctl-offsets", CANARY_TOPIC, CTL_OFFSETS_AFTER)
    run.frames("offsets", run.src.offset_poison(["fuzz-g", "fuzz-g2"], "FuzzT", 4))
    time.sleep(2.0)  # four offset saves (--offset-persist-interval-ms 500)
    checks.attempt("offsets of ctl-offsets read back before the restart",
                   lambda: _same(read_offsets(broker.addr, "ctl-offsets", CANARY_TOPIC, CTL_OFFSETS_AFTER),
                                 CTL_OFFSETS_AFTER))
    env.restart(broker)
    checks.attempt("control: ctl-offsets's committed offsets survive a broker restart",
                   lambda: _same(read_offsets(broker.addr, "ctl-offsets", CANARY_TOPIC, CTL_OFFSETS_AFTER),
                                 CTL_OFFSETS_AFTER))
    checks.attempt("control: ctl-stats's committed offsets survive a broker restart",
                   lambda: _same(read_offsets(broker.addr, "ctl-stats", CANARY_TOPIC, STATS), STATS))

    # 4. the general phase sent half messages with poison transaction properties
    checks.attempt("control: a normal transaction is checked and committed after the restart", txn_control,
                   env.ns, env.txn.addr)
    checks.attempt("TRANSACTION_LIST_OPEN answers", open_transactions, env.ns)

    # 5. path-shaped names
    run.paths()
    time.sleep(2.5)  # delay level 1 (1 s) sends of the path phase go through the scheduler
    run.standard_checks(checks, memory=False)
    checks.assert_all()


def _same(have: dict, want: dict):
    return have == want, f"read {have}, committed {want}"
