"""ReceiveMessage, AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue over Quiver's POP.

A receive pops the broker of the queue the client chose (POP reads all of that broker's
queues of the topic), long-polling up to the client's long_polling_timeout (capped by
--max-long-polling-ms and by the call's own deadline), each message invisible to the group
for the client's invisible_duration (--default-invisible-ms when it names none: a
PushConsumer). Receipt handles are Quiver's (quiver.wire.receipt_handle), so nothing about a
delivery is kept here: any proxy serves any handle, before or after a restart. Forwarding to
the DLQ reads the message at the handle's queue offset (the send-back needs its CommitLog
offset, which the handle does not carry), holds the delivery with a change of invisible time
(a stale handle is refused before anything is copied, so two forwards of one delivery make
one DLQ copy), sends it back to %DLQ%<group> and acks the held delivery.
"""

import threading

from rocketmq.grpc_protocol.definition_pb2 import Code, FilterType
from rocketmq.grpc_protocol.definition_pb2 import Status

from quiver.client import queue_puller
from quiver.client.access import broker_access
from quiver.client.popping import Popper
from quiver.errors import QuiverError
from quiver.wire import requests as rq
from quiver.wire.names import group_problem, shown
from quiver.wire.receipt_handle import MAX_INVISIBLE_MS, MIN_INVISIBLE_MS, ReceiptHandle

from .messages import millis, outbound
from .renewals import Renewals
from .routes import check_topic_name
from .statuses import OK, Refused, status_of

MAX_BATCH = 32
MAX_ACK_ENTRIES = 64
MAX_EXPRESSION_CHARS = 1024
MAX_MESSAGE_ID_CHARS = 128
POPPERS_KEPT = 4096


def check_group_name(name: str) -> None:
    problem = group_problem(name)
    if problem:
        raise Refused(Code.ILLEGAL_CONSUMER_GROUP, problem)


def parse_handle(text: str, topic: str) -> ReceiptHandle:
    try:
        h = ReceiptHandle.parse(text)
    except ValueError as exc:
        raise Refused(Code.INVALID_RECEIPT_HANDLE, str(exc)) from None
    if h.topic != topic:
        raise Refused(Code.INVALID_RECEIPT_HANDLE, f"the receipt handle is of topic {h.topic!r}, not {topic!r}")
    return h


def invisible_of(duration, what: str = "invisible_duration") -> int:
    ms = millis(duration, Code.ILLEGAL_INVISIBLE_TIME, what)
    if not MIN_INVISIBLE_MS <= ms <= MAX_INVISIBLE_MS:
        raise Refused(Code.ILLEGAL_INVISIBLE_TIME, f"{what} is {MIN_INVISIBLE_MS} ms .. 12 h, not {ms} ms")
    return ms


def poll_ms_of(req, max_ms: int, time_left_s: float) -> int:
    """The long poll a receive or pull asks for (ILLEGAL_POLLING_TIME outside 0..max_ms), cut to answer
    before the client gives up."""
    ms = millis(req.long_polling_timeout, Code.ILLEGAL_POLLING_TIME, "long_polling_timeout") \
        if req.HasField("long_polling_timeout") else 0
    if not 0 <= ms <= max_ms:
        raise Refused(Code.ILLEGAL_POLLING_TIME, f"long_polling_timeout is 0..{max_ms} ms, not {ms}")
    return int(max(0, min(ms, (time_left_s - 1.0) * 1000)))


