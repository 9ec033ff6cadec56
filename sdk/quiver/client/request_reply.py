"""Request-reply (RocketMQ 4.6+): a producer's requests waiting for their replies.

    requester: Producer.request(msg, timeout)   -> the reply (a MessageExt)
    replier:   Producer.reply(request, body)    -> SendResult of the stored reply

A request is a message of the requester's topic carrying CORRELATION_ID (a new
random id), REPLY_TO_CLIENT (the requester's client id), TTL (its timeout, ms)
and CLUSTER (the cluster of the broker it goes to). Before its first request a
producer heartbeats its group to every broker (and on, every 30 s): that gives
it a connection to each broker and tells the broker its identity. The replier
sends the reply to `<CLUSTER>_REPLY_TOPIC` on the broker the request was stored
on (which the requester had just sent to); that broker stores it and pushes it
to the requester (PUSH_REPLY_MESSAGE_TO_CLIENT), whose `Requests` completes the
waiting future by correlation id. A reply for an id that timed out is dropped
and counted as late, one never asked for as unknown; a request not answered in
time fails with RequestTimeoutError.

Owns the correlation table, its timeouts and the request / reply properties;
not the send path (producer.py) nor the broker's side (quiver_broker.request_reply).
"""

import heapq
import logging
import struct
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, wait
from typing import Any

from quiver.errors import ClientError, MessageIllegalError, QuiverError, RequestTimeoutError
from quiver.wire import record
from quiver.wire import requests as rq
from quiver.wire.codes import RequestCode
from quiver.wire.futures import LightFuture
from quiver.wire.names import reply_topic
from quiver.wire.properties import CLUSTER, CORRELATION_ID, MSG_TYPE, REPLY_MESSAGE, REPLY_TO_CLIENT, TTL
from quiver.wire.protocol import Envelope
from quiver.client.base import MessageQueue
from quiver.client.message import Message, MessageExt, SendResult

log = logging.getLogger(__name__)

_LATE_IDS_KEPT = 4096   # ids of timed-out requests remembered, to tell a late reply from an unknown one
_MAX_TIMEOUT_S = 24 * 3600.0


def correlation_id(msg: Message | MessageExt) -> str | None:
    """The correlation id of a request or of its reply (None on other messages)."""
    return (msg.properties or {}).get(CORRELATION_ID)


