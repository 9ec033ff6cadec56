"""The proxy process: the gRPC server around Quiver's SDK, PING/STATUS on --listen.

Collaborators are built here and handed to the servicer: the Clients table of connected v2
clients and the Backends (users.py: the SDK clients each caller acts through, the proxy's
own for auth off). The gRPC server runs on its own worker threads; this thread runs the
service loop until SIGTERM.
"""

import logging
import threading
from concurrent import futures

import grpc
import zmq
from rocketmq.grpc_protocol.service_pb2_grpc import add_MessagingServiceServicer_to_server

from .clients import Clients
from .grants import Grants
from .limits import Limits
from .servicer import Servicer
from .users import Backends

log = logging.getLogger(__name__)

SOCKETS_PER_WORKER = 16   # room for 8 brokers (socket + disconnect monitor each)
RENEW_INTERVAL_S = 1.0


class App:
    def __init__(self, config):
        from quiver.runtime.service import Service
        # a blocking SDK call runs on the gRPC worker's own sockets (quiver/wire/direct.py): two per
        # broker each, so zmq's default of 1023 sockets would refuse calls once many workers are busy
        zmq.Context.instance().set(zmq.MAX_SOCKETS, SOCKETS_PER_WORKER * config.grpc_threads + 1024)
        self.config = config
        self.clients = Clients(self._is_fifo, config.long_polling_ms, config.max_body_bytes)
        self.backends = None
        self.grants = None
        self.limits = Limits.of(config)
        self.servicer = None
        self.grpc = None
        self.grpc_port = 0
        self.service = Service(config.listen, {}, "proxy", self.status, security=_status_security(config))
        self._stop = threading.Event()

    def _is_fifo(self, topic: str) -> bool:
        from quiver.client.access import broker_access
        try:
            return broker_access(self.backends.own.client).route(topic).order
        except Exception:   # an unknown topic is not FIFO; the receive will say what is wrong
            return False

    def _renew(self) -> None:
        """PushConsumer deliveries kept invisible until acked (renewals.py), every backend's; and the
        ACL snapshot the proxy's own decisions follow (grants.py)."""
        while not self._stop.wait(RENEW_INTERVAL_S):
            for b in self.backends.every():
                try:
                    b.receiving.renewals.renew_due()
                except Exception:    # the loop outlives any round
                    log.exception("renewal round failed")
            try:
                self.grants.refresh()
            except Exception:
                log.exception("ACL snapshot refresh failed")

    def checks_forwarded(self) -> int:
        return sum(b.tx.checks_forwarded for b in self.backends.every()) if self.backends else 0

    def status(self) -> dict:
        users = len(self.backends.every()) - 1 if self.backends else 0
        return {"role": "proxy", "grpc": self.config.grpc_listen, "grpc_port": self.grpc_port,
                "namesrv": self.config.namesrv, "checks_forwarded": self.checks_forwarded(),
                "access_key_users": users, "closed": self.config.closed, **self.clients.count(),
                "renewing": sum(len(b.receiving.renewals) for b in self.backends.every()) if self.backends else 0,
                **self.limits.counts()}

    def bind(self) -> None:
        self.backends = Backends(self.config, self.clients.forward_check)
        self.grants = self.clients.grants = Grants(self.backends.own.client, self.backends.keys)
        self.grants.refresh()
        self.servicer = Servicer(self.config, self.clients, self.backends, self.limits)
        # grpcio's synchronous server: each RPC holds a worker for its whole life (a Telemetry stream as
        # long as its client is connected), hence the caps of limits.py. grpc.aio, whose streams hold
        # none, cost ~60 % more proxy CPU per message here (bench.proxy), so it is not used.
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
        renewer = threading.Thread(target=self._renew, name="renewals", daemon=True)
        renewer.start()
        try:
            self.service.run()
        finally:
            self._stop.set()
            self.grpc.stop(grace=1.0).wait(5)
            renewer.join(5)
            self.backends.shutdown()


def _status_security(config):
    """Auth on: PING/STATUS is a CURVE server with the cluster's key, like every service's socket
    (the name server's key stands in for the service key it makes no calls under)."""
    if not config.auth_dir:
        return None
    from quiver.runtime.security import Security
    return Security(config.auth_dir, "namesrv")