class Receiving:
    """`client`: a started ClientBase (routes, broker calls); `config`: the proxy's Config."""

    def __init__(self, client, config):
        self.client = broker_access(client)   # routes, broker calls, POP
        self.config = config
        self._poppers: dict[str, Popper] = {}
        self._lock = threading.Lock()
        self.renewals = Renewals(self._change, config.default_invisible_ms, config.renew_max_ms)

    def _popper(self, group: str) -> Popper:
        with self._lock:
            p = self._poppers.get(group)
            if p is None:
                if len(self._poppers) >= POPPERS_KEPT:
                    self._poppers.pop(next(iter(self._poppers)))
                p = self._poppers[group] = Popper(self.client, group, consume_from=self.config.pop_consume_from)
            return p

    # ---- receive ----------------------------------------------------------------------------

    def receive(self, req, time_left_s: float, client_id: str = ""):
        """The messages (v2), popped for the invisible time asked (else --default-invisible-ms, renewed
        until acked when the request says auto_renew: a PushConsumer's); Refused on bad input."""
        group, mq = req.group.name, req.message_queue
        check_group_name(group)
        check_topic_name(mq.topic.name)
        expression = "*"
        if req.HasField("filter_expression"):
            if req.filter_expression.type == FilterType.SQL:
                raise Refused(Code.ILLEGAL_FILTER_EXPRESSION, "receive filters by TAG only through this proxy")
            expression = req.filter_expression.expression.strip() or "*"
            if len(expression) > MAX_EXPRESSION_CHARS or not expression.isprintable():
                raise Refused(Code.ILLEGAL_FILTER_EXPRESSION, f"tag expression {shown(expression)} is over "
                                                              f"{MAX_EXPRESSION_CHARS} characters or not printable")
        if not 1 <= req.batch_size <= MAX_BATCH:
            raise Refused(Code.BAD_REQUEST, f"batch_size is 1..{MAX_BATCH}, not {req.batch_size}")
        invisible = invisible_of(req.invisible_duration) if req.HasField("invisible_duration") \
            else self.config.default_invisible_ms
        poll_ms = poll_ms_of(req, self.config.max_long_polling_ms, time_left_s)
        brokers = {q.broker for q in self.client.route(mq.topic.name).read_queues}
        if mq.broker.name not in brokers:
            raise Refused(Code.BAD_REQUEST, f"broker {shown(mq.broker.name)} serves no readable queue of "
                                            f"{mq.topic.name!r}: query the route again")
        msgs = self._popper(group).pop_broker(mq.topic.name, expression, mq.broker.name, req.batch_size,
                                              invisible, poll_ms)
        if req.auto_renew and not req.HasField("invisible_duration"):
            self.renewals.track(client_id, group, [ReceiptHandle.parse(m.receipt_handle) for m in msgs])
        return [outbound(m, invisible) for m in msgs]

    # ---- ack, change, dlq ---------------------------------------------------------------------

    def ack(self, req) -> list[tuple[object, Status]]:
        check_group_name(req.group.name)
        check_topic_name(req.topic.name)
        if not 1 <= len(req.entries) <= MAX_ACK_ENTRIES:
            raise Refused(Code.BAD_REQUEST, f"an ack carries 1..{MAX_ACK_ENTRIES} entries")
        out = []
        for e in req.entries:
            try:
                h = parse_handle(self.renewals.take(e.receipt_handle), req.topic.name)
                addr = self.client.broker_addr(h.broker, h.topic)
                self.client.call_broker(addr, rq.AckMessage(group=req.group.name, topic=h.topic, handles=[h]))
                out.append((e, OK))
            except (Refused, QuiverError) as exc:
                out.append((e, status_of(exc)))
        return out

    def change_invisible(self, req) -> str:
        check_group_name(req.group.name)
        check_topic_name(req.topic.name)
        h = parse_handle(self.renewals.take(req.receipt_handle), req.topic.name)
        return self._change(req.group.name, h, invisible_of(req.invisible_duration)).encode()

    def _change(self, group: str, h: ReceiptHandle, invisible_ms: int) -> ReceiptHandle:
        addr = self.client.broker_addr(h.broker, h.topic)
        env = self.client.call_broker(addr, rq.ChangeInvisibleDuration(group=group, topic=h.topic, handle=h,
                                                                       invisible_ms=invisible_ms))
        return rq.ChangeInvisibleReply.decode(env.ext).handle

    def to_dead_letter(self, req) -> None:
        group, topic = req.group.name, req.topic.name
        check_group_name(group)
        check_topic_name(topic)
        h = parse_handle(self.renewals.take(req.receipt_handle), topic)
        if len(req.message_id) > MAX_MESSAGE_ID_CHARS or not req.message_id.isprintable():
            raise Refused(Code.ILLEGAL_MESSAGE_ID, f"message_id {shown(req.message_id)} is over "
                                                   f"{MAX_MESSAGE_ID_CHARS} characters or not printable")
        m = self._message_at(h)
        if req.message_id and req.message_id != m.msg_id:
            raise Refused(Code.INVALID_RECEIPT_HANDLE, f"the receipt handle names message {m.msg_id}, not "
                                                       f"{req.message_id}")
        # held for the two calls below (a forward that fails midway is delivered again, not lost);
        # RECEIPT_HANDLE_EXPIRED here: that delivery is over, nothing was copied
        held = self._change(group, h, 2 * self.config.request_timeout_ms + 1000)
        addr = self.client.broker_addr(h.broker, topic)
        self.client.call_broker(addr, rq.ConsumerSendMsgBack(group=group, offset=m.commit_log_offset, delay_level=-1,
                                                             origin_topic=topic, origin_msg_id=m.msg_id,
                                                             reconsume=h.reconsume))
        self.client.call_broker(addr, rq.AckMessage(group=group, topic=topic, handles=[held]))

    def _message_at(self, h: ReceiptHandle):
        """The message at the handle's queue offset (`quiver msg get`'s read), Refused when it is gone."""
        addr = self.client.read_addr(h.topic, h.broker) or self.client.broker_addr(h.broker, h.topic)
        pulled = queue_puller.fetch(self.client, addr, queue_puller.request(h.topic, h.queue_id, h.offset, max_msgs=1))
        found = [m for m in pulled.messages(h.broker) if m.queue_offset == h.offset] \
            if pulled.status is queue_puller.FOUND else []
        if not found:
            raise Refused(Code.INVALID_RECEIPT_HANDLE, f"no message at {h.topic}:{h.broker}:{h.queue_id} offset "
                                                       f"{h.offset} (deleted by retention?)")
        return found[0]
