"""The attacks that owned an auth-off cluster, each tried again with auth on (real processes).

An unauthenticated client once succeeded at 15 of 16 of these. With auth on,
each is refused: NO_PERMISSION with a remark naming the missing action and
resource (or, for a code only a service may send, naming the service role),
and nothing changes. Each test then sends the same request as a user who has
exactly that right (or shows the real service doing it) and sees it succeed,
so a refusal for some other reason cannot pass for authorization.

The attacker, mallory, is a NORMAL user with rights on her own topic and group
only. A client with no key or an unknown key gets no connection at all
(tests/integration/test_auth_table.py).
"""

import time

import pytest
import zmq

from quiver import Message, Producer, PullConsumer
from quiver.client.message import TransactionState
from quiver.client.transaction_producer import TransactionProducer
from quiver.wire import protocol, record
from quiver.wire import requests as rq
from quiver.wire.codes import RequestCode, ResponseCode
from quiver.wire.curve import secure_client
from quiver.wire.names import HALF_TOPIC
from quiver.wire.transport import Transport, next_request_id

from support.ha import HA_FAST, status, wait_for, wait_slave_connected
from support.secure import secure_cluster

pytestmark = pytest.mark.timeout(300)

LEVELS = "1s 2s 3s"
ALL_CODES = tuple(ResponseCode)


class Attack:
    """The secured cluster and the handles every attack uses."""

    def __init__(self, c, admin, admin_creds, master, slave, scheduler, ha_addr):
        self.c, self.admin, self.admin_creds = c, admin, admin_creds
        self.master, self.slave, self.scheduler, self.ha_addr = master, slave, scheduler, ha_addr
        self.mallory = admin.acl_add_user("mallory")
        admin.acl_grant("mallory", "topic:Mallory", ["PUB", "SUB"])
        admin.acl_grant("mallory", "group:mallory-cg", ["SUB"])
        self.t = Transport("mallory", credentials=self.mallory)
        self._users = 0

    def call(self, addr, req, bodies=(), creds=None):
        t = self.t if creds is None else Transport("rightful", credentials=creds)
        try:
            return t.call(addr, req, bodies=bodies, timeout=5, ok=ALL_CODES)
        finally:
            if t is not self.t:
                t.close()

    def rightful(self, *grants):
        """A new NORMAL user with exactly `grants` ((resource, [actions]) pairs)."""
        self._users += 1
        name = f"rightful-{self._users}"
        creds = self.admin.acl_add_user(name)
        for resource, actions in grants:
            self.admin.acl_grant(name, resource, actions)
        return creds

    def send(self, topic, body, **kw):
        with Producer("shop-pg", self.c.namesrv, credentials=self.admin_creds, auto_batch=False) as p:
            return p.send(Message(topic, body, **kw))


@pytest.fixture(scope="module")
def attack(tmp_path_factory):
    def brokers(c):
        master = c.add_master(None, "broker-a", "ASYNC_MASTER", "--delay-levels", LEVELS, *HA_FAST)
        return [master, c.add_slave(master, "--delay-levels", LEVELS, *HA_FAST)]

    with secure_cluster(tmp_path_factory.mktemp("attacks"), [("scheduler", "quiver_scheduler")],
                        topics=("Orders", "Mallory"), brokers=brokers) as (c, admin, admin_creds):
        master, slave = (s for s in c.services if s.role == "broker")
        scheduler = next(s for s in c.services if s.role == "scheduler")
        wait_for(lambda: len(admin.status(scheduler.addr)["owned"]) == len(LEVELS.split()) + 1, 30,
                 "the scheduler to own every delay queue")
        yield Attack(c, admin, admin_creds, master, slave, scheduler, master.args[master.args.index("--ha-listen") + 1])


def refused(env, action: str, resource: str) -> None:
    assert env.code == ResponseCode.NO_PERMISSION, (env.code, env.remark)
    assert action in env.remark and resource in env.remark, env.remark


def refused_to_users(env, role: str) -> None:
    assert env.code == ResponseCode.NO_PERMISSION, (env.code, env.remark)
    assert "no user key can" in env.remark and role in env.remark, env.remark


def pull(topic, offset=0, group="mallory-cg"):
    return rq.PullMessage(topic=topic, queue_id=0, offset=offset, group=group, max_msgs=32)


def bodies_of(env) -> list[bytes]:
    return [r.body for b in env.bodies for r in record.decode_many(b)]


