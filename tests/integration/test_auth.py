"""Auth on (CURVE + ACL), real processes: what each user may do.

A cluster started with an auth dir (`quiver auth init`): users get exactly what
the ACL grants, deny wins, a deleted user's open connection is refused at its
next request, and no user key can send a code reserved to a service role
(broker registration, HA, filter registration).
No key and an unknown key, and the table over every request code at every
service: test_auth_table.py. Key rotation and revoke: test_auth_keys.py.
"""

import time

import pytest

from quiver import Admin, Message, Producer, PullConsumer
from quiver.errors import NoPermissionError, QuiverError
from quiver.tools.local import LocalCluster
from quiver.wire import requests as rq
from quiver.wire.codes import RequestCode, ResponseCode
from quiver.wire.curve import Credentials, init_auth_dir
from quiver.wire.transport import Transport

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    root = tmp_path_factory.mktemp("secure")
    auth = str(root / "auth")
    admin_creds = init_auth_dir(auth)
    c = LocalCluster(str(root / "cluster"), auth_dir=auth)
    try:
        c.add_namesrv(None)
        c.wait()
        c.add_broker(None, None, "--auto-create-topics")
        c.wait()
        c.wait_registered(1)
        admin = Admin(c.namesrv, credentials=admin_creds)
        admin.start()
        admin.create_topic("Orders", queues=2)
        admin.create_topic("Payments", queues=2)
        yield c, admin, admin_creds
        admin.shutdown()
    finally:
        for svc in c.services:
            svc.kill()


def _user(admin, name, *grants, super_user=False) -> Credentials:
    creds = admin.acl_add_user(name, super_user=super_user)
    for resource, actions in grants:
        admin.acl_grant(name, resource, actions)
    return creds


def _producer(c, creds):
    p = Producer("pg", c.namesrv, credentials=creds, retries=0)
    p.start()
    return p


def test_user_gets_what_is_granted_and_nothing_else(secure):
    c, admin, _ = secure
    bob = _user(admin, "bob", ("topic:Orders", ["PUB"]))
    p = _producer(c, bob)
    try:
        assert p.send(Message("Orders", b"ok")).status.name == "SEND_OK"
        with pytest.raises(NoPermissionError, match=r"lacks \S*PUB\S* on topic:Payments"):
            p.send(Message("Payments", b"no"))
    finally:
        p.shutdown()
    cons = PullConsumer("bob-cg", c.namesrv, credentials=bob, consume_from="first")
    cons.subscribe("Orders")
    cons.start()
    try:  # no SUB yet: the consumer's pulls are refused, it receives nothing
        assert cons.poll(timeout=1.5) == []
    finally:
        cons.shutdown()
    admin.acl_grant("bob", "topic:Orders", ["SUB"])
    admin.acl_grant("bob", "group:bob-cg", ["SUB"])
    cons = PullConsumer("bob-cg", c.namesrv, credentials=bob, consume_from="first")
    cons.subscribe("Orders")
    cons.start()
    try:
        got = []
        for _ in range(20):
            got += cons.poll(timeout=0.5)
            if any(m.body == b"ok" for m in got):
                break
        assert any(m.body == b"ok" for m in got)
    finally:
        cons.shutdown()


def test_prefix_rules_and_deny_wins(secure):
    c, admin, _ = secure
    carol = _user(admin, "carol", ("topic:*", ["PUB"]))
    admin.acl_grant("carol", "topic:Payments", ["PUB"], deny=True)
    p = _producer(c, carol)
    try:
        assert p.send(Message("Orders", b"x")).status.name == "SEND_OK"
        with pytest.raises(NoPermissionError):
            p.send(Message("Payments", b"x"))
    finally:
        p.shutdown()


def test_a_deleted_user_is_refused_on_its_open_connection(secure):
    c, admin, _ = secure
    dave = _user(admin, "dave", ("topic:Orders", ["PUB"]))
    p = _producer(c, dave)
    try:
        assert p.send(Message("Orders", b"1")).status.name == "SEND_OK"
        admin.acl_delete_user("dave")
        with pytest.raises(QuiverError, match="no longer a user's|refused"):
            p.send(Message("Orders", b"2"))
    finally:
        p.shutdown()


