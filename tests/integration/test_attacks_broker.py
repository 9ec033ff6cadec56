"""Attacks on a secured broker through what it does later on a user's behalf (real processes, auth on).

- A confused deputy: properties only the broker writes (RETRY_TOPIC, REAL_TOPIC, DLQ_ORIGIN_TOPIC ...)
  name where a re-put writes with a service's or an administrator's rights. A NORMAL user who set
  RETRY_TOPIC=Pay on her own message and dead-lettered it had an administrator's DLQ resend write
  it into Pay, a topic she may not publish to.
- A long poll held from before its user was deleted (or lost SUB) returned a message stored after.
- A key file or auth dir others can read was used without a word.

Each attack is followed by the same action done rightfully, which succeeds. The attacker, mallory,
is a NORMAL user with PUB and SUB on her topic and her groups only.
"""

import os
import threading
import time

import pytest

from quiver import Message, Producer
from quiver.wire.properties import BROKER_WRITTEN
from quiver.errors import ClientError, QuiverError
from quiver.tools.local import LocalCluster
from quiver.wire import record
from quiver.wire import replies
from quiver.wire import requests as rq
from quiver.wire.codes import ResponseCode
from quiver.wire.curve import AuthDir, init_auth_dir, read_credentials, write_credentials
from quiver.wire.transport import Transport

from support.secure import secure_cluster
from support.waiting import wait_for

pytestmark = pytest.mark.timeout(300)

ALL_CODES = tuple(ResponseCode)


class Cluster:
    def __init__(self, c, admin, admin_creds, broker):
        self.c, self.admin, self.admin_creds, self.broker = c, admin, admin_creds, broker
        self.mallory = admin.acl_add_user("mallory")
        admin.acl_grant("mallory", "topic:Mallory", ["PUB", "SUB"])
        admin.acl_grant("mallory", "group:mallory-*", ["PUB", "SUB"])
        self.t = Transport("mallory", credentials=self.mallory)
        self.admin_t = Transport("admin", credentials=admin_creds)

    def call(self, req, bodies=(), t=None, timeout=5.0):
        return (t or self.t).call(self.broker.addr, req, bodies=bodies, timeout=timeout, ok=ALL_CODES)

    def send_raw(self, topic, props, t=None):
        props = f"UNIQ_KEY\x01ID{time.monotonic_ns()}\x02" + props
        return self.call(rq.SendMessage(topic=topic, queue_id=0, metas=([0], [props])), [b"from mallory"], t=t)

    def bodies(self, topic) -> list[bytes]:
        """Every body in queue 0 of `topic`, read with the SUPER key."""
        env = self.call(rq.PullMessage(topic=topic, queue_id=0, offset=0, group="audit", max_msgs=1024),
                        t=self.admin_t)
        if env.code != ResponseCode.SUCCESS:
            return []
        return [r.body for b in env.bodies for r in record.decode_many(b)]

    def dlq(self, group, n):
        """The `n` letters of `%DLQ%<group>`, once its route reached the name server: the broker
        registers a topic it creates on a send-back asynchronously, after replying."""
        return wait_for(lambda: (lambda d: d if len(d) >= n else None)(self.admin.dlq_messages(group)),
                        60, f"{n} letters in %DLQ%{group}")

    def dead_letter(self, group, env, **kw):
        """Send a stored message (its send reply `env`) straight to `%DLQ%<group>` as mallory."""
        phys = replies.SendReply.decode(env.ext).phys_offsets[0]
        back = rq.ConsumerSendMsgBack(group=group, offset=phys, delay_level=-1, **kw)
        return self.call(back)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with secure_cluster(tmp_path_factory.mktemp("attacks-broker"), topics=("Pay", "Mallory", "Held", "HeldPop"),
                        brokers=lambda c: [c.add_broker(None, "broker-a")]) as (c, admin, admin_creds):
        yield Cluster(c, admin, admin_creds, next(s for s in c.services if s.role == "broker"))


# ---- the DLQ as a confused deputy --------------------------------------------------------------------


