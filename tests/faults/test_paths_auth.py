"""Auth on: no request from any user creates, reads or deletes a file outside the data dir.

The five services run with auth on in the fuzz layout (tests/support/fuzz_cluster.py:
the data dir nested deep, a victim dir beside it). Two users send every request
code with each path-shaped name in every name field (and, to the broker,
re-puts naming such topics then deletes and creates of them): a SUPER user, who
passes every user check, and a NORMAL user granted ALL on every topic, group
and the cluster. Service-role codes are refused to both; the rest reach the
handlers, whose name checks are the only guard. Afterwards nothing outside the
data dir was created, changed or deleted, the victim's files are intact, every
service is alive and a send/pull round trip works.
"""

import random

import pytest

from quiver import Admin
from quiver.wire import requests as rq
from quiver.wire.transport import Transport

from support.fuzz import FrameSource
from support.fuzz_cluster import fuzz_env, out, snapshot, snapshot_diff  # noqa: F401  (fixtures)
from support.fuzz_pipe import run_frames
from support.fuzz_run import fuzz_context, fuzz_seed
from support.fuzz_values import path_names

pytestmark = [pytest.mark.slow, pytest.mark.faults, pytest.mark.timeout(600)]


def _round_trip(env, creds) -> None:
    t = Transport("paths-round-trip", credentials=creds)
    try:
        sent = t.call(env.broker.addr, rq.SendMessage(topic="FuzzRoundTrip", queue_id=0, metas=([0], [""])),
                      bodies=[b"after the path fuzz"])
        phys = rq.SendReply.decode(sent.ext).phys_offsets[0]
        got = t.call(env.broker.addr, rq.ViewMessage(offset=phys))
        assert got.bodies, "the message sent after the fuzz reads back"
    finally:
        t.close()


def test_no_user_reaches_a_file_outside_the_data_dir(fuzz_env, out):
    env = fuzz_env(auth=True)
    admin = Admin(env.ns, credentials=env.credentials)
    admin.start()
    try:
        power = admin.acl_add_user("power")
        for resource in ("topic:*", "group:*", "cluster"):
            admin.acl_grant("power", resource, ["ALL"])
    finally:
        admin.shutdown()
    seed = fuzz_seed()
    rng = random.Random(seed)
    out(f"PATHS seed={seed} (replay: QUIVER_FUZZ_SEED={seed})")
    src = FrameSource(rng, fuzz_context(env, rng))
    names = path_names(str(env.victim))
    before = snapshot(env.snapshot_root, env.data_dir)
    victim_before = snapshot(env.victim, env.data_dir)
    for who, creds in (("super", env.credentials), ("power", power)):
        for svc in (env.namesrv, env.broker, env.scheduler, env.txn, env.filter):
            stats = run_frames(svc.addr, src.paths(names), budget=10**9, deadline_s=20, credentials=creds)
            if svc is env.broker:
                stats.merge(run_frames(svc.addr, src.reput_then_delete(names), budget=10**9, deadline_s=20,
                                       credentials=creds))
            out(f"PATHS user={who} service={svc.name}: sent {stats.sent}, answers {dict(stats.replies)}")
            assert stats.answered > 0, f"{svc.name} answered nothing to {who}: no connection?"
            if svc is env.broker:   # the names reached the handlers: not all refused at the door
                assert stats.replies["SUCCESS"] > 0 and stats.replies["NO_PERMISSION"] > 0, stats.replies
    dead = [f"{s.name}:\n{s.log_tail(15)}" for s in env.services if not s.alive()]
    assert not dead, dead
    changed = snapshot_diff(before, snapshot(env.snapshot_root, env.data_dir))
    assert not changed, "outside the data dir:\n" + "\n".join(changed[:40])
    assert snapshot(env.victim, env.data_dir) == victim_before
    _round_trip(env, env.credentials)
