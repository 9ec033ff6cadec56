"""QueryRoute and QueryAssignment answers, and which message types a topic accepts.

Every queue is served by this proxy, so every queue's endpoints are the proxy's own
address (--advertise, else the address the client reached it by). A queue is the
broker's (broker name, queue id), with READ / WRITE / READ_WRITE from the topic's perm.
Where a topic's message type lives: a topic created with order=True (the broker's topic
config, routed by the name servers) is FIFO and accepts FIFO messages only; any other
accepts NORMAL, DELAY and TRANSACTION, unless --topic-message-types names one type for
it. A send that does not match is MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, as RocketMQ 5's
proxy answers. QueryAssignment (PushConsumer) gives one assignment per broker: POP reads
all of that broker's queues of the topic.
"""

from rocketmq.grpc_protocol.definition_pb2 import (AddressScheme, Code, Endpoints, MessageQueue, MessageType,
                                                   Permission)

from quiver.client.access import broker_access
from quiver.errors import QuiverError
from quiver.wire.codes import ResponseCode
from quiver.wire.names import topic_problem

from .statuses import Refused

_MIXED = (MessageType.NORMAL, MessageType.DELAY, MessageType.TRANSACTION)


def check_topic_name(name: str) -> None:
    problem = topic_problem(name)
    if problem:
        raise Refused(Code.ILLEGAL_TOPIC, problem)


def endpoints_for(advertise: str, requested: Endpoints) -> Endpoints:
    """--advertise, else the endpoints the client says it reached the proxy by (Refused when it names none)."""
    if advertise:
        host, port = advertise.rsplit(":", 1)
        ep = Endpoints(scheme=AddressScheme.IPv4)
        ep.addresses.add(host=host.strip("[]"), port=int(port))
        return ep
    if requested.addresses and all(a.host and 0 < a.port < 65536 and len(a.host) <= 253 for a in requested.addresses):
        return requested
    raise Refused(Code.ILLEGAL_ACCESS_POINT, "the request names no endpoints: give the proxy's host:port as "
                                             "the client's endpoints")


class Routes:
    """`client`: a started ClientBase (routes from the name servers); `types`: --topic-message-types."""

    def __init__(self, client, types: dict[str, str]):
        self.client = broker_access(client)   # routes
        self.types = {t: MessageType.Value(k) for t, k in types.items()}

    def route(self, topic: str):
        check_topic_name(topic)
        try:
            route = self.client.route(topic)
        except QuiverError as exc:
            if exc.code != ResponseCode.TOPIC_NOT_EXIST:
                raise          # NO_PERMISSION -> FORBIDDEN ... (statuses.py)
            raise Refused(Code.TOPIC_NOT_FOUND, f"topic {topic!r} is not routed by the name servers: create it "
                                                f"first ({exc.remark or exc})") from None
        if not route.read_queues and not route.write_queues:
            raise Refused(Code.TOPIC_NOT_FOUND, f"topic {topic!r} has no queue: create it first")
        return route

    def accepted(self, topic: str, route=None) -> tuple[int, ...]:
        route = route or self.route(topic)
        if route.order:
            return (MessageType.FIFO,)
        one = self.types.get(topic)
        return (one,) if one else _MIXED

    def check_type(self, topic: str, kind: int) -> None:
        accepted = self.accepted(topic)
        if kind not in accepted:
            names = ", ".join(MessageType.Name(k) for k in accepted)
            raise Refused(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                          f"topic {topic!r} accepts {names} messages, not {MessageType.Name(kind)}")

    def queues(self, topic: str, endpoints: Endpoints) -> list[MessageQueue]:
        route = self.route(topic)
        accepted = self.accepted(topic, route)
        reads, writes = set(route.read_queues), set(route.write_queues)
        out = []
        for mq in sorted(reads | writes):
            perm = Permission.READ_WRITE if mq in reads and mq in writes else \
                Permission.READ if mq in reads else Permission.WRITE
            out.append(_queue(topic, mq.broker, mq.queue_id, perm, endpoints, accepted))
        return out

    def assignments(self, topic: str, endpoints: Endpoints) -> list[MessageQueue]:
        route = self.route(topic)
        accepted = self.accepted(topic, route)
        return [_queue(topic, b, -1, Permission.READ_WRITE, endpoints, accepted)
                for b in sorted({mq.broker for mq in route.read_queues})]


def _queue(topic, broker, qid, perm, endpoints, accepted) -> MessageQueue:
    q = MessageQueue(id=qid, permission=perm)
    q.topic.name = topic
    q.broker.name = broker
    q.broker.id = 0
    q.broker.endpoints.CopyFrom(endpoints)
    q.accept_message_types.extend(accepted)
    return q
