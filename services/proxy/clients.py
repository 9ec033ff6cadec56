"""The v2 clients connected to this proxy: their telemetry streams, settings and published topics.

A client opens one Telemetry stream per endpoint; its first command is its Settings, answered
with the proxy's (retry policy, body limit, long polling, FIFO). `Clients` keeps one `Session`
per client id (the x-mq-client-id header), bound to the access key that first used it: a call
naming another key's client id (Telemetry, Heartbeat, NotifyClientTermination, receive) is
FORBIDDEN. Topics declared in settings are checked against the ACL (`grants`, grants.py):
PUB on each published topic, SUB on the group and each subscribed topic. A transaction check
the txn-checker asks about is handed, as a RecoverOrphanedTransactionCommand, only to a live
producer session whose access key may publish to the topic now: the session that sent the
half when this proxy remembers it (`published`), else one of the sender's key, else any other. Heartbeats and
NotifyClientTermination update the same table. No gRPC objects are kept here beyond the
outbound queue.
"""

import logging
import queue
import random
import threading
import time
from collections import OrderedDict

from rocketmq.grpc_protocol.definition_pb2 import (ClientType, Code, CustomizedBackoff, ExponentialBackoff, MessageType,
                                                   RetryPolicy, Settings)
from rocketmq.grpc_protocol.service_pb2 import RecoverOrphanedTransactionCommand, TelemetryCommand

from quiver.wire.names import group_problem, topic_problem

from .messages import outbound
from .statuses import OK, Refused

log = logging.getLogger(__name__)

MAX_CLIENT_ID_CHARS = 256
MAX_TOPICS = 1024
QUEUE_BOUND = 1024
SESSIONS_KEPT = 100_000
SENDERS_KEPT = 100_000         # open halves whose sending session is remembered
PRODUCER_ATTEMPTS = 3
CONSUMER_ATTEMPTS = 17         # RocketMQ 5: the first delivery + 16 retries, then the DLQ
# the next delivery after a failed consume, by attempt (RocketMQ 5's push consumer defaults)
RETRY_DELAYS_S = (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200)


def client_id_of(metadata) -> str:
    for k, v in metadata:
        if k == "x-mq-client-id":
            if isinstance(v, str) and 0 < len(v) <= MAX_CLIENT_ID_CHARS and v.isprintable():
                return v
            break
    raise Refused(Code.CLIENT_ID_REQUIRED, "send the x-mq-client-id header (1..256 printable characters)")


class Session:
    def __init__(self, client_id: str, access_key: str = ""):
        self.client_id = client_id
        self.access_key = access_key
        self.client_type = ClientType.CLIENT_TYPE_UNSPECIFIED
        self.topics: set[str] = set()
        self.out: queue.Queue = queue.Queue(QUEUE_BOUND)
        self.streaming = False
        self.seen = time.monotonic()


