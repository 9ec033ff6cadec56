"""PullMessage, UpdateOffset, GetOffset, QueryOffset: RocketMQ 5's PullConsumer (the Java client's) over Quiver's pulls.

A PullConsumer owns its queues and their positions: it pulls one queue from an offset it
chose, and commits its group's offset itself. A pull is Quiver's PULL_MESSAGE of that queue
(queue_puller.py): from the queue's broker (its master, else a slave while the master's
reads fail) for a tag expression, or through a filter server (filter_route.py) for SQL92,
long-polling up to the client's long_polling_timeout (capped by --max-long-polling-ms and by
the call's own deadline). The answer streams as RocketMQ's proxy writes it: a status (OK with
messages, MESSAGE_NOT_FOUND, ILLEGAL_OFFSET when the offset is outside the queue), the
messages, then `next_offset`, where the client pulls next. Offsets are the group's offsets in
the brokers' offset store, the ones Quiver's own consumers commit and `quiver consumer
progress` shows. Every call acts through the caller's backend (users.py), so with auth on
the cluster's ACL asks for SUB on the topic and on the group exactly as for the SDK.

Does not own the POP RPCs (receiving.py) nor the message conversion (messages.py).
"""

from rocketmq.grpc_protocol.definition_pb2 import Code, FilterType, QueryOffsetPolicy

from quiver.client import queue_puller
from quiver.client.access import broker_access
from quiver.client.base import MessageQueue
from quiver.client.filter_route import FilterServers, NoFilterServerError, candidates, should_fail_over
from quiver.client.message import MessageSelector
from quiver.errors import ClientError, QueryNotFoundError, QuiverError
from quiver.wire import requests as rq
from quiver.wire.names import shown
from quiver.wire.schema import MAX_OFFSET

from .messages import millis, outbound
from .receiving import MAX_EXPRESSION_CHARS, check_group_name, poll_ms_of
from .statuses import OK, Refused, status

MAX_PULL_BATCH = 1024   # the broker's own bound on one pull


def check_offset(offset: int, what: str = "offset") -> int:
    if not 0 <= offset <= MAX_OFFSET:
        raise Refused(Code.ILLEGAL_OFFSET, f"{what} is 0..{MAX_OFFSET}, not {offset}")
    return offset


def selector_of(req):
    """A tag expression (str) or a SQL92 MessageSelector; Refused(ILLEGAL_FILTER_EXPRESSION)."""
    if not req.HasField("filter_expression"):
        return "*"
    fe = req.filter_expression
    expression = fe.expression.strip()
    if len(expression) > MAX_EXPRESSION_CHARS or not expression.isprintable():
        raise Refused(Code.ILLEGAL_FILTER_EXPRESSION, f"filter expression {shown(expression)} is over "
                                                      f"{MAX_EXPRESSION_CHARS} characters or not printable")
    if fe.type == FilterType.SQL:
        if not expression:
            raise Refused(Code.ILLEGAL_FILTER_EXPRESSION, "a SQL92 filter expression is empty")
        return MessageSelector.sql(expression)
    return expression or "*"


def pulled_message(m):
    """A pulled message as v2: no receipt handle nor invisible time (a pull is not a delivery)."""
    pm = outbound(m, 0)
    pm.system_properties.ClearField("receipt_handle")
    pm.system_properties.ClearField("invisible_duration")
    return pm