def test_users_added_a_moment_ago_are_served_at_once_by_a_follower_service(secure):
    """The name server follows the brokers' ACL: it fetches it during a new key's handshake, and
    a request refused because two users came within its fetch interval is retried (on the IO
    thread, as a blocking call does on its own socket) until the key is known."""
    c, admin, _ = secure
    transports = []
    try:
        for i in range(3):   # each added after the previous one's fetch: the later ones within its interval
            t = Transport(f"newcomer-{i}", credentials=_user(admin, f"newcomer-{i}", ("topic:Orders", ["PUB"])))
            transports.append(t)
            assert t.call_future(c.namesrv, rq.GetRouteInfo(topic="Orders"), timeout=5).result(6).code == 0
    finally:
        for t in transports:
            t.close()


def test_a_grant_made_a_moment_ago_is_served_at_once_by_a_follower_service(secure):
    """The name server knows ida (it refused her) but not yet her grant: the request it would
    refuse waits for one fresh fetch of the ACL and is checked again, instead of being refused
    until the next periodic fetch (every 3 s)."""
    c, admin, _ = secure
    t = Transport("ida", credentials=_user(admin, "ida"))
    try:
        route = rq.GetRouteInfo(topic="Orders")
        assert t.call(c.namesrv, route, timeout=5, ok=tuple(ResponseCode)).code == ResponseCode.NO_PERMISSION
        time.sleep(0.6)   # past the half second in which a follower starts no second re-check fetch
        admin.acl_grant("ida", "topic:Orders", ["PUB"])
        env = t.call(c.namesrv, route, timeout=5, ok=tuple(ResponseCode))
        assert env.code == ResponseCode.SUCCESS, env.remark
    finally:
        t.close()


@pytest.mark.parametrize("req", [
    rq.RegisterBroker(cluster="DefaultCluster", broker_name="broker-a", broker_addr="10.9.9.9:10911", broker_id=0,
                      data_version=rq.DataVersion(ts=2 ** 40, counter=2 ** 30)),
    rq.UnregisterBroker(cluster="DefaultCluster", broker_name="broker-a", broker_addr="127.0.0.1:1"),
])
def test_no_user_key_registers_a_broker_not_even_a_super_user(secure, req):
    c, admin, admin_creds = secure
    t = Transport("hijack", credentials=admin_creds)
    try:
        env = t.call(c.namesrv, req, ok=tuple(ResponseCode), timeout=3)
        assert env.code == ResponseCode.NO_PERMISSION, env.remark
        assert "only a Quiver service" in env.remark
    finally:
        t.close()
    route = admin.topic_route("Orders")
    assert all("10.9.9.9" not in str(b) for b in route.get("brokers", []))


def test_service_only_codes_refused_to_users_on_the_broker(secure):
    c, admin, admin_creds = secure
    broker = next(s for s in c.services if s.role == "broker")
    t = Transport("ha-thief", credentials=admin_creds)
    try:
        for req in (rq.HaSyncMetadata(), rq.RegisterFilterServer(addr="127.0.0.1:1"), rq.ScheduleInit(),
                    rq.TransactionCheck(entries=[[0, 0, "d"]])):
            env = t.call(broker.addr, req, ok=tuple(ResponseCode), timeout=3)
            assert env.code == ResponseCode.NO_PERMISSION, (type(req).__name__, env.remark)
    finally:
        t.close()


def test_acl_admin_needs_a_super_user(secure):
    c, admin, _ = secure
    erin = _user(admin, "erin", ("cluster", ["ALL"]))
    a2 = Admin(c.namesrv, credentials=erin)
    a2.start()
    try:
        with pytest.raises(NoPermissionError, match="not a SUPER user"):
            a2.acl_grant("erin", "topic:*", ["ALL"])
    finally:
        a2.shutdown()
    listing = admin.acl_list()
    (acl,) = listing.values()
    assert {"admin", "erin"} <= {u[0] for u in acl["users"]}


def _send_and_pull_through(relay_addr: str, creds, marker: bytes) -> None:
    t = Transport("capture", credentials=creds)
    try:
        t.call(relay_addr, rq.SendMessage(topic="Orders", queue_id=0, metas=([0], [""])), bodies=[marker], timeout=5)
        env = t.call(relay_addr, rq.PullMessage(topic="Orders", queue_id=0, offset=0, max_msgs=1024), timeout=5,
                     ok=tuple(ResponseCode))
        assert env.code == ResponseCode.SUCCESS, env.remark
    finally:
        t.close()


