"""Attacks on the gRPC proxy by a signed-in user (auth on, real processes), each beside the same
action by an authorized user: a transaction check-back asked for in Telemetry settings without the
right to publish, another key's client id, a replayed signature, and idle streams and long polls
held to take every worker."""

import asyncio
import hmac
import json
import os
import queue
import threading
import time
from datetime import datetime, timedelta
from hashlib import sha1

import grpc
import pytest
from rocketmq import ClientConfiguration, Credentials, Message, Producer, TransactionChecker
from rocketmq.grpc_protocol import TransactionResolution
from rocketmq.grpc_protocol import definition_pb2 as d
from rocketmq.grpc_protocol import service_pb2 as s
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub

from quiver.wire.curve import write_credentials
from support.proxy import TXN_FLAGS, started
from support.secure import add_user, secure_cluster
from support.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

THREADS = 48          # the proxy's workers: 24 for streams (16 a key), 24 for calls (12 a key)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("proxy-attacks")
    with secure_cluster(root, services=(("txn-checker", "quiver_txn", *TXN_FLAGS, "--max-checks", "500"),),
                        topics=("AtkPay", "AtkMine")) as (c, admin, _):
        keys = {}
        for name, grants in (("payer", [("topic:AtkPay", ["PUB", "SUB"]), ("group:atk-pay", ["SUB"])]),
                             ("mallory", [("topic:AtkMine", ["PUB", "SUB"]), ("group:atk-mine", ["SUB"])])):
            write_credentials(str(root / f"{name}.key"), add_user(admin, name, *grants))
            keys[name.upper()] = {"secret": f"{name}-secret", "credentials": str(root / f"{name}.key")}
        path = root / "access-keys.json"
        path.write_text(json.dumps(keys))
        os.chmod(path, 0o600)
        proxy = c.add_proxy("--access-keys", str(path), "--grpc-threads", str(THREADS))
        c.wait()
        yield proxy, admin