def test_retry_topic_set_by_a_client_does_not_steer_the_admins_resend(cluster):
    pay_before = cluster.bodies("Pay")
    env = cluster.send_raw("Mallory", "RETRY_TOPIC\x01Pay\x02")
    if env.code == ResponseCode.SUCCESS:   # the old broker stored it: play the attack out
        cluster.dead_letter("mallory-a", env)
        cluster.dlq("mallory-a", 1)
        cluster.admin.resend_dlq("mallory-a")
    assert env.code == ResponseCode.MESSAGE_ILLEGAL, (env.code, env.remark)
    assert "RETRY_TOPIC" in env.remark and "written by the broker" in env.remark, env.remark
    assert cluster.bodies("Pay") == pay_before
    # rightfully: her own message dead-lettered and resent goes back to her own topic
    ok = cluster.send_raw("Mallory", "")
    assert ok.code == ResponseCode.SUCCESS, ok.remark
    assert cluster.dead_letter("mallory-ok", ok).code == ResponseCode.SUCCESS
    dead = cluster.dlq("mallory-ok", 1)
    assert [m.properties["DLQ_ORIGIN_TOPIC"] for m in dead] == ["Mallory"]
    before = len(cluster.bodies("Mallory"))
    assert [r.topic for r in cluster.admin.resend_dlq("mallory-ok")] == ["Mallory"]
    assert len(cluster.bodies("Mallory")) == before + 1 and cluster.bodies("Pay") == pay_before


def test_origin_topic_field_of_a_send_back_does_not_steer_the_resend(cluster):
    """A message she put straight into her group's retry topic, sent back naming Pay as its origin:
    the broker records the topic it knows (the retry topic), not what the request says."""
    pay_before = cluster.bodies("Pay")
    env = cluster.send_raw("%RETRY%mallory-b", "")
    assert env.code == ResponseCode.SUCCESS, env.remark   # her group's own retry topic: allowed
    assert cluster.dead_letter("mallory-b", env, origin_topic="Pay").code == ResponseCode.SUCCESS
    dead = cluster.dlq("mallory-b", 1)
    sent = cluster.admin.resend_dlq("mallory-b")
    assert cluster.bodies("Pay") == pay_before
    assert [m.properties["DLQ_ORIGIN_TOPIC"] for m in dead] == ["%RETRY%mallory-b"]
    assert [r.topic for r in sent] == ["%RETRY%mallory-b"]


def test_a_letter_sent_straight_into_the_dlq_is_not_resent_and_stops_nothing(cluster):
    """She may send into her group's %DLQ% (PUB on the group), but not with an origin: such a letter
    has none the broker recorded, so a bulk resend skips it and resends the others."""
    env = cluster.send_raw("%DLQ%mallory-c", "DLQ_ORIGIN_TOPIC\x01Pay\x02")
    assert env.code == ResponseCode.MESSAGE_ILLEGAL and "DLQ_ORIGIN_TOPIC" in env.remark, env.remark
    assert cluster.send_raw("%DLQ%mallory-c", "").code == ResponseCode.SUCCESS
    ok = cluster.send_raw("Mallory", "")
    assert cluster.dead_letter("mallory-c", ok).code == ResponseCode.SUCCESS
    assert len(cluster.dlq("mallory-c", 2)) == 2
    assert [r.topic for r in cluster.admin.resend_dlq("mallory-c")] == ["Mallory"]


@pytest.mark.parametrize("name", BROKER_WRITTEN)
def test_properties_only_the_broker_writes_are_refused_at_the_door(cluster, name):
    """REAL_TOPIC on a delayed message, TRAN_* on a half ...: each would tell a scheduler re-put, a
    commit, a retry or a resend where to write or what it stands for."""
    value = {"REAL_TOPIC": "Pay", "RETRY_TOPIC": "Pay", "DLQ_ORIGIN_TOPIC": "Pay"}.get(name, "1")
    env = cluster.send_raw("Mallory", f"DELAY\x011\x02{name}\x01{value}\x02")
    assert env.code == ResponseCode.MESSAGE_ILLEGAL and name in env.remark, (env.code, env.remark)
    env = cluster.send_raw("Mallory", f"{name}\x01{value}\x02", t=cluster.admin_t)   # SUPER too
    assert env.code == ResponseCode.MESSAGE_ILLEGAL and name in env.remark, (env.code, env.remark)
    # the same send without it is stored (a delayed one parked for the scheduler)
    assert cluster.send_raw("Mallory", "DELAY\x011\x02").code == ResponseCode.SUCCESS
    with Producer("mallory-pg", cluster.c.namesrv, credentials=cluster.mallory, auto_batch=False) as p:
        assert p.send(Message("Mallory", b"plain", properties={"colour": "red"})).topic == "Mallory"


