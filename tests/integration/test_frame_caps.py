"""Frame caps (ZMQ_MAXMSGSIZE on every bound socket): an oversized frame costs a service nothing.

The peer that sends a frame over the cap is disconnected as soon as the frame's
size is read, before its bytes are buffered; the service keeps serving everyone
else. Legal frames up to the broker's limits still pass.
"""

import time

import pytest
import zmq

from quiver import Message, Producer
from quiver.wire import protocol, record
from quiver.wire import requests as rq
from quiver.wire.codes import RequestCode, ResponseCode
from quiver.errors import MessageIllegalError
from quiver.runtime.service import DEFAULT_MAX_FRAME_BYTES
from quiver.wire.transport import Transport
from quiver_broker.app import max_frame_bytes
from quiver_broker.config import Config as BrokerConfig
from quiver_broker.ha_stream import REPORT_MAX_FRAME_BYTES

MiB = 1 << 20
BROKER_CAP = max_frame_bytes(BrokerConfig())
MAX_MESSAGE_BYTES = BrokerConfig().max_message_bytes
RSS_GROWTH_LIMIT_KB = 100 * 1024


def _rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")


def _send_oversized(addr: str, code_or_req, size: int, timeout_s: float = 20.0) -> None:
    """One request whose body frame is `size` bytes, from a bare DEALER; asserts the
    service drops the connection (the cap at work) and never answers."""
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RECONNECT_IVL, 60_000)  # one connection: its drop is what we watch for
    mon = sock.get_monitor_socket(zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED)
    try:
        sock.connect(f"tcp://{addr}")
        sock.send_multipart(protocol.request(code_or_req, 7, None, [bytes(size)]), copy=False)
        deadline = time.monotonic() + timeout_s
        events = []
        while zmq.EVENT_DISCONNECTED not in events:
            left = deadline - time.monotonic()
            assert left > 0, f"{addr} did not drop the {size}-byte frame's connection (events {events})"
            if mon.poll(int(left * 1000)):
                events.append(zmq.utils.monitor.recv_monitor_message(mon)["event"])
        assert not sock.poll(200), "an oversized request was answered"
    finally:
        sock.disable_monitor()
        mon.close(0)
        sock.close(0)


def _ping(t: Transport, addr: str) -> dict:
    return t.call(addr, rq.Ping(), timeout=5.0).ext


def _check_cap(svc, cap: int, code_or_req) -> None:
    t = Transport("caps-test")
    try:
        _ping(t, svc.addr)
        _send_oversized(svc.addr, code_or_req, cap + MiB)
        before = _rss_kb(svc.pid)
        _send_oversized(svc.addr, code_or_req, 64 * MiB)
        time.sleep(0.3)  # anything the frame cost would show by now
        grown = _rss_kb(svc.pid) - before
        assert grown < RSS_GROWTH_LIMIT_KB, f"{svc.name}: RSS grew {grown} KiB for a refused 64 MiB frame"
        assert svc.alive(), svc.log_tail()
        assert _ping(t, svc.addr)  # others (and the same peer, reconnected) are still served
    finally:
        t.close()


def test_name_server_refuses_a_frame_over_its_cap(cluster):
    namesrv = next(s for s in cluster.services if s.role == "namesrv")
    _check_cap(namesrv, DEFAULT_MAX_FRAME_BYTES, rq.GetTopicList())
    # the name server still routes: a fresh producer finds the broker and sends
    with Producer("caps-pg", namesrv=cluster.namesrv) as p:
        assert p.send(Message("CapsAfterNamesrv", b"still routed")).status.name == "SEND_OK"


def test_broker_refuses_a_frame_over_its_cap_and_keeps_serving(cluster):
    broker = next(s for s in cluster.services if s.role == "broker")
    big_send = rq.SendMessage(topic="CapsTopic", metas=([0], [""]))
    _check_cap(broker, BROKER_CAP, big_send)
    with Producer("caps-pg", namesrv=cluster.namesrv) as p:
        assert p.send(Message("CapsTopic", b"normal send")).status.name == "SEND_OK"


def test_broker_takes_a_max_size_message_and_batch(cluster):
    broker = next(s for s in cluster.services if s.role == "broker")
    t = Transport("caps-test")
    try:
        # one body of exactly max_message_bytes, and a batch whose bodies add up to it (one packed frame)
        one = rq.SendMessage(topic="CapsMax", metas=([0], [""]))
        env = t.call(broker.addr, one, None, [b"a" * MAX_MESSAGE_BYTES], timeout=20.0)
        assert env.code == ResponseCode.SUCCESS
        bodies = [bytes([65 + i]) * (MAX_MESSAGE_BYTES // 4) for i in range(4)]
        lengths, frames = rq.pack_bodies(bodies)
        assert len(frames) == 1 and len(frames[0]) == MAX_MESSAGE_BYTES
        batch = rq.SendMessage(topic="CapsMax", metas=([0] * 4, ["KEYS\x01k\x02"] * 4), lengths=lengths)
        env = t.call(broker.addr, RequestCode.SEND_BATCH_MESSAGE, batch.ext(), frames, timeout=20.0)
        assert env.code == ResponseCode.SUCCESS, env.remark
        first = rq.SendReply.decode(env.ext).queue_offset
        # one byte more is refused with a remark, not by the socket: the connection stays
        over = rq.SendMessage(topic="CapsMax", metas=([0], [""]))
        with pytest.raises(MessageIllegalError, match="limit"):
            t.call(broker.addr, over, None, [b"a" * (MAX_MESSAGE_BYTES + 1)], timeout=20.0)
        assert _ping(t, broker.addr)
        got = []
        offset = first
        while len(got) < 4:
            env = t.call(broker.addr, rq.PullMessage(topic="CapsMax", queue_id=0, offset=offset, max_msgs=4,
                                                     max_bytes=8 * MiB), timeout=10.0)
            recs = record.decode_many(env.bodies[0])
            got += [r.body for r in recs]
            offset = rq.PullReply.decode(env.ext).next
        assert got == bodies
    finally:
        t.close()


def test_ha_socket_refuses_more_than_a_report(cluster):
    broker = next(s for s in cluster.services if s.role == "broker")
    t = Transport("caps-test")
    try:
        ha_addr = t.call(broker.addr, rq.Status(), timeout=5.0).ext["status"]["ha"]["ha_listen"]
        if not ha_addr:
            pytest.skip("the master's HA port (listen port + 1) was taken")
        ha_addr = ha_addr.replace("0.0.0.0", "127.0.0.1")
        _send_oversized(ha_addr, rq.HaReport(offset=0), REPORT_MAX_FRAME_BYTES + 1)
        assert broker.alive() and _ping(t, broker.addr)
    finally:
        t.close()