class Pulling:
    """`config`: the proxy's Config. Each call takes the caller's Backend (client, routes)."""

    def __init__(self, config):
        self.config = config
        self.filters = FilterServers("quiver-proxy")   # filter servers that failed lately: avoided

    def queue(self, b, mq_pb) -> MessageQueue:
        """The request's queue, one the topic's route reads; Refused otherwise (a bad broker or queue
        is BAD_REQUEST, as RocketMQ's proxy answers an unknown broker name)."""
        topic = mq_pb.topic.name
        route = b.routes.route(topic)   # ILLEGAL_TOPIC, TOPIC_NOT_FOUND, FORBIDDEN
        mq = MessageQueue(topic, mq_pb.broker.name, mq_pb.id)
        if mq not in route.read_queues:
            brokers = sorted({q.broker for q in route.read_queues})
            if mq.broker not in brokers:
                raise Refused(Code.BAD_REQUEST, f"broker {shown(mq.broker)} serves no readable queue of {topic!r} "
                                                f"(brokers: {', '.join(brokers)}): query the route again")
            raise Refused(Code.BAD_REQUEST, f"queue {mq.queue_id} is not a readable queue of {topic!r} on "
                                            f"{mq.broker}: query the route again")
        return mq

    # ---- pull -----------------------------------------------------------------------------

    def pull(self, b, req, time_left_s: float):
        """(status, v2 messages, next offset); Refused on bad input."""
        group = req.group.name
        check_group_name(group)
        mq = self.queue(b, req.message_queue)
        offset = check_offset(req.offset)
        if not 1 <= req.batch_size <= MAX_PULL_BATCH:
            raise Refused(Code.BAD_REQUEST, f"batch_size is 1..{MAX_PULL_BATCH}, not {req.batch_size}")
        selector = selector_of(req)
        poll_ms = poll_ms_of(req, self.config.max_long_polling_ms, time_left_s)
        sql = isinstance(selector, MessageSelector)
        client = broker_access(b.client)
        via = self._filter_server(client, mq, selector) if sql else \
            client.read_addr(mq.topic, mq.broker) or client.broker_addr(mq.broker, mq.topic)
        request = queue_puller.request(mq.topic, mq.queue_id, offset, max_msgs=req.batch_size, group=group,
                                       suspend_ms=poll_ms, selector=selector,
                                       broker_addr=client.broker_addr(mq.broker, mq.topic) if sql else None)
        try:
            pulled = queue_puller.fetch(client, via, request, timeout=client.request_timeout + poll_ms / 1000)
        except QuiverError as exc:
            if sql and should_fail_over(exc):
                self.filters.failed(via)   # the next pull goes to another filter server
            elif not sql and isinstance(exc, ClientError):
                client.read_failed(via)    # the broker is unreachable: the next pull reads its slave
            raise
        if pulled.status is queue_puller.OFFSET_ILLEGAL:
            return (status(Code.ILLEGAL_OFFSET, f"offset {offset} is outside {mq.topic}:{mq.broker}:{mq.queue_id} "
                                                f"[{pulled.min}, {pulled.max}]: pull from next_offset"),
                    [], pulled.next)
        msgs = pulled.messages(mq.broker, selector) if pulled.status is queue_puller.FOUND else []
        if not msgs:
            return status(Code.MESSAGE_NOT_FOUND, "no new message"), [], pulled.next
        return OK, [pulled_message(m) for m in msgs], pulled.next

    def _filter_server(self, client, mq: MessageQueue, selector) -> str:
        route = client.route(mq.topic)
        broker_addr = route.addrs.get(mq.broker) or ""
        if not candidates(route, broker_addr):   # a filter server started since the route was cached
            route = client.route(mq.topic, refresh=True)
        try:
            return self.filters.pull_address(route, mq, selector)
        except NoFilterServerError as exc:
            raise Refused(Code.UNSUPPORTED, f"SQL92 filters are served by Quiver's filter servers: {exc}") from None

    # ---- offsets --------------------------------------------------------------------------

    def update_offset(self, b, req) -> None:
        check_group_name(req.group.name)
        mq = self.queue(b, req.message_queue)
        offset = check_offset(req.offset)
        access = broker_access(b.client)
        access.call_broker(access.broker_addr(mq.broker, mq.topic),
                           rq.UpdateConsumerOffset(group=req.group.name, topic=mq.topic, queue_id=mq.queue_id,
                                                   offset=offset))

    def get_offset(self, b, req) -> int:
        check_group_name(req.group.name)
        mq = self.queue(b, req.message_queue)
        try:
            env = broker_access(b.client).call_read(mq.topic, mq.broker, rq.QueryConsumerOffset(
                group=req.group.name, topic=mq.topic, queue_id=mq.queue_id))
        except QueryNotFoundError:
            raise Refused(Code.OFFSET_NOT_FOUND, f"group {req.group.name!r} has committed no offset for "
                                                 f"{mq.topic}:{mq.broker}:{mq.queue_id}") from None
        return rq.OffsetReply.decode(env.ext).offset

    def query_offset(self, b, req) -> int:
        mq = self.queue(b, req.message_queue)
        policy = req.query_offset_policy
        if policy == QueryOffsetPolicy.BEGINNING:
            ask = rq.GetMinOffset(topic=mq.topic, queue_id=mq.queue_id)
        elif policy == QueryOffsetPolicy.END:
            ask = rq.GetMaxOffset(topic=mq.topic, queue_id=mq.queue_id)
        elif policy == QueryOffsetPolicy.TIMESTAMP:
            if not req.HasField("timestamp"):
                raise Refused(Code.BAD_REQUEST, "query_offset_policy TIMESTAMP needs a timestamp")
            ts = millis(req.timestamp, Code.BAD_REQUEST, "timestamp")
            if ts < 0:
                raise Refused(Code.BAD_REQUEST, f"timestamp {ts} is before 1970")
            ask = rq.SearchOffsetByTimestamp(topic=mq.topic, queue_id=mq.queue_id, timestamp=ts)
        else:
            raise Refused(Code.BAD_REQUEST, f"query_offset_policy {policy} is not BEGINNING, END or TIMESTAMP")
        return rq.OffsetReply.decode(broker_access(b.client).call_read(mq.topic, mq.broker, ask).ext).offset
