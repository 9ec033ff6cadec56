"""The proxy process: Quiver SDK clients, the gRPC server around them, PING/STATUS on --listen.

Collaborators are built here and handed to the servicer: one ClientBase for routes and POP
calls, one Producer for normal / FIFO / delayed sends, one TxProducer for half messages and
the checks the txn-checker asks, the Clients table of connected v2 clients. The gRPC server
runs on its own worker threads; this thread runs the service loop until SIGTERM.
"""

import logging
from concurrent import futures

import grpc
from rocketmq.grpc_protocol.service_pb2_grpc import add_MessagingServiceServicer_to_server

from quiver.client.base import ClientBase
from quiver.client.producer import Producer

from .clients import Clients
from .receiving import Receiving
from .routes import Routes
from .servicer import Servicer
from .transactions import TxProducer

log = logging.getLogger(__name__)


class App:
    def __init__(self, config):
        from quiver.runtime.service import Service
        self.config = config
        timeout = config.request_timeout_ms / 1000
        creds = config.key_file
        self.client = ClientBase(config.namesrv, timeout, credentials=creds)
        self.producer = Producer("proxy", config.namesrv, send_timeout=timeout, auto_batch=False,
                                 max_message_bytes=config.max_body_bytes, credentials=creds)
        self.routes = Routes(self.client, config.message_types())
        self.clients = Clients(self._is_fifo, config.long_polling_ms, config.max_body_bytes)
        self.tx = TxProducer(config.transaction_group, config.namesrv, self.clients.forward_check,
                             send_timeout=timeout, auto_batch=False, max_message_bytes=config.max_body_bytes,
                             credentials=creds)
        self.receiving = Receiving(self.client, config)
        self.servicer = Servicer(config, self.routes, self.clients, self.producer, self.tx, self.receiving,
                                 self._cancel)
        self.grpc = None
        self.grpc_port = 0
        self.service = Service(config.listen, {}, "proxy", self.status, security=_status_security(config))

    def _is_fifo(self, topic: str) -> bool:
        try:
            return self.client.route(topic).order
        except Exception:   # an unknown topic is not FIFO; the receive will say what is wrong
            return False

    def _cancel(self, msg_id: str, topic: str) -> bool:
        return self.producer.cancel_scheduled(msg_id, topic)

    def status(self) -> dict:
        return {"role": "proxy", "grpc": self.config.grpc_listen, "grpc_port": self.grpc_port,
                "namesrv": self.config.namesrv, "checks_forwarded": self.tx.checks_forwarded, **self.clients.count()}

    def bind(self) -> None:
        for c in (self.client, self.producer, self.tx):
            c.start()
        self.grpc = grpc.server(futures.ThreadPoolExecutor(self.config.grpc_threads, thread_name_prefix="grpc"),
                                options=[("grpc.max_receive_message_length", self.config.max_body_bytes + (1 << 20)),
                                         ("grpc.so_reuseport", 0)])
        add_MessagingServiceServicer_to_server(self.servicer, self.grpc)
        self.grpc_port = self.grpc.add_insecure_port(self.config.grpc_listen)
        if not self.grpc_port:
            raise OSError(f"cannot listen on {self.config.grpc_listen}")
        self.service.bind()
        log.info("gRPC MessagingService on %s (name servers %s)", self.config.grpc_listen, self.config.namesrv)

    def run(self) -> None:
        if self.grpc is None:
            self.bind()
        self.grpc.start()
        try:
            self.service.run()
        finally:
            self.grpc.stop(grace=1.0).wait(5)
            for c in (self.tx, self.producer, self.client):
                c.shutdown()


def _status_security(config):
    """Auth on: PING/STATUS is a CURVE server with the cluster's key, like every service's socket
    (the name server's key stands in for the service key it makes no calls under)."""
    if not config.auth_dir:
        return None
    from quiver.runtime.security import Security
    return Security(config.auth_dir, "namesrv")