# ---- reading what is not yours ------------------------------------------------------------------


def test_1_read_another_teams_topic(attack):
    attack.send("Orders", b"secret order")
    refused(attack.call(attack.master.addr, pull("Orders")), "SUB", "topic:Orders")
    refused(attack.call(attack.master.addr, rq.QueryMessage(topic="Orders", key="k")), "SUB", "topic:Orders")
    ok = attack.rightful(("topic:Orders", ["SUB"]), ("group:billing", ["SUB"]))
    env = attack.call(attack.master.addr, pull("Orders", group="billing"), creds=ok)
    assert env.code == ResponseCode.SUCCESS and b"secret order" in bodies_of(env)


def test_2_read_uncommitted_half_messages(attack):
    with TransactionProducer("shop-tx", attack.c.namesrv, credentials=attack.admin_creds) as tp:
        tp.send_in_transaction(Message("Orders", b"half, not committed"), lambda m, a: TransactionState.UNKNOWN)
    refused(attack.call(attack.master.addr, pull(HALF_TOPIC)), "SUB", f"topic:{HALF_TOPIC}")
    # system topics are a SUPER user's only: even a NORMAL user granted SUB on one reads nothing
    granted = attack.rightful((f"topic:{HALF_TOPIC}", ["SUB"]), ("group:audit", ["SUB"]))
    refused(attack.call(attack.master.addr, pull(HALF_TOPIC, group="audit"), creds=granted), "SUB",
            f"topic:{HALF_TOPIC}")
    env = attack.call(attack.master.addr, pull(HALF_TOPIC, group="audit"), creds=attack.admin_creds)
    assert env.code == ResponseCode.SUCCESS and b"half, not committed" in bodies_of(env)


def test_3_view_another_teams_message_by_its_offset(attack):
    sent = attack.send("Orders", b"viewed by offset")
    req = rq.ViewMessage(offset=sent.commit_log_offset)
    refused(attack.call(attack.master.addr, req), "SUB", "topic:Orders")
    ok = attack.rightful(("topic:Orders", ["SUB"]))
    env = attack.call(attack.master.addr, req, creds=ok)
    assert env.code == ResponseCode.SUCCESS and bodies_of(env) == [b"viewed by offset"]


# ---- another group's offsets ----------------------------------------------------------------------


def _committed(attack, group) -> int:
    env = attack.call(attack.master.addr, rq.QueryConsumerOffset(group=group, topic="Orders", queue_id=0),
                      creds=attack.admin_creds)
    return rq.OffsetReply.decode(env.ext).offset if env.code == ResponseCode.SUCCESS else -1


def test_4_rewind_another_groups_offset(attack):
    ok = attack.rightful(("topic:Orders", ["SUB"]), ("group:billing-4", ["SUB"]))
    attack.send("Orders", b"x")
    set_to = rq.UpdateConsumerOffset(group="billing-4", topic="Orders", queue_id=0, offset=1)
    assert attack.call(attack.master.addr, set_to, creds=ok).code == ResponseCode.SUCCESS
    rewind = rq.UpdateConsumerOffset(group="billing-4", topic="Orders", queue_id=0, offset=0)
    refused(attack.call(attack.master.addr, rewind), "SUB", "group:billing-4")
    assert _committed(attack, "billing-4") == 1
    assert attack.call(attack.master.addr, rewind, creds=ok).code == ResponseCode.SUCCESS
    assert _committed(attack, "billing-4") == 0


def test_5_skip_another_groups_messages_by_a_reset(attack):
    skip = rq.ResetOffset(group="billing-5", topic="Orders", timestamp=int(time.time() * 1000) + 86_400_000)
    refused(attack.call(attack.master.addr, skip), "UPDATE", "group:billing-5")
    ok = attack.rightful(("topic:Orders", ["SUB"]), ("group:billing-5", ["UPDATE"]))
    assert attack.call(attack.master.addr, skip, creds=ok).code == ResponseCode.SUCCESS


# ---- another team's topic ----------------------------------------------------------------------------


def test_6_disable_another_teams_topic(attack):
    attack.admin.create_topic("Disable6", queues=1)
    off = rq.CreateTopic(topic="Disable6", read=1, perm=0)
    refused(attack.call(attack.master.addr, off), "UPDATE", "topic:Disable6")
    assert attack.send("Disable6", b"still writable").status.name == "SEND_OK"
    ok = attack.rightful(("topic:Disable6", ["UPDATE"]))
    assert attack.call(attack.master.addr, off, creds=ok).code == ResponseCode.SUCCESS


