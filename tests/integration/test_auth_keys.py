"""A user's key rotated and a right revoked with the CLI, auth on (real processes): `quiver acl
user add NAME` on an existing user writes a new key; the old one is refused at its next request,
even on a connection opened before (by the broker at once, by the name server once it follows the
ACL), and on a new connection; the new key keeps the user's rules. `quiver acl revoke` takes away
exactly the actions named, on open connections too."""

import subprocess
import sys

import pytest

from quiver import Message, Producer, PullConsumer
from quiver.errors import ClientError, NoPermissionError, QuiverError
from quiver.wire import requests as rq
from quiver.wire.codes import ResponseCode
from quiver.wire.curve import read_credentials
from quiver.wire.transport import Transport

from support.secure import secure_cluster
from support.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    with secure_cluster(tmp_path_factory.mktemp("keys"), topics=["Keys"]) as (c, admin, _):
        yield c, admin


def acl_cli(c, *args) -> str:
    out = subprocess.run([sys.executable, "-m", "quiver.tools.cli", "--namesrv", c.namesrv,
                          "--credentials", f"{c.auth_dir}/admin.key", "acl", *args],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr + out.stdout
    return out.stdout


def _producer(c, key):
    p = Producer("keys-pg", c.namesrv, credentials=key, retries=0, auto_batch=False)
    p.start()
    return p


def _route_code(t: Transport, addr: str):
    try:
        return t.call(addr, rq.GetRouteInfo(topic="Keys"), timeout=2, ok=tuple(ResponseCode)).code
    except QuiverError as exc:
        return exc


def test_a_new_key_replaces_the_old_one_even_on_open_connections(secure, tmp_path):
    c, _ = secure
    old, new = str(tmp_path / "frank-1.key"), str(tmp_path / "frank-2.key")
    acl_cli(c, "user", "add", "frank", "--out", old)
    acl_cli(c, "grant", "frank", "--resource", "topic:Keys", "--actions", "PUB")
    p = _producer(c, old)
    ns = Transport("frank-ns", credentials=read_credentials(old))
    try:
        assert p.send(Message("Keys", b"before")).status.name == "SEND_OK"
        assert _route_code(ns, c.namesrv) == ResponseCode.SUCCESS
        acl_cli(c, "user", "add", "frank", "--out", new)
        assert read_credentials(new).public_key != read_credentials(old).public_key
        with pytest.raises(QuiverError, match="no longer a user's|refused"):
            p.send(Message("Keys", b"old key, open connection"))
        # the name server follows the brokers' ACL (every 3 s): its open connection goes too
        wait_for(lambda: _route_code(ns, c.namesrv) != ResponseCode.SUCCESS, 15,
                 "the name server to refuse the old key on its open connection")
    finally:
        p.shutdown()
        ns.close()
    fresh = Transport("frank-old-again", credentials=read_credentials(old))
    try:
        with pytest.raises(ClientError, match="refused this client's key"):
            fresh.call(c.namesrv, rq.GetRouteInfo(topic="Keys"), timeout=2)
    finally:
        fresh.close()
    p = _producer(c, new)
    try:   # same user, same rules: PUB on its topic
        assert p.send(Message("Keys", b"new key")).status.name == "SEND_OK"
    finally:
        p.shutdown()


def test_revoke_takes_away_only_the_actions_named(secure, tmp_path):
    c, _ = secure
    key = str(tmp_path / "gina.key")
    acl_cli(c, "user", "add", "gina", "--out", key)
    acl_cli(c, "grant", "gina", "--resource", "topic:Keys", "--actions", "PUB,SUB")
    acl_cli(c, "grant", "gina", "--resource", "group:gina-cg", "--actions", "SUB")
    p = _producer(c, key)
    try:
        assert p.send(Message("Keys", b"gina's")).status.name == "SEND_OK"
        acl_cli(c, "revoke", "gina", "--resource", "topic:Keys", "--actions", "PUB")
        with pytest.raises(NoPermissionError, match=r"lacks \S*PUB\S* on topic:Keys"):
            p.send(Message("Keys", b"after the revoke"))
    finally:
        p.shutdown()
    assert "PUB" not in [r for r in acl_cli(c, "list").splitlines() if "gina" in r and "topic:Keys" in r][0]
    with PullConsumer("gina-cg", c.namesrv, credentials=key, consume_from="first") as pc:   # SUB is kept
        pc.subscribe("Keys")
        got = wait_for(lambda: [m for m in pc.poll(0.3) if m.body == b"gina's"], 20, "gina to read with SUB")
    assert got
    acl_cli(c, "revoke", "gina", "--resource", "topic:Keys")   # no --actions: the whole rule
    broker = next(s for s in c.services if s.role == "broker").addr
    t = Transport("gina", credentials=read_credentials(key))
    try:
        env = t.call(broker, rq.PullMessage(topic="Keys", queue_id=0, offset=0, group="gina-cg", max_msgs=32),
                     timeout=5, ok=tuple(ResponseCode))
    finally:
        t.close()
    assert env.code == ResponseCode.NO_PERMISSION and "SUB" in env.remark and "topic:Keys" in env.remark, env.remark
    assert not [r for r in acl_cli(c, "list").splitlines() if "gina" in r and "topic:Keys" in r]