def test_with_auth_on_no_body_byte_crosses_the_wire_in_clear(secure, make_cluster):
    from support.tcp_relay import Relay
    c, admin, admin_creds = secure
    broker = next(s for s in c.services if s.role == "broker")
    marker = b"QUIVER-SECRET-BODY-7f3a9c"
    relay = Relay(broker.addr)
    try:
        _send_and_pull_through(relay.addr, admin_creds, marker)
        wire = relay.captured()
    finally:
        relay.close()
    assert len(wire) > 2 * len(marker)   # the send and the pull went through the relay
    assert marker not in wire and b"Orders" not in wire
    plain = make_cluster()               # the same capture with auth off finds both
    plain_admin = Admin(plain.namesrv)
    plain_admin.start()
    plain_admin.create_topic("Orders", queues=1)
    plain_admin.shutdown()
    relay = Relay(next(s for s in plain.services if s.role == "broker").addr)
    try:
        _send_and_pull_through(relay.addr, None, marker)
        wire = relay.captured()
    finally:
        relay.close()
    assert wire.count(marker) >= 2 and b"Orders" in wire


def test_cli_adds_a_user_grants_and_the_user_sends(secure, tmp_path):
    import subprocess
    import sys
    c, admin, _ = secure
    base = [sys.executable, "-m", "quiver.tools.cli", "--namesrv", c.namesrv,
            "--credentials", f"{c.auth_dir}/admin.key", "acl"]
    key = str(tmp_path / "frank.key")
    for args in (["user", "add", "frank", "--out", key],
                 ["grant", "frank", "--resource", "topic:Orders", "--actions", "PUB"]):
        out = subprocess.run(base + args, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr + out.stdout
    p = _producer(c, key)
    try:
        assert p.send(Message("Orders", b"from frank")).status.name == "SEND_OK"
    finally:
        p.shutdown()
    listing = subprocess.run(base + ["list"], capture_output=True, text=True, timeout=60).stdout
    assert "frank" in listing and "topic:Orders" in listing


def test_ha_with_auth_on_replicates_the_data_and_the_acl_and_refuses_user_keys(tmp_path):
    """SYNC_MASTER over CURVE: every SEND_OK is on the slave (its acks came through the secured
    HA socket), the slave takes the master's users, and a user key — even a SUPER one — cannot
    open an HA stream (the CommitLog cannot be copied)."""
    import zmq
    from support.ha import HA_FAST, status, wait_for, wait_slave_connected
    from quiver.wire import protocol
    from quiver.wire.curve import secure_client
    from quiver.wire.transport import next_request_id
    auth = str(tmp_path / "auth")
    admin_creds = init_auth_dir(auth)
    c = LocalCluster(str(tmp_path / "ha"), auth_dir=auth)
    t = Transport("ha-test", credentials=admin_creds)
    try:
        c.add_namesrv()
        c.wait()
        ha_addr = c._addr(None)
        m = c.add_broker(None, "bk", "--role", "SYNC_MASTER", "--ha-listen", ha_addr, *HA_FAST)
        s = c.add_slave(m, *HA_FAST)
        c.wait()
        c.wait_registered(2)
        admin = Admin(c.namesrv, credentials=admin_creds)
        admin.start()
        admin.create_topic("HaSecure", queues=2)
        grace = _user(admin, "grace", ("topic:HaSecure", ["PUB"]))
        wait_slave_connected(t, m)
        p = _producer(c, grace)
        try:
            results = [p.send(Message("HaSecure", f"m{i}".encode())) for i in range(50)]
        finally:
            p.shutdown()
        assert {r.status.name for r in results} == {"SEND_OK"}   # SYNC_MASTER: the slave acked each
        wait_for(lambda: "grace" in {u[0] for u in t.call(s.addr, rq.AclSnapshot()).ext.get("users", [])}, 20,
                 "the master's ACL to reach the slave")
        before = status(t, m)["ha"]["refused_reports"]
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        secure_client(sock, admin_creds)
        sock.connect(f"tcp://{ha_addr}")
        try:
            report = protocol.request(RequestCode.HA_REPORT, next_request_id(),
                                      rq.HaReport(offset=0, addr="127.0.0.1:1", broker_id=7).ext())
            sock.send_multipart(report)
            assert sock.poll(1500) == 0       # no CommitLog bytes for a user key
        finally:
            sock.close(0)
        wait_for(lambda: status(t, m)["ha"]["refused_reports"] > before, 10, "the refusal to be counted")
        admin.shutdown()
    finally:
        t.close()
        for svc in c.services:
            svc.kill()
