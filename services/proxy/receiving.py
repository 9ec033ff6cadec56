"""ReceiveMessage, AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue over Quiver's POP.

A receive pops the broker of the queue the client chose (POP reads all of that broker's
queues of the topic), long-polling up to the client's long_polling_timeout (capped by
--max-long-polling-ms and by the call's own deadline), each message invisible to the group
for the client's invisible_duration (--default-invisible-ms when it names none: a
PushConsumer). Receipt handles are Quiver's (quiver.wire.receipt_handle), so an ack needs
no state here. Forwarding to the DLQ needs the message's CommitLog offset, which the handle
does not carry: the proxy remembers it for the last `DLQ_MEMORY` deliveries it made (an older
handle is INVALID_RECEIPT_HANDLE: let the delivery expire, the broker sends it to the DLQ
at the group's max).
"""

import collections
import threading

from rocketmq.grpc_protocol.definition_pb2 import Code, FilterType
from rocketmq.grpc_protocol.definition_pb2 import Status

from quiver.client.popping import Popper
from quiver.errors import QuiverError
from quiver.wire import requests as rq
from quiver.wire.names import group_problem, shown
from quiver.wire.receipt_handle import MAX_INVISIBLE_MS, MIN_INVISIBLE_MS, ReceiptHandle

from .messages import millis, outbound
from .routes import check_topic_name
from .statuses import OK, Refused, status_of

MAX_BATCH = 32
MAX_ACK_ENTRIES = 64
MAX_EXPRESSION_CHARS = 1024
DLQ_MEMORY = 100_000
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


class Receiving:
    """`client`: a started ClientBase (routes, broker calls); `config`: the proxy's Config."""

    def __init__(self, client, config):
        self.client = client
        self.config = config
        self._poppers: dict[str, Popper] = {}
        self._phys: collections.OrderedDict[str, tuple[int, str]] = collections.OrderedDict()
        self._lock = threading.Lock()

    def _popper(self, group: str) -> Popper:
        with self._lock:
            p = self._poppers.get(group)
            if p is None:
                if len(self._poppers) >= POPPERS_KEPT:
                    self._poppers.pop(next(iter(self._poppers)))
                p = self._poppers[group] = Popper(self.client, group, consume_from=self.config.pop_consume_from)
            return p

    def _remember(self, handle: str, phys: int, msg_id: str) -> None:
        with self._lock:
            self._phys[handle] = (phys, msg_id)
            while len(self._phys) > DLQ_MEMORY:
                self._phys.popitem(last=False)

    # ---- receive ----------------------------------------------------------------------------

    def receive(self, req, time_left_s: float):
        """The messages (v2) and the invisible ms they were popped with; Refused on bad input."""
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
        poll_ms = millis(req.long_polling_timeout, Code.ILLEGAL_POLLING_TIME, "long_polling_timeout") \
            if req.HasField("long_polling_timeout") else 0
        if not 0 <= poll_ms <= self.config.max_long_polling_ms:
            raise Refused(Code.ILLEGAL_POLLING_TIME, f"long_polling_timeout is 0..{self.config.max_long_polling_ms} "
                                                     f"ms, not {poll_ms}")
        poll_ms = int(max(0, min(poll_ms, (time_left_s - 1.0) * 1000)))   # answer before the client gives up
        brokers = {q.broker for q in self.client.route(mq.topic.name).read_queues}
        if mq.broker.name not in brokers:
            raise Refused(Code.BAD_REQUEST, f"broker {shown(mq.broker.name)} serves no readable queue of "
                                            f"{mq.topic.name!r}: query the route again")
        msgs = self._popper(group).pop_broker(mq.topic.name, expression, mq.broker.name, req.batch_size,
                                              invisible, poll_ms)
        for m in msgs:
            self._remember(m.receipt_handle, m.commit_log_offset, m.msg_id)
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
                h = parse_handle(e.receipt_handle, req.topic.name)
                addr = self.client.broker_addr(h.broker, h.topic)
                self.client.call_broker(addr, rq.AckMessage(group=req.group.name, topic=h.topic, handles=[h]))
                out.append((e, OK))
            except (Refused, QuiverError) as exc:
                out.append((e, status_of(exc)))
        return out

    def change_invisible(self, req) -> str:
        check_group_name(req.group.name)
        check_topic_name(req.topic.name)
        h = parse_handle(req.receipt_handle, req.topic.name)
        ms = invisible_of(req.invisible_duration)
        addr = self.client.broker_addr(h.broker, h.topic)
        env = self.client.call_broker(addr, rq.ChangeInvisibleDuration(group=req.group.name, topic=h.topic, handle=h,
                                                                       invisible_ms=ms))
        new = rq.ChangeInvisibleReply.decode(env.ext).handle.encode()
        with self._lock:
            known = self._phys.pop(req.receipt_handle, None)
        if known is not None:
            self._remember(new, *known)
        return new

    def to_dead_letter(self, req) -> None:
        group, topic = req.group.name, req.topic.name
        check_group_name(group)
        check_topic_name(topic)
        h = parse_handle(req.receipt_handle, topic)
        with self._lock:
            known = self._phys.get(req.receipt_handle)
        if known is None:
            raise Refused(Code.INVALID_RECEIPT_HANDLE, "this proxy did not deliver that receipt handle recently: "
                                                       "let it expire (the broker moves it to the DLQ at the max)")
        phys, msg_id = known
        addr = self.client.broker_addr(h.broker, topic)
        self.client.call_broker(addr, rq.ConsumerSendMsgBack(group=group, offset=phys, delay_level=-1,
                                                             origin_topic=topic, origin_msg_id=msg_id,
                                                             reconsume=h.reconsume))
        self.client.call_broker(addr, rq.AckMessage(group=group, topic=topic, handles=[h]))
        with self._lock:
            self._phys.pop(req.receipt_handle, None)
