"""Socket fuzz of the name server (issue 13): every request code, every field type-confused and
out of range, envelope garbage, oversized frames, path-shaped names, then registrations of
brokers that do not exist, each under its own name and claiming the schedule topics
(broker_addr not host:port; filter_servers, topic configs, data_version of the wrong shape);
then the process is alive, PING answers, a round trip works, the canary is intact,
memory stayed bounded, every registration the fuzz made has expired (no ghost broker, cluster
or topic: the name server runs with a 4 s broker expiry), and a scheduler still delivers a
delay-level-1 message within 2 s.

Replay a run with QUIVER_FUZZ_SEED=<seed printed in the log>.
"""

import time

import pytest

from quiver.wire.codes import RequestCode
from quiver.wire.transport import Transport

from support.fuzz_cluster import Checks, fuzz_env, out  # noqa: F401  (fixtures)
from support.fuzz_controls import CANARY_TOPIC, delay_control
from support.fuzz_run import FuzzRun

pytestmark = [pytest.mark.slow, pytest.mark.faults]

EXPIRY = ("--broker-expiry-ms", "4000", "--scan-interval-ms", "500")


def _extra_state(env) -> dict:
    """What the name server knows beyond the one real broker, its cluster and its topics."""
    t = Transport("fuzz-ns")
    try:
        info = t.call(env.namesrv.addr, RequestCode.GET_BROKER_CLUSTER_INFO).ext["cluster"]
        topics = t.call(env.namesrv.addr, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER).ext["topics"]
        real_topics = t.call(env.broker.addr, RequestCode.GET_ALL_TOPIC_CONFIG).ext["topics"]
        route = t.call(env.namesrv.addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": CANARY_TOPIC}).ext["route"]
    finally:
        t.close()
    extra = {"brokers": sorted(set(info.get("brokers", {})) - {env.broker.name}),
             "live": sorted(set(info.get("live", {})) - {env.broker.addr}),
             "clusters": sorted(set(info.get("clusters", {})) - {"DefaultCluster"}),
             "topics": sorted(set(topics) - set(real_topics)),
             "canary route brokers": sorted({q.get("broker_name") for q in route.get("queues", [])}
                                           - {env.broker.name})}
    return {k: v for k, v in extra.items() if v}


def _register_known_ghost(env) -> None:
    """One well-formed registration of a broker that never comes back: it must be seen, then expire
    (proves the check below observes registrations rather than passing on an empty table)."""
    t = Transport("fuzz-ns")
    try:
        t.call(env.namesrv.addr, RequestCode.REGISTER_BROKER,
               {"cluster": "FuzzGhostCluster", "broker_name": "fuzz-ghost", "broker_addr": "127.0.0.1:1",
                "broker_id": 0, "data_version": {"counter": 1, "ts": 1},
                "topics": {"FuzzGhostTopic": {"read": 1, "write": 1, "perm": 6}}, "filter_servers": []})
    finally:
        t.close()


def _ghosts_expire(env, timeout: float = 10.0):
    """Every broker the fuzz registered is dropped within expiry + scan (plus slack)."""
    t0 = time.monotonic()
    first = _extra_state(env)
    if "fuzz-ghost" not in first.get("brokers", []):
        return False, f"the well-formed ghost registration is not visible: {first}"
    while True:
        extra = _extra_state(env)
        if not extra:
            return True, (f"only the real broker left after {time.monotonic() - t0:.1f} s "
                          f"(at first also {sum(len(v) for v in first.values())} others)")
        if time.monotonic() - t0 > timeout:
            shown = {k: (v[:5], len(v)) for k, v in extra.items()}
            return False, f"still there {timeout} s after the fuzz (expiry 4 s): {shown}"
        time.sleep(0.25)


def test_namesrv_survives_malformed_frames(fuzz_env, out):
    env = fuzz_env(namesrv_args=EXPIRY)
    checks = Checks("namesrv", out)
    checks.attempt("baseline: delay-level-1 message within 2 s", delay_control, env.ns)
    run = FuzzRun(env, env.namesrv, out)
    run.general()
    run.oversized()
    run.paths()
    run.frames("registrations", run.src.registration_poison())
    _register_known_ghost(env)
    checks.attempt("control: no ghost broker, cluster or topic once the fuzz's registrations expire",
                   _ghosts_expire, env)
    run.standard_checks(checks)
    checks.attempt("control: a scheduler still delivers a delay-level-1 message within 2 s", delay_control, env.ns)
    checks.assert_all()