# ---- held pulls and pops ---------------------------------------------------------------------------


def _held_then_stored(cluster, topic, users, request, counter, take_away, body):
    """Two users hold `request(name, transport)` on `topic`; `take_away(first user)`; `body` is
    stored; returns both answers."""
    admin = cluster.admin
    transports = {}
    for name in users:
        creds = admin.acl_add_user(name)
        admin.acl_grant(name, f"topic:{topic}", ["SUB"])
        admin.acl_grant(name, f"group:{topic}-*", ["SUB"])
        transports[name] = Transport(name, credentials=creds)
    before = admin.status(cluster.broker.addr)["counters"].get(counter, 0)
    out, threads = {}, []
    for name, t in transports.items():
        def run(name=name, t=t):
            out[name] = cluster.call(request(name), t=t, timeout=40)
        threads.append(threading.Thread(target=run, daemon=True))
        threads[-1].start()
    wait_for(lambda: admin.status(cluster.broker.addr)["counters"].get(counter, 0) >= before + len(users), 30,
             f"{len(users)} more {counter}")
    take_away(users[0])
    with Producer("held-pg", cluster.c.namesrv, credentials=cluster.admin_creds, auto_batch=False) as p:
        p.send(Message(topic, body))
    for th in threads:
        th.join(40)
    return [out[name] for name in users]


def _records(env) -> list[bytes]:
    return [r.body for b in env.bodies for r in record.decode_many(b)]


def test_a_held_pull_of_a_deleted_user_returns_nothing_stored_after(cluster):
    eve, frank = _held_then_stored(
        cluster, "Held", ["eve", "frank"], lambda name: rq.PullMessage(
            topic="Held", queue_id=0, offset=0, group=f"Held-{name}", max_msgs=32, suspend_ms=20_000),
        "pulls_held", cluster.admin.acl_delete_user, b"stored after the deletion")
    assert eve.code == ResponseCode.NO_PERMISSION and not eve.bodies, (eve.code, eve.remark)
    assert "no longer a user's" in eve.remark
    # rightfully: the user still there gets the message the moment it is stored
    assert frank.code == ResponseCode.SUCCESS and _records(frank) == [b"stored after the deletion"], frank.remark


def test_a_held_pop_of_a_user_who_lost_sub_returns_nothing_stored_after(cluster):
    erin, grace = _held_then_stored(
        cluster, "HeldPop", ["erin", "grace"], lambda name: rq.PopMessage(
            group=f"HeldPop-{name}", topic="HeldPop", max_msgs=8, poll_ms=20_000, consume_from="first"),
        "pops_held", lambda user: cluster.admin.acl_revoke(user, "topic:HeldPop", ["SUB"]), b"stored after the revoke")
    assert erin.code == ResponseCode.NO_PERMISSION and not erin.bodies, (erin.code, erin.remark)
    assert "SUB" in erin.remark and "topic:HeldPop" in erin.remark
    assert grace.code == ResponseCode.SUCCESS and _records(grace) == [b"stored after the revoke"], grace.remark


