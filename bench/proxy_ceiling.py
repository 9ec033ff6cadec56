"""The ceiling of a RocketMQ 5 client on this machine: a MessagingService that answers at once.

    python -m bench.proxy_ceiling --port PORT [--body-size 1024]

Serves what the 5.x Producer and SimpleConsumer call (QueryRoute, Heartbeat, Telemetry,
SendMessage, ReceiveMessage, AckMessage) with no broker behind it: a send is answered
from the request, a receive gets up to its batch size of canned messages, an ack is OK.
What a client reaches against it is what that client can do at all here; bench/proxy.py
runs it next to quiver_proxy so a ratio names the proxy's share, not the client's.
Binds 127.0.0.1 only; prints "ready" once serving.
"""

import argparse
import itertools
import zlib
from concurrent import futures

import grpc
from rocketmq.grpc_protocol import service_pb2 as pb
from rocketmq.grpc_protocol.definition_pb2 import Code, DigestType, Encoding, MessageType, Permission
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceServicer, add_MessagingServiceServicer_to_server

QUEUES = 4


def _ok(reply):
    reply.status.code = Code.OK
    return reply


class NullService(MessagingServiceServicer):
    def __init__(self, body_size: int):
        self.body = b"x" * body_size
        self.crc = f"{zlib.crc32(self.body) & 0xFFFFFFFF:08X}"
        self.ids = itertools.count(1)

    def QueryRoute(self, request, context):
        reply = _ok(pb.QueryRouteResponse())
        for qid in range(QUEUES):
            q = reply.message_queues.add(id=qid, permission=Permission.READ_WRITE)
            q.topic.CopyFrom(request.topic)
            q.broker.name, q.broker.id = "null", 0
            q.broker.endpoints.CopyFrom(request.endpoints)
            q.accept_message_types.append(MessageType.NORMAL)
        return reply

    def QueryAssignment(self, request, context):
        return _ok(pb.QueryAssignmentResponse())

    def Heartbeat(self, request, context):
        return _ok(pb.HeartbeatResponse())

    def Telemetry(self, request_iterator, context):
        for cmd in request_iterator:
            if cmd.HasField("settings"):
                answer = _ok(pb.TelemetryCommand())
                answer.settings.CopyFrom(cmd.settings)
                if cmd.settings.HasField("subscription"):
                    answer.settings.subscription.receive_batch_size = 32
                yield answer

    def SendMessage(self, request, context):
        reply = _ok(pb.SendMessageResponse())
        for i, m in enumerate(request.messages):
            e = reply.entries.add(message_id=m.system_properties.message_id, offset=i)
            e.status.code = Code.OK
        return reply

    def ReceiveMessage(self, request, context):
        for _ in range(max(1, min(request.batch_size, 1024))):
            r = pb.ReceiveMessageResponse()
            r.message.topic.CopyFrom(request.message_queue.topic)
            r.message.body = self.body
            sp = r.message.system_properties
            sp.message_id = sp.receipt_handle = f"null-{next(self.ids)}"
            sp.body_digest.type, sp.body_digest.checksum = DigestType.CRC32, self.crc
            sp.body_encoding, sp.message_type = Encoding.IDENTITY, MessageType.NORMAL
            sp.born_timestamp.GetCurrentTime()
            sp.delivery_attempt = 1
            yield r
        yield _ok(pb.ReceiveMessageResponse())

    def AckMessage(self, request, context):
        reply = _ok(pb.AckMessageResponse())
        for e in request.entries:
            entry = reply.entries.add(message_id=e.message_id, receipt_handle=e.receipt_handle)
            entry.status.code = Code.OK
        return reply


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--body-size", type=int, default=1024)
    args = ap.parse_args(argv)
    server = grpc.server(futures.ThreadPoolExecutor(64))
    add_MessagingServiceServicer_to_server(NullService(args.body_size), server)
    if not server.add_insecure_port(f"127.0.0.1:{args.port}"):
        raise SystemExit(f"cannot listen on 127.0.0.1:{args.port}")
    server.start()
    print("ready", flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