def test_7_delete_another_teams_topic(attack):
    attack.admin.create_topic("Delete7", queues=1)
    attack.send("Delete7", b"kept")
    refused(attack.call(attack.master.addr, rq.DeleteTopic(topic="Delete7")), "DELETE", "topic:Delete7")
    env = attack.call(attack.master.addr, pull("Delete7", group="d7"), creds=attack.admin_creds)
    assert bodies_of(env) == [b"kept"]
    ok = attack.rightful(("topic:Delete7", ["DELETE"]))
    assert attack.call(attack.master.addr, rq.DeleteTopic(topic="Delete7"), creds=ok).code == ResponseCode.SUCCESS


# ---- someone else's transaction ---------------------------------------------------------------------


def _half(attack, body: bytes):
    with TransactionProducer("shop-tx", attack.c.namesrv, credentials=attack.admin_creds) as tp:
        res = tp.send_in_transaction(Message("Orders", body), lambda m, a: TransactionState.UNKNOWN)
    return res


@pytest.mark.parametrize("state", [record.TX_COMMIT, record.TX_ROLLBACK], ids=["8_commit", "9_rollback"])
def test_8_9_end_someone_elses_transaction(attack, state):
    res = _half(attack, f"tx {state}".encode())
    end = rq.EndTransaction(group="shop-tx", entries=[[res.commit_log_offset, res.queue_offset, state,
                                                       res.transaction_id]])
    refused(attack.call(attack.master.addr, end), "PUB", "topic:Orders")
    still_open = attack.admin.open_transactions()["broker-a"]
    assert res.transaction_id in str(still_open), "the half is still open after the refused end"
    ok = attack.rightful(("topic:Orders", ["PUB"]))
    assert attack.call(attack.master.addr, end, creds=ok).code == ResponseCode.SUCCESS


# ---- another group's retry and dead-letter topics ---------------------------------------------------------


@pytest.mark.parametrize("prefix", ["%RETRY%", "%DLQ%"], ids=["10_retry", "11_dlq"])
def test_10_11_send_into_another_groups_retry_or_dlq(attack, prefix):
    topic = prefix + "billing"
    req = rq.SendMessage(topic=topic, queue_id=0, metas=([0], [""]))
    refused(attack.call(attack.master.addr, req, [b"poison"]), "PUB", "group:billing")
    ok = attack.rightful(("group:billing", ["PUB"]))
    assert attack.call(attack.master.addr, req, [b"fine"], creds=ok).code == ResponseCode.SUCCESS


def test_12_send_another_groups_message_back_to_its_retry(attack):
    sent = attack.send("Orders", b"fails on purpose")
    back = rq.ConsumerSendMsgBack(group="billing", offset=sent.commit_log_offset, delay_level=1)
    refused(attack.call(attack.master.addr, back), "SUB", "group:billing")
    ok = attack.rightful(("group:billing", ["SUB"]), ("topic:Orders", ["SUB"]))
    assert attack.call(attack.master.addr, back, creds=ok).code == ResponseCode.SUCCESS


# ---- the services' own channels ---------------------------------------------------------------------------


def test_13_stream_the_commitlog_off_the_ha_socket(attack):
    admin_t = Transport("ha-status", credentials=attack.admin_creds)
    try:
        wait_slave_connected(admin_t, attack.master)
        before = status(admin_t, attack.master)["ha"]["refused_reports"]
        for creds in (attack.mallory, attack.admin_creds):   # a SUPER user's key is no replica either
            sock = zmq.Context.instance().socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            secure_client(sock, creds)
            sock.connect(f"tcp://{attack.ha_addr}")
            try:
                sock.send_multipart(protocol.request(RequestCode.HA_REPORT, next_request_id(),
                                                     rq.HaReport(offset=0, addr="127.0.0.1:1", broker_id=7).ext()))
                assert sock.poll(1500) == 0, "no CommitLog byte for a user key"
            finally:
                sock.close(0)
        wait_for(lambda: status(admin_t, attack.master)["ha"]["refused_reports"] >= before + 2, 10,
                 "both refusals counted")
        # the real replica (role replica) streams: a message sent now reaches the slave
        sent = attack.send("Orders", b"replicated")
        wait_for(lambda: status(admin_t, attack.slave)["store"]["max_phys_offset"] > sent.commit_log_offset, 20,
                 "the slave to copy the new message")
    finally:
        admin_t.close()


