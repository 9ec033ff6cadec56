"""apache.rocketmq.v2.MessagingService: each RPC checks its input, calls the part that owns it, answers a Status.

No peer input ends the server: a Refused becomes its code and message, a QuiverError from
the brokers its mapped code (statuses.py), anything else INTERNAL_SERVER_ERROR with the
traceback logged. Lite topics, which Quiver has no counterpart for, answer NOT_IMPLEMENTED
saying so.
"""

import collections
import logging
import queue
import threading

from rocketmq.grpc_protocol import service_pb2 as pb
from rocketmq.grpc_protocol.definition_pb2 import ClientType, Code, MessageType, TransactionSource
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceServicer

from quiver.errors import QuiverError

from .clients import QUEUE_BOUND, Clients, client_id_of
from .limits import Limits
from .messages import inbound
from .pulling import Pulling
from .receiving import check_group_name
from .routes import check_topic_name, endpoints_for
from .statuses import OK, Refused, status, status_of
from .users import Backends

log = logging.getLogger(__name__)

MAX_SEND_ENTRIES = 1   # the 5.x clients send one message per call
_STREAM_END = object()
_CODE_NAMES = {number: name for name, number in Code.items()}


def answered(response_cls):
    """Wrap an RPC `fn(self, request, context, backend)`: the caller's backend (users.py) is found
    first; whatever either raises becomes `response_cls(status=...)`."""
    def wrap(fn):
        def rpc(self, request, context):
            try:
                b = self.backends.for_call(context.invocation_metadata())
                reply = fn(self, request, context, b)   # short: capped by nothing but the pool's queue
            except (Refused, QuiverError) as exc:
                reply = response_cls(status=status_of(exc))
            except Exception as exc:
                log.exception("%s failed", fn.__name__)
                reply = response_cls(status=status_of(exc))
            self.count(fn.__name__, reply.status.code)
            return reply
        rpc.__name__ = fn.__name__
        return rpc
    return wrap