def test_a_held_sql92_pull_through_the_filter_of_a_deleted_user_returns_nothing(cluster):
    """The filter forwards a held SQL92 pull to the broker with its own service key: it checks the
    consumer against its copy of the ACL (fetched every 3 s) when the messages come back."""
    c, admin = cluster.c, cluster.admin
    admin.create_topic("Sql", queues=1)
    flt = c.add_service("filter", "quiver_filter", "--register-interval-ms", "500")
    c.wait()
    wait_for(lambda: admin.status(flt.addr).get("registered"), 30, "the filter to attach to the broker")

    def pull(name, suspend_ms=20_000):
        return rq.PullMessage(topic="Sql", queue_id=0, offset=0, group=f"Sql-{name}", max_msgs=32,
                              suspend_ms=suspend_ms, expression="colour = 'red'", expression_type="SQL92",
                              broker_addr=cluster.broker.addr)

    def refused_now(t) -> bool:   # the filter's copy of the ACL knows the deletion
        try:
            env = t.call(flt.addr, pull("fiona", 0), timeout=2, ok=ALL_CODES)
        except QuiverError:       # the handshake of a key it no longer knows
            return True
        return env.code == ResponseCode.NO_PERMISSION

    def delete(name):
        probe = Transport("probe", credentials=creds["fiona"])
        admin.acl_delete_user(name)
        try:
            wait_for(lambda: refused_now(probe), 30, "the filter to learn the deletion")
        finally:
            probe.close()

    creds = {}
    transports = {}
    for name in ("fiona", "gus"):
        creds[name] = admin.acl_add_user(name)
        admin.acl_grant(name, "topic:Sql", ["SUB"])
        admin.acl_grant(name, "group:Sql-*", ["SUB"])
        transports[name] = Transport(name, credentials=creds[name])
    before = admin.status(cluster.broker.addr)["counters"].get("pulls_held", 0)
    out, threads = {}, []
    for name, t in transports.items():
        def run(name=name, t=t):
            out[name] = t.call(flt.addr, pull(name), timeout=40, ok=ALL_CODES)
        threads.append(threading.Thread(target=run, daemon=True))
        threads[-1].start()
    wait_for(lambda: admin.status(cluster.broker.addr)["counters"].get("pulls_held", 0) >= before + 2, 30,
             "the filter's two held pulls")
    delete("fiona")
    with Producer("held-pg", c.namesrv, credentials=cluster.admin_creds, auto_batch=False) as p:
        p.send(Message("Sql", b"red, after the deletion", properties={"colour": "red"}))
    for th in threads:
        th.join(40)
    fiona, gus = out["fiona"], out["gus"]
    assert fiona.code == ResponseCode.NO_PERMISSION and not fiona.bodies, (fiona.code, fiona.remark)
    assert gus.code == ResponseCode.SUCCESS and _records(gus) == [b"red, after the deletion"], gus.remark


# ---- key files and the auth dir others can read ----------------------------------------------------


def test_a_key_file_others_can_read_is_refused(cluster, tmp_path):
    path = str(tmp_path / "mallory.key")
    write_credentials(path, cluster.mallory)
    assert read_credentials(path).user == "mallory"          # 0600: used
    os.chmod(path, 0o644)
    with pytest.raises(ClientError, match=r"mode 0644\): run chmod 600 " + str(path)):
        read_credentials(path)
    with pytest.raises(ClientError, match="chmod 600"):
        Producer("mallory-pg", cluster.c.namesrv, credentials=path)
    os.chmod(path, 0o600)
    with Producer("mallory-pg", cluster.c.namesrv, credentials=path, auto_batch=False) as p:
        assert p.send(Message("Mallory", b"with a private key file")).topic == "Mallory"


def test_a_service_refuses_an_auth_dir_or_server_key_others_can_read(cluster, tmp_path):
    auth = str(tmp_path / "auth")
    init_auth_dir(auth)
    assert os.stat(auth).st_mode & 0o777 == 0o700
    AuthDir(auth)                                              # as made: used
    for path, loose, fix in ((auth, 0o755, "chmod 700"), (os.path.join(auth, "server.key"), 0o640, "chmod 600"),
                             (os.path.join(auth, "services", "broker.key"), 0o604, "chmod 600")):
        tight = os.stat(path).st_mode & 0o777
        os.chmod(path, loose)
        with pytest.raises(ClientError, match=f"{fix} {path}"):
            AuthDir(auth)
        os.chmod(path, tight)
    # a real service started on a loose auth dir exits naming the file and the fix
    os.chmod(os.path.join(auth, "server.key"), 0o644)
    c = LocalCluster(str(tmp_path / "loose"), auth_dir=auth)
    svc = c.add_namesrv()
    try:
        wait_for(lambda: svc.proc.poll() is not None, 30, "the name server to refuse its auth dir")
        assert svc.proc.returncode != 0
        assert "chmod 600" in svc.log_tail() and "server.key" in svc.log_tail()
    finally:
        svc.kill()