def test_14_register_a_fake_filter_server(attack):
    fake = rq.RegisterFilterServer(addr="10.6.6.6:7777")
    refused_to_users(attack.call(attack.master.addr, fake), "filter")
    refused_to_users(attack.call(attack.master.addr, fake, creds=attack.admin_creds), "filter")
    assert "10.6.6.6" not in str(attack.admin.topic_route("Orders"))


def test_15_unregister_the_real_broker(attack):
    gone = rq.UnregisterBroker(cluster="DefaultCluster", broker_name="broker-a", broker_addr=attack.master.addr,
                               broker_id=0)
    refused_to_users(attack.call(attack.c.namesrv, gone), "broker")
    refused_to_users(attack.call(attack.c.namesrv, gone, creds=attack.admin_creds), "broker")
    route = attack.admin.topic_route("Orders")
    assert attack.master.addr in str(route), route    # the real broker (role broker) stays registered


def test_16_register_a_fake_broker_under_the_real_name(attack):
    hijack = rq.RegisterBroker(cluster="DefaultCluster", broker_name="broker-a", broker_addr="10.9.9.9:10911",
                               broker_id=0, data_version=rq.DataVersion(ts=2 ** 40, counter=2 ** 30),
                               topics={"Orders": rq.TopicConfig(read=1, write=1, perm=6)})
    refused_to_users(attack.call(attack.c.namesrv, hijack), "broker")
    refused_to_users(attack.call(attack.c.namesrv, hijack, creds=attack.admin_creds), "broker")
    assert "10.9.9.9" not in str(attack.admin.topic_route("Orders"))
    assert attack.send("Orders", b"stored for real").status.name == "SEND_OK"


def test_17_cancel_another_teams_delayed_message(attack):
    """SCHEDULE_CANCEL needs PUB on the topic it names, and cancels only a message of that topic."""
    mine = attack.send("Orders", b"must still arrive", delay_level=2)
    theirs = attack.send("Orders", b"cancelled by its owner", delay_level=2)
    refused(attack.call(attack.scheduler.addr, rq.ScheduleCancel(msg_id=mine.msg_id, topic="Orders")),
            "PUB", "topic:Orders")
    wrong_topic = attack.call(attack.scheduler.addr, rq.ScheduleCancel(msg_id=mine.msg_id, topic="Mallory"))
    assert wrong_topic.code == ResponseCode.SUCCESS
    assert rq.ScheduleCancelReply.decode(wrong_topic.ext).result != "cancelled"
    ok = attack.rightful(("topic:Orders", ["PUB"]), ("group:SCHEDULE_CONSUMER", ["GET"]))  # GET: to find schedulers
    with Producer("owner-pg", attack.c.namesrv, credentials=ok) as p:
        assert p.cancel_scheduled(theirs.msg_id, "Orders") is True
    c = PullConsumer("delay-check", attack.c.namesrv, credentials=attack.admin_creds, consume_from="first")
    c.subscribe("Orders")
    with c:
        got, deadline = [], time.monotonic() + 15
        while b"must still arrive" not in got and time.monotonic() < deadline:
            got += [m.body for m in c.poll(0.5)]
        time.sleep(1.0)
        got += [m.body for m in c.poll(0.5)]
    assert b"must still arrive" in got and b"cancelled by its owner" not in got


def test_18_a_grant_from_another_network_does_not_apply_here(attack):
    """Source CIDR: a rule for 10.0.0.0/8 gives a loopback connection nothing; 127.0.0.0/8 does."""
    creds = attack.rightful()
    name = f"rightful-{attack._users}"
    attack.admin.acl_grant(name, "topic:Orders", ["SUB"], source="10.0.0.0/8")
    attack.admin.acl_grant(name, "group:cidr", ["SUB"])
    refused(attack.call(attack.master.addr, pull("Orders", group="cidr"), creds=creds), "SUB", "topic:Orders")
    attack.admin.acl_grant(name, "topic:Orders", ["SUB"], source="127.0.0.0/8")
    assert attack.call(attack.master.addr, pull("Orders", group="cidr"), creds=creds).code == ResponseCode.SUCCESS