class Servicer(MessagingServiceServicer):
    def __init__(self, config, clients: Clients, backends: Backends, limits: Limits | None = None):
        self.config = config
        self.clients = clients
        self.backends = backends
        self.limits = limits or Limits.of(config)
        self.pulling = Pulling(config)
        self.counts: collections.Counter = collections.Counter()   # (rpc, code name) -> answers (metrics.py)

    def count(self, rpc: str, code: int) -> None:
        self.counts[(rpc, _CODE_NAMES.get(code) or str(code))] += 1

    def _endpoints(self, request):
        return endpoints_for(self.config.advertise, request.endpoints)

    @answered(pb.QueryRouteResponse)
    def QueryRoute(self, request, context, b):
        return pb.QueryRouteResponse(status=OK, message_queues=b.routes.queues(request.topic.name,
                                                                                   self._endpoints(request)))

    @answered(pb.QueryAssignmentResponse)
    def QueryAssignment(self, request, context, b):
        check_group_name(request.group.name)
        queues = b.routes.assignments(request.topic.name, self._endpoints(request))
        return pb.QueryAssignmentResponse(status=OK, assignments=[{"message_queue": q} for q in queues])

    @answered(pb.HeartbeatResponse)
    def Heartbeat(self, request, context, b):
        cid = client_id_of(context.invocation_metadata())
        if request.client_type == ClientType.CLIENT_TYPE_UNSPECIFIED:
            raise Refused(Code.UNRECOGNIZED_CLIENT_TYPE, "heartbeat names no client_type")
        if request.HasField("group"):
            check_group_name(request.group.name)
        self.clients.session(cid, b.access_key).client_type = request.client_type
        return pb.HeartbeatResponse(status=OK)

    @answered(pb.NotifyClientTerminationResponse)
    def NotifyClientTermination(self, request, context, b):
        cid = client_id_of(context.invocation_metadata())
        self.clients.drop(cid, b.access_key)     # FORBIDDEN for another key's client id
        b.receiving.renewals.drop_client(cid)   # what it did not ack comes back after its invisible time
        return pb.NotifyClientTerminationResponse(status=OK)

    # ---- producing ---------------------------------------------------------------------------

    @answered(pb.SendMessageResponse)
    def SendMessage(self, request, context, b):
        if len(request.messages) != MAX_SEND_ENTRIES:
            raise Refused(Code.BAD_REQUEST, "send one message per SendMessage call")
        cid = client_id_of(context.invocation_metadata())
        m = inbound(request.messages[0], self.config.max_body_bytes)
        b.routes.check_type(m.msg.topic, m.kind)
        entry = pb.SendResultEntry(status=OK)
        if m.kind == MessageType.TRANSACTION:
            self.clients.owned(cid, b.access_key)
            entry.message_id, entry.transaction_id = b.tx.send_half(m.msg)
            self.clients.published(cid, m.msg.topic, b.access_key, entry.message_id)
        else:
            if m.group is not None:
                res = b.producer.send_orderly(m.msg, m.group)
            else:   # on the IO thread: concurrent calls share its socket and travel batched
                res = b.producer.send_async(m.msg).result(b.producer.send_timeout * (b.producer.retries + 1))
            entry.message_id, entry.offset = res.msg_id, res.queue_offset
            if m.kind == MessageType.DELAY:
                entry.recall_handle = res.msg_id
        return pb.SendMessageResponse(status=OK, entries=[entry])

    @answered(pb.EndTransactionResponse)
    def EndTransaction(self, request, context, b):
        check_topic_name(request.topic.name)
        b.tx.end(request.topic.name, request.transaction_id, request.resolution,
                    from_check=request.source == TransactionSource.SOURCE_SERVER_CHECK)
        return pb.EndTransactionResponse(status=OK)

    @answered(pb.RecallMessageResponse)
    def RecallMessage(self, request, context, b):
        check_topic_name(request.topic.name)
        handle = request.recall_handle
        if not handle or len(handle) > 64 or not handle.isalnum():
            raise Refused(Code.BAD_REQUEST, "recall_handle is the send receipt's recall handle of a delayed message")
        try:
            cancelled = b.producer.cancel_scheduled(handle, request.topic.name)
        except QuiverError as exc:
            raise Refused(Code.NOT_FOUND, f"no delayed message {handle} on {request.topic.name!r}: {exc.remark}") \
                from None
        if not cancelled:
            raise Refused(Code.NOT_FOUND, f"message {handle} was already delivered: too late to recall")
        return pb.RecallMessageResponse(status=OK, message_id=handle)

    # ---- consuming ---------------------------------------------------------------------------

    def _streamed(self, rpc: str, context, call):
        """`call(backend, seconds left)` of a streaming RPC: (its result, None), or (None, the Status of what
        it raised, counted)."""
        try:
            b = self.backends.for_call(context.invocation_metadata())
            with self.limits.call(b.access_key):
                return call(b, context.time_remaining() or 30.0), None
        except Exception as exc:
            if not isinstance(exc, (Refused, QuiverError)):
                log.exception("%s failed", rpc)
            answer = status_of(exc)
            self.count(rpc, answer.code)
            return None, answer

    def ReceiveMessage(self, request, context):
        cid = next((v for k, v in context.invocation_metadata() if k == "x-mq-client-id"), "")

        def receive(b, left):
            self.clients.owned(cid, b.access_key)   # its renewals are that client's
            return b.receiving.receive(request, left, cid)
        msgs, refused = self._streamed("ReceiveMessage", context, receive)
        if refused is not None:
            yield pb.ReceiveMessageResponse(status=refused)
            return
        self.count("ReceiveMessage", Code.OK if msgs else Code.MESSAGE_NOT_FOUND)
        if msgs:   # the clients measure their receive latency from it (PushConsumer needs it)
            stamp = pb.ReceiveMessageResponse()
            stamp.delivery_timestamp.GetCurrentTime()
            yield stamp
        for pm in msgs:
            yield pb.ReceiveMessageResponse(message=pm)
        yield pb.ReceiveMessageResponse(status=OK if msgs else status(Code.MESSAGE_NOT_FOUND, "no new message"))

    @answered(pb.AckMessageResponse)
    def AckMessage(self, request, context, b):
        results = b.receiving.ack(request)
        entries = [pb.AckMessageResultEntry(message_id=e.message_id, receipt_handle=e.receipt_handle, status=s)
                   for e, s in results]
        codes = {s.code for _, s in results}
        overall = results[0][1] if len(codes) == 1 else status(Code.MULTIPLE_RESULTS, "entries differ")
        return pb.AckMessageResponse(status=overall, entries=entries)

    @answered(pb.ChangeInvisibleDurationResponse)
    def ChangeInvisibleDuration(self, request, context, b):
        return pb.ChangeInvisibleDurationResponse(status=OK, receipt_handle=b.receiving.change_invisible(request))

    @answered(pb.ForwardMessageToDeadLetterQueueResponse)
    def ForwardMessageToDeadLetterQueue(self, request, context, b):
        b.receiving.to_dead_letter(request)
        return pb.ForwardMessageToDeadLetterQueueResponse(status=OK)

    # ---- telemetry -----------------------------------------------------------------------------

    def Telemetry(self, request_iterator, context):
        try:
            b = self.backends.for_call(context.invocation_metadata())
            session = self.clients.session(client_id_of(context.invocation_metadata()), b.access_key)
            self.limits.open_stream(b.access_key)     # TOO_MANY_REQUESTS past the stream caps
        except Refused as exc:
            self.count("Telemetry", exc.code)
            yield pb.TelemetryCommand(status=status_of(exc))
            return
        session.streaming = True
        out = session.out = queue.Queue(QUEUE_BOUND)   # this stream's: a reconnect gets a fresh one
        threading.Thread(target=self._read_commands, args=(request_iterator, session, out), daemon=True,
                         name="telemetry-in").start()
        try:
            while context.is_active():
                try:
                    item = out.get(timeout=1.0)
                except queue.Empty:
                    continue
                if item is _STREAM_END:
                    break
                yield item
        finally:
            session.streaming = False
            self.limits.close_stream(b.access_key)

    def _read_commands(self, commands, session, out) -> None:
        try:
            for cmd in commands:
                if cmd.HasField("settings"):
                    try:
                        answer = self.clients.settings(session, cmd.settings)
                    except Refused as exc:
                        answer = pb.TelemetryCommand(status=status_of(exc))
                    out.put(answer)
                # thread stack traces and verify results: nothing asks for them here
        except Exception as exc:   # the stream ended or broke: its writer stops too
            log.debug("telemetry stream of %s ended: %s", session.client_id, exc)
        out.put(_STREAM_END)

    # ---- pulling (PullConsumer: the client owns its queues and offsets) --------------------------

    def PullMessage(self, request, context):
        pulled, refused = self._streamed("PullMessage", context, lambda b, left: self.pulling.pull(b, request, left))
        if refused is not None:
            yield pb.PullMessageResponse(status=refused)
            return
        answer, msgs, next_offset = pulled
        self.count("PullMessage", answer.code)
        yield pb.PullMessageResponse(status=answer)   # RocketMQ's order: status, messages, next offset
        for pm in msgs:
            yield pb.PullMessageResponse(message=pm)
        yield pb.PullMessageResponse(next_offset=next_offset)

    @answered(pb.UpdateOffsetResponse)
    def UpdateOffset(self, request, context, b):
        self.pulling.update_offset(b, request)
        return pb.UpdateOffsetResponse(status=OK)

    @answered(pb.GetOffsetResponse)
    def GetOffset(self, request, context, b):
        return pb.GetOffsetResponse(status=OK, offset=self.pulling.get_offset(b, request))

    @answered(pb.QueryOffsetResponse)
    def QueryOffset(self, request, context, b):
        return pb.QueryOffsetResponse(status=OK, offset=self.pulling.query_offset(b, request))

    # ---- not served ------------------------------------------------------------------------------

    def SyncLiteSubscription(self, request, context):
        return pb.SyncLiteSubscriptionResponse(status=status(Code.NOT_IMPLEMENTED, "lite topics are not served by "
                                                                                    "Quiver's proxy"))