class Clients:
    """`is_fifo(topic) -> bool`; `long_polling_ms`, `max_body_bytes`: what consumers / producers are told."""

    def __init__(self, is_fifo, long_polling_ms: int, max_body_bytes: int, grants=None):
        self.is_fifo = is_fifo
        self.long_polling_ms = long_polling_ms
        self.max_body_bytes = max_body_bytes
        self.grants = grants
        self._sessions: dict[str, Session] = {}
        self._senders: OrderedDict[str, tuple[str, str]] = OrderedDict()   # half's message id -> (key, client)
        self._lock = threading.Lock()

    def session(self, client_id: str, access_key: str = "") -> Session:
        """The session of `client_id`, made for `access_key` if new; FORBIDDEN if another key's."""
        with self._lock:
            s = self._sessions.get(client_id)
            if s is None:
                if len(self._sessions) >= SESSIONS_KEPT:
                    idle = next((k for k, v in self._sessions.items() if not v.streaming), None)
                    self._sessions.pop(idle if idle is not None else next(iter(self._sessions)))
                s = self._sessions[client_id] = Session(client_id, access_key)
            elif s.access_key != access_key:
                raise Refused(Code.FORBIDDEN, f"client id {client_id[:64]!r} is in use by another access key: "
                                              "each client instance has its own id")
            s.seen = time.monotonic()
            return s

    def owned(self, client_id: str, access_key: str) -> None:
        """FORBIDDEN if `client_id` is a live session of another access key."""
        with self._lock:
            s = self._sessions.get(client_id)
        if s is not None and s.access_key != access_key:
            raise Refused(Code.FORBIDDEN, f"client id {client_id[:64]!r} belongs to another access key")

    def drop(self, client_id: str, access_key: str = "") -> None:
        self.owned(client_id, access_key)
        with self._lock:
            self._sessions.pop(client_id, None)

    def published(self, client_id: str, topic: str, access_key: str = "", msg_id: str = "") -> None:
        """A transactional send of `client_id` to `topic` (the broker took it: the key may publish)."""
        s = self.session(client_id, access_key)
        if len(s.topics) < MAX_TOPICS:
            s.topics.add(topic)
        if msg_id:
            with self._lock:
                self._senders[msg_id] = (access_key, client_id)
                while len(self._senders) > SENDERS_KEPT:
                    self._senders.popitem(last=False)

    def count(self) -> dict:
        with self._lock:
            sessions = list(self._sessions.values())
        return {"clients": len(sessions), "streams": sum(s.streaming for s in sessions)}

    # ---- settings ------------------------------------------------------------------------

    def _may(self, session: Session, resource: str, action: str) -> None:
        problem = self.grants.check(session.access_key, resource, action) if self.grants else None
        if problem:
            raise Refused(Code.FORBIDDEN, f"settings refused: {problem}")

    def settings(self, session: Session, asked: Settings) -> TelemetryCommand:
        """The answer to a client's Settings (Refused when they name a bad group or topic, or one the
        session's access key has no right on)."""
        out = Settings(client_type=asked.client_type)
        out.request_timeout.CopyFrom(asked.request_timeout)
        out.access_point.CopyFrom(asked.access_point)
        session.client_type = asked.client_type
        if asked.HasField("publishing"):
            topics = [t.name for t in asked.publishing.topics]
            for t in topics:
                if topic_problem(t):
                    raise Refused(Code.ILLEGAL_TOPIC, topic_problem(t))
            for t in topics[:MAX_TOPICS]:
                self._may(session, f"topic:{t}", "PUB")
            session.topics.update(topics[:MAX_TOPICS])
            out.publishing.CopyFrom(asked.publishing)
            out.publishing.max_body_size = self.max_body_bytes
            out.publishing.validate_message_type = True
            out.backoff_policy.CopyFrom(RetryPolicy(max_attempts=PRODUCER_ATTEMPTS, exponential_backoff=ExponentialBackoff(
                multiplier=2.0)))
            out.backoff_policy.exponential_backoff.initial.FromMilliseconds(10)
            out.backoff_policy.exponential_backoff.max.FromMilliseconds(1000)
        if asked.HasField("subscription"):
            sub = asked.subscription
            problem = group_problem(sub.group.name)
            if problem:
                raise Refused(Code.ILLEGAL_CONSUMER_GROUP, problem)
            for entry in sub.subscriptions:
                if topic_problem(entry.topic.name):
                    raise Refused(Code.ILLEGAL_TOPIC, topic_problem(entry.topic.name))
            if len(sub.subscriptions) > MAX_TOPICS:
                raise Refused(Code.BAD_REQUEST, f"a client subscribes to at most {MAX_TOPICS} topics")
            self._may(session, f"group:{sub.group.name}", "SUB")
            for entry in sub.subscriptions:
                self._may(session, f"topic:{entry.topic.name}", "SUB")
            out.subscription.CopyFrom(sub)
            out.subscription.fifo = any(self.is_fifo(e.topic.name) for e in sub.subscriptions)
            out.subscription.receive_batch_size = 32
            out.subscription.long_polling_timeout.FromMilliseconds(self.long_polling_ms)
            backoff = CustomizedBackoff()
            for s in RETRY_DELAYS_S:
                backoff.next.add().FromSeconds(s)
            out.backoff_policy.CopyFrom(RetryPolicy(max_attempts=CONSUMER_ATTEMPTS, customized_backoff=backoff))
        return TelemetryCommand(status=OK, settings=out)

    # ---- transaction checks ------------------------------------------------------------------

    def forward_check(self, topic: str, transaction_id: str, msg) -> bool:
        """Ask one live producer session publishing `topic`, whose access key may publish to it, about
        `msg`: its sender's session first, then its sender key's (False: none to ask)."""
        with self._lock:
            candidates = [s for s in self._sessions.values()
                          if s.streaming and s.client_type == ClientType.PRODUCER and topic in s.topics]
            sender = self._senders.get(transaction_id.rsplit(":", 1)[-1])
        # the cached ACL only: this runs on a client's IO thread, which a fetch would wait for
        allowed = {ak: self.grants is None or self.grants.allowed(ak, f"topic:{topic}", "PUB")
                   for ak in {s.access_key for s in candidates}}
        candidates = [s for s in candidates if allowed[s.access_key]]
        if sender is not None:
            candidates = [s for s in candidates if s.client_id == sender[1]] or \
                [s for s in candidates if s.access_key == sender[0]] or candidates
        if not candidates:
            log.info("transaction check of %s on %s: no producer of the topic is connected (asked again later)",
                     transaction_id, topic)
            return False
        pm = outbound(msg, 0)
        pm.system_properties.ClearField("receipt_handle")
        pm.system_properties.ClearField("invisible_duration")
        pm.system_properties.message_type = MessageType.TRANSACTION
        cmd = TelemetryCommand(recover_orphaned_transaction_command=RecoverOrphanedTransactionCommand(
            message=pm, transaction_id=transaction_id))
        try:
            random.choice(candidates).out.put_nowait(cmd)
        except queue.Full:
            return False
        return True