class Requests:
    """One producer's requests in flight: correlation id -> (future, deadline). Replies come in
    on the transport's push thread (`on_push`); a timer thread fails the expired ones."""

    def __init__(self, producer: Any) -> None:
        self.producer = producer
        self._lock = threading.Lock()
        self._waiting: dict[str, Future[MessageExt]] = {}
        self._deadlines: list[tuple[float, str]] = []   # a heap
        self._expired: OrderedDict[str, None] = OrderedDict()
        self._wake = threading.Condition(self._lock)
        self._timer: threading.Thread | None = None
        self._closed = False   # the producer shut down: the timer thread ends
        self.prepared = False   # ready() ran: heartbeats sent, clusters known
        self._clusters: dict[str, str] = {}   # broker name -> its cluster
        self.replies = 0
        self.late_replies = 0
        self.unknown_replies = 0
        self.timeouts = 0

    # ---- requester ------------------------------------------------------------------

    def ready(self, timeout: float) -> None:
        """Before the first request: heartbeat to every broker and wait (bounded) for the answers,
        so whichever broker stores the reply can push it here; then every 30 s (ClientBase)."""
        if self.prepared:
            return
        p = self.producer
        hb = rq.HeartBeat(client_id=p.client_id, producers=[p.group])
        brokers = p._all_broker_addrs()
        transport = p._brokers.transport
        futs = [transport.call_future(addr, hb, timeout=timeout) for addr in brokers.values()]
        wait(futs, timeout)
        self._clusters.update(self._cluster_of_brokers())
        self.prepared = True

    def request_async(self, msg: Message, timeout: float) -> Future[MessageExt]:
        """Send `msg` as a request; the future completes with the reply, or RequestTimeoutError
        after `timeout` seconds, or the send's error."""
        if not (0 < timeout <= _MAX_TIMEOUT_S):
            raise ClientError(f"a request's timeout is in seconds, > 0 and <= {_MAX_TIMEOUT_S:.0f}; got {timeout!r}")
        self.ready(min(timeout, self.producer.request_timeout))
        cid = uuid.uuid4().hex
        fut: Future[MessageExt] = LightFuture()
        self._add(cid, fut, time.monotonic() + timeout)
        try:
            self._send(msg, cid, timeout, avoid=None, attempt=0)
        except Exception as exc:
            self._settle(cid, exc)
            raise
        return fut

    def _send(self, msg: Message, cid: str, timeout: float, avoid: str | None, attempt: int) -> None:
        p = self.producer
        mq, addr = p._pick_queue(msg.topic, avoid)
        system = {CORRELATION_ID: cid, REPLY_TO_CLIENT: p.client_id, TTL: str(int(timeout * 1000)),
                  CLUSTER: self._cluster(mq.broker, fetch=attempt == 0)}

        def sent(f: Future[SendResult]) -> None:
            exc = f.exception()
            if exc is None:
                return
            if attempt < p.retries and isinstance(exc, Exception) and p._retryable(exc) and cid in self._waiting:
                try:
                    self._send(msg, cid, timeout, mq.broker, attempt + 1)
                    return
                except Exception as again:
                    exc = again
            self._settle(cid, exc)
        p._send_prepared(msg, mq, addr, system).add_done_callback(sent)

    def _cluster(self, broker: str, fetch: bool = True) -> str:
        cluster = self._clusters.get(broker)
        if cluster is None and fetch:   # not on the IO thread (a retry): no name server call there
            self._clusters.update(self._cluster_of_brokers())
            cluster = self._clusters.get(broker)
            # a broker new since ready(): heartbeat now, ahead of the request on the same connection
            self.producer._send_heartbeats()
        if not cluster:
            raise ClientError(f"broker {broker!r} is in no cluster the name servers know: cannot name its reply topic")
        return cluster

    def _cluster_of_brokers(self) -> dict[str, str]:
        brokers = self.producer._cluster_info().get("brokers", {})
        return {name: b.get("cluster") or "" for name, b in brokers.items()}

    # ---- the correlation table -----------------------------------------------------------

    def _add(self, cid: str, fut: Future[MessageExt], deadline: float) -> None:
        with self._lock:
            self._waiting[cid] = fut
            heapq.heappush(self._deadlines, (deadline, cid))
            self._closed = False
            if self._timer is None or not self._timer.is_alive():
                self._timer = threading.Thread(target=self._expire_loop, name="request-timeouts", daemon=True)
                self._timer.start()
            self._wake.notify()

    def _settle(self, cid: str, outcome: MessageExt | BaseException) -> bool:
        with self._lock:
            fut = self._waiting.pop(cid, None)
        if fut is None:
            return False
        if isinstance(outcome, BaseException):
            fut.set_exception(outcome)
        else:
            fut.set_result(outcome)
        return True

    def expire(self, now: float | None = None) -> int:
        """Fail every request past its deadline with RequestTimeoutError; how many (a step the
        timer thread runs, callable from a test)."""
        now = time.monotonic() if now is None else now
        due: list[str] = []
        with self._lock:
            while self._deadlines and self._deadlines[0][0] <= now:
                _, cid = heapq.heappop(self._deadlines)
                if cid in self._waiting:
                    due.append(cid)
                    self._expired[cid] = None
                    if len(self._expired) > _LATE_IDS_KEPT:
                        self._expired.popitem(last=False)
        for cid in due:
            if self._settle(cid, RequestTimeoutError(f"no reply to request {cid} in time")):
                self.timeouts += 1
        return len(due)

    def _expire_loop(self) -> None:
        while True:
            with self._lock:
                if self._closed:
                    return
                wait_s = self._deadlines[0][0] - time.monotonic() if self._deadlines else 1.0
                if wait_s > 0:
                    self._wake.wait(min(wait_s, 1.0))
            self.expire()

    def fail_all(self, why: str) -> None:
        """At shutdown: every request still waiting fails with ClientError."""
        with self._lock:
            waiting, self._waiting = self._waiting, {}
            self._closed = True
            self._wake.notify()
        for fut in waiting.values():
            fut.set_exception(ClientError(why))

    # ---- replies pushed by a broker --------------------------------------------------------

    def on_push(self, env: Envelope) -> None:
        """PUSH_REPLY_MESSAGE_TO_CLIENT: complete the request it answers; a late one is dropped and
        counted as late, an unknown or malformed one as unknown."""
        try:
            broker = rq.PushReplyMessage.decode(env.ext).broker
            reply = MessageExt.from_record(record.decode_at(env.bodies[0]), broker)
        except (ValueError, IndexError, struct.error, record.BadRecord, QuiverError) as exc:
            log.warning("malformed reply pushed to this producer dropped: %s", exc)
            self.unknown_replies += 1
            return
        cid = correlation_id(reply) or ""
        if self._settle(cid, reply):
            self.replies += 1
        elif cid in self._expired:
            self.late_replies += 1
            log.debug("late reply to request %s dropped (it had timed out)", cid)
        else:
            self.unknown_replies += 1
            log.debug("reply to unknown request %r dropped", cid)