def _sign(ak, date=None, client_id="atk-client"):
    date = date or datetime.now().strftime("%Y%m%dT%H%M%SZ")
    sig = hmac.new(f"{ak.lower()}-secret".encode(), date.encode(), sha1).hexdigest()
    return [("x-mq-date-time", date), ("x-mq-client-id", client_id),
            ("authorization", f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, Signature={sig}")]


def _route(topic):
    req = s.QueryRouteRequest()
    req.topic.name = topic
    req.endpoints.addresses.add(host="127.0.0.1", port=8081)
    return req


class _Stream:
    """A raw Telemetry stream: `settings` (publishing `topics`) sent first, then idle; commands read."""

    def __init__(self, stub, md, topics=()):
        self.commands: queue.Queue = queue.Queue()
        self.first = None
        self._end = threading.Event()

        def outgoing():
            if topics:
                cmd = s.TelemetryCommand()
                cmd.settings.client_type = d.ClientType.PRODUCER
                for t in topics:
                    cmd.settings.publishing.topics.add(name=t)
                yield cmd
            self._end.wait()
        self.call = stub.Telemetry(outgoing(), metadata=md)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        try:
            for cmd in self.call:
                self.first = self.first or cmd
                self.commands.put(cmd)
        except grpc.RpcError:
            pass

    def next(self, timeout):
        try:
            return self.commands.get(timeout=timeout)
        except queue.Empty:
            return None

    def close(self):
        self._end.set()
        self.call.cancel()


def _cfg(proxy, ak):
    return ClientConfiguration(proxy.url, Credentials(ak, f"{ak.lower()}-secret"), request_timeout=5)


def _message(topic, body):
    m = Message()
    m.topic, m.body = topic, body
    return m


class _Commit(TransactionChecker):
    def __init__(self):
        self.asked = []

    def check(self, message):
        self.asked.append(message.body)
        return TransactionResolution.COMMIT


def test_settings_naming_a_topic_without_pub_are_refused_and_get_no_check_back(env):
    proxy, _ = env
    with started(Producer(_cfg(proxy, "PAYER"), ("AtkPay",), checker=_Commit())) as p:   # an open half, its
        # producer gone before any check
        tx = p.begin_transaction()
        p.send(_message("AtkPay", b"secret order"), tx)
    with grpc.insecure_channel(proxy.url) as ch:
        thief = _Stream(MessagingServiceStub(ch), _sign("MALLORY", client_id="mallory-1"), ("AtkPay",))
        try:
            first = thief.next(20)
            assert first is not None and first.status.code == d.Code.FORBIDDEN, first
            assert "AtkPay" in first.status.message and "PUB" in first.status.message
            deadline = time.monotonic() + 4          # several txn-checker rounds (every 0.3 s)
            while time.monotonic() < deadline:
                cmd = thief.next(0.5)
                assert cmd is None or not cmd.HasField("recover_orphaned_transaction_command"), cmd
        finally:
            thief.close()
    checker = _Commit()                              # the payer's own producer is asked, and commits
    with started(Producer(_cfg(proxy, "PAYER"), ("AtkPay",), checker=checker)):
        wait_for(lambda: b"secret order" in checker.asked, 30, "the check-back at the payer's producer")


def test_another_keys_client_id_is_refused(env):
    proxy, _ = env
    with grpc.insecure_channel(proxy.url) as ch:
        stub = MessagingServiceStub(ch)
        own = _Stream(stub, _sign("PAYER", client_id="payer-1"), ("AtkPay",))
        try:
            assert own.next(20).status.code == d.Code.OK
            mine = _sign("MALLORY", client_id="payer-1")
            reply = stub.NotifyClientTermination(s.NotifyClientTerminationRequest(), metadata=mine, timeout=10)
            assert reply.status.code == d.Code.FORBIDDEN and "another access key" in reply.status.message
            hb = s.HeartbeatRequest(client_type=d.ClientType.PRODUCER)
            assert stub.Heartbeat(hb, metadata=mine, timeout=10).status.code == d.Code.FORBIDDEN
            assert stub.Heartbeat(hb, metadata=_sign("PAYER", client_id="payer-1"), timeout=10).status.code == \
                d.Code.OK
            theirs = _Stream(stub, mine)
            assert theirs.next(20).status.code == d.Code.FORBIDDEN
            theirs.close()
        finally:
            own.close()
        wait_for(lambda: stub.NotifyClientTermination(s.NotifyClientTerminationRequest(), timeout=10,
                                                      metadata=_sign("PAYER", client_id="payer-1")).status.code
                 == d.Code.OK, 10, "the owner ends its own session")


def test_a_signature_dated_outside_fifteen_minutes_is_unauthorized(env):
    proxy, _ = env
    with grpc.insecure_channel(proxy.url) as ch:
        stub = MessagingServiceStub(ch)
        for skew in (timedelta(minutes=-16), timedelta(hours=3), timedelta(days=-400)):
            old = (datetime.now() + skew).strftime("%Y%m%dT%H%M%SZ")
            reply = stub.QueryRoute(_route("AtkPay"), metadata=_sign("PAYER", old), timeout=10)
            assert reply.status.code == d.Code.UNAUTHORIZED and "x-mq-date-time" in reply.status.message, skew
        recent = (datetime.now() - timedelta(minutes=5)).strftime("%Y%m%dT%H%M%SZ")
        for md in (_sign("PAYER"), _sign("PAYER", recent)):
            assert stub.QueryRoute(_route("AtkPay"), metadata=md, timeout=10).status.code == d.Code.OK


class _Flood:
    """`n` idle Telemetry streams of one user from a grpc.aio client (no thread a stream): the first
    command each gets, by index."""

    def __init__(self, url, n, md_of):
        self.first: dict = {}
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self._call(self._open(url, n, md_of))

    def _call(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    async def _open(self, url, n, md_of):
        self.channel = grpc.aio.insecure_channel(url)
        stub = MessagingServiceStub(self.channel)
        self.readers = [asyncio.ensure_future(self._read(i, stub.Telemetry(metadata=md_of(i)))) for i in range(n)]

    async def _read(self, i, call):
        try:
            while (cmd := await call.read()) is not grpc.aio.EOF:
                self.first.setdefault(i, cmd)
        except grpc.aio.AioRpcError:
            pass

    def close(self):
        self._call(self.channel.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)


def _hold_poll(stub, md, codes):
    """One long-polling receive (20 s) of AtkMine, where nothing comes: its final status code."""
    req = s.ReceiveMessageRequest(batch_size=1)
    req.group.name = "atk-mine"
    req.message_queue.topic.name, req.message_queue.broker.name, req.message_queue.id = "AtkMine", "broker-a", -1
    req.invisible_duration.FromSeconds(10)
    req.long_polling_timeout.FromSeconds(20)
    try:
        for r in stub.ReceiveMessage(req, metadata=md, timeout=40):
            if r.HasField("status"):
                codes.append(r.status.code)
                return
    except grpc.RpcError as exc:
        codes.append(exc.code())


def test_idle_streams_and_held_polls_of_one_user_leave_workers_for_everyone_else(env):
    """300 idle streams (as many as the issue's) and 30 held long polls of one user; another user's calls
    are still answered at once: past 16 a key the streams are refused, past 12 the polls."""
    proxy, admin = env
    flood = _Flood(proxy.url, 300, lambda i: _sign("MALLORY", client_id=f"idle-{i}"))
    codes: list = []
    with grpc.insecure_channel(proxy.url) as poll_ch, grpc.insecure_channel(proxy.url) as ch:
        other = MessagingServiceStub(ch)

        def served_at_once():
            t0 = time.monotonic()
            reply = other.QueryRoute(_route("AtkPay"), metadata=_sign("PAYER", client_id="payer-2"), timeout=10)
            assert reply.status.code == d.Code.OK and time.monotonic() - t0 < 8
        try:
            # the streams are in once those past the cap were refused: then another user is served
            wait_for(lambda: len(flood.first) >= 300 - 16, 60, "every stream past the per-key cap refused")
            served_at_once()
            answers = list(flood.first.values())
            assert {c.status.code for c in answers} == {d.Code.TOO_MANY_REQUESTS}
            assert "MALLORY" in answers[0].status.message
            polls = MessagingServiceStub(poll_ch)
            for i in range(30):
                threading.Thread(target=_hold_poll, args=(polls, _sign("MALLORY", client_id=f"poll-{i}"), codes),
                                 daemon=True).start()
            wait_for(lambda: codes.count(d.Code.TOO_MANY_REQUESTS) >= 30 - 12, 20, "polls past the per-key cap refused")
            served_at_once()
            with started(Producer(_cfg(proxy, "PAYER"), ("AtkPay",))) as p:
                assert p.send(_message("AtkPay", b"still served")).message_id
            status = admin.status(proxy.addr)
            assert status["open_streams"] >= 16 and status["refused_over_caps"] >= 300 - 16 + 30 - 12, status
        finally:
            flood.close()