# ---- replier ------------------------------------------------------------------------------


def reply_properties(request: MessageExt) -> tuple[str, dict[str, str]]:
    """(reply topic, system properties) of the reply to `request`; MessageIllegalError if it is
    not a request (it lacks CORRELATION_ID, REPLY_TO_CLIENT or CLUSTER)."""
    props = request.properties or {}
    missing = [k for k in (CORRELATION_ID, REPLY_TO_CLIENT, CLUSTER) if not props.get(k)]
    if missing:
        raise MessageIllegalError(f"message {request.msg_id} is not a request (it has no {', '.join(missing)}): "
                                  "only a message sent with Producer.request can be replied to")
    system = {CORRELATION_ID: props[CORRELATION_ID], REPLY_TO_CLIENT: props[REPLY_TO_CLIENT],
              CLUSTER: props[CLUSTER], MSG_TYPE: REPLY_MESSAGE}
    if props.get(TTL):
        system[TTL] = props[TTL]
    return reply_topic(props[CLUSTER]), system


def reply_queue(producer: Any, request: MessageExt, topic: str) -> tuple[MessageQueue, str]:
    """Queue 0 of the reply topic on the broker that stored `request` (the requester sent there,
    so it is connected to it); ClientError if that broker is gone."""
    return MessageQueue(topic, request.broker, 0), producer._broker_addr(request.broker, request.topic)


def send_reply(producer: Any, request: MessageExt, body: bytes,
               properties: dict[str, str] | None = None) -> Future[SendResult]:
    """The reply to `request` sent (SEND_REPLY_MESSAGE): Future[SendResult] of the stored reply."""
    topic, system = reply_properties(request)
    mq, addr = reply_queue(producer, request, topic)
    msg = Message(topic, body, properties=dict(properties or {}))
    return producer._send_prepared(msg, mq, addr, system, RequestCode.SEND_REPLY_MESSAGE)


class Requesting:
    """Producer's request-reply calls (a mixin of Producer, whose send path they use); the
    producer's group heartbeats from its first request on, so brokers can push replies to it."""

    _requests: Requests | None = None

    @property
    def requests(self) -> Requests | None:
        """The requests waiting for replies and the reply counters (None before the first request)."""
        return self._requests

    def request(self, msg: Message, timeout: float = 3.0) -> MessageExt:
        """Send `msg` as a request and wait for its reply (RocketMQ's request()): the reply
        message, or RequestTimeoutError after `timeout` seconds. See quiver.client.request_reply."""
        p: Any = self
        return self.request_async(msg, timeout).result(timeout + p.send_timeout + 1.0)

    def request_async(self, msg: Message, timeout: float = 3.0) -> Future[MessageExt]:
        """`request` without waiting: Future[MessageExt] of the reply."""
        p: Any = self
        p._need_started()
        if self._requests is None:
            self._requests = Requests(self)
        return self._requests.request_async(msg, timeout)

    def reply(self, request: MessageExt, body: bytes, properties: dict[str, str] | None = None,
              timeout: float | None = None) -> SendResult:
        """Reply to `request` (a message a consumer got from Producer.request): stored in the
        cluster's reply topic and pushed to the requester; MessageIllegalError if it is no request."""
        p: Any = self
        p._need_started()
        return send_reply(self, request, body, properties).result((timeout or p.send_timeout) + 1.0)

    def _heartbeat_payload(self) -> rq.HeartBeat | None:
        """A producer heartbeats its group (RocketMQ's producer heartbeat): the brokers list it as
        online, and push replies to its requests over that connection."""
        p: Any = self
        return rq.HeartBeat(client_id=p.client_id, producers=[p.group])

    def _heartbeat_brokers(self) -> dict[str, str]:
        """The brokers this producer has routes to (no name-server call): it is online where it
        sends. A first request heartbeats every broker of the cluster (Requests.ready)."""
        p: Any = self
        out: dict[str, str] = {}
        for _, route in list(p._routes.values()):
            out.update({name: addr for name, addr in route.addrs.items() if addr})
        return out

    def _on_reply(self, addr: str, env: Envelope) -> None:
        if self._requests is not None:
            self._requests.on_push(env)

    def _fail_requests(self) -> None:
        if self._requests is not None:
            self._requests.fail_all(f"{type(self).__name__} shut down before the reply came")

    _push_handlers: dict[int, Callable[[Any, str, Envelope], Any]] = {
        RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT: _on_reply}
