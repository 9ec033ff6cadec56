"""The Kafka gateway process: a TCP server speaking Kafka's protocol, PING/STATUS on --listen.

One thread per Kafka connection reads requests and answers them in request order, as the
protocol wants (outbox.py: the reader writes what is ready at once); a Produce's sends go to the
brokers at once and its answer is written when their replies come, so a client's pipelined
produces overlap. A frame over --max-request-bytes, or one whose
header does not parse, closes that connection only; an API or version not served is answered
with UNSUPPORTED_VERSION; a handler's failure is logged and answered as UNKNOWN_SERVER_ERROR
in the API's own response. The gateway holds no messages: every call goes to the brokers
through the SDK (handlers.py).
"""

import logging
import socket
import ssl
import struct
import threading
from dataclasses import dataclass

from kio.schema.index import api_key_map

from quiver.runtime.settings import advertised_addr
from quiver.wire.curve import read_credentials

from . import fetchframe, protocol
from .configs import Configs
from .groups import Coordinator
from .handlers import Gateway
from .offsets import Offsets
from .outbox import Deferred, Outbox
from .sasl import ILLEGAL_SASL_STATE, MECHANISMS, SASL_AUTHENTICATION_FAILED, Session, load_users
from .topics import Topics

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
ACCEPT_TIMEOUT_S = 0.5
GROUP_EXPIRY_S = 1.0   # how often members past their session timeout are dropped
TLS_HANDSHAKE_S = 10.0


class App:
    def __init__(self, config):
        from quiver.runtime.service import Service
        self.config = config
        self.service = Service(config.listen, {}, "kafka", self.status, security=_status_security(config))
        self.users = load_users(config.sasl_users) if config.sasl_users else {}
        self.tls = None
        if config.tls_cert:
            self.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.tls.minimum_version = ssl.TLSVersion.TLSv1_2
            self.tls.load_cert_chain(config.tls_cert, config.tls_key)
        self._user_gateways: dict[str, Gateway] = {}
        self.gateway = None
        self.groups = Coordinator()
        self.sock = None
        self.port = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self.closed_oversize = 0
        self.closed_bad = 0

    def status(self) -> dict:
        return {"role": "kafka", "kafka": self.config.kafka_listen, "kafka_port": self.port,
                "advertised": f"{self.gateway.host}:{self.gateway.port}" if self.gateway else "",
                "namesrv": self.config.namesrv, "connections": len(self._conns),
                "closed_oversize": self.closed_oversize, "closed_bad": self.closed_bad,
                "groups": {name: len(g.members) for name, g in list(self.groups.groups.items())},
                "answers": {f"{api}/{err}": n for (api, err), n in sorted(self.gateway.counts.items())}
                if self.gateway else {},
                "fetch": dict(self.gateway.fetched) if self.gateway else {}}

    def bind(self) -> None:
        host, port = self.config.kafka_listen.rsplit(":", 1)
        self.sock = socket.create_server((host, int(port)), reuse_port=False, backlog=128)
        self.sock.settimeout(ACCEPT_TIMEOUT_S)
        self.port = self.sock.getsockname()[1]
        adv = advertised_addr(f"{host}:{self.port}", self.config.advertise)
        adv_host, adv_port = adv.rsplit(":", 1)
        self.service.bind()
        protocol.preload()
        own = read_credentials(self.config.key_file) if self.config.key_file else None
        self.gateway = self._new_gateway(adv_host, int(adv_port), own)
        self.service.every("kafka-group-expiry", GROUP_EXPIRY_S, self.groups.expire)
        log.info("Kafka protocol on %s:%d, advertised as %s (name servers %s)", host, self.port, adv,
                 self.config.namesrv)

    def _new_gateway(self, host: str, port: int, credentials, shared=None) -> Gateway:
        gw = Gateway(self.config, host, port, credentials, shared)
        gw.apis.update(Offsets(gw, self.groups).apis())
        gw.apis.update(self.groups.apis())
        topics = Topics(gw)
        gw.apis.update(topics.apis())
        gw.apis.update(Configs(topics).apis())
        return gw

    def _gateway_for(self, user: str) -> Gateway:
        """The SDK clients acting as a SASL user, made on first use."""
        with self._lock:
            gw = self._user_gateways.get(user)
            if gw is None:
                gw = self._user_gateways[user] = self._new_gateway(self.gateway.host, self.gateway.port,
                                                                   self.users[user][1], self.gateway)
            return gw

    def run(self) -> None:
        if self.sock is None:
            self.bind()
        acceptor = threading.Thread(target=self._accept, name="kafka-accept", daemon=True)
        acceptor.start()
        try:
            self.service.run()
        finally:
            self._stop.set()
            acceptor.join(5)
            with self._lock:
                for c in list(self._conns):
                    _close(c)
            self.sock.close()
            for gw in (self.gateway, *self._user_gateways.values()):
                gw.shutdown()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, peer = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                if self._stop.is_set():
                    return
                log.exception("accept failed")
                continue
            with self._lock:
                if len(self._conns) >= self.config.max_connections:
                    log.warning("refused %s: %d connections open (--max-connections)", peer, len(self._conns))
                    _close(conn)
                    continue
                self._conns.add(conn)
            threading.Thread(target=self._serve, args=(conn, peer), name=f"kafka-{peer[1]}", daemon=True).start()

    def _serve(self, conn: socket.socket, peer) -> None:
        """Read requests and answer them in order (_Outbox: this thread writes what is ready)."""
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.tls is not None:
            raw = conn
            try:   # the handshake on this connection's thread: a slow or bad client holds only itself
                raw.settimeout(TLS_HANDSHAKE_S)
                conn = self.tls.wrap_socket(raw, server_side=True)
                conn.settimeout(None)
            except OSError as exc:   # ssl.SSLError is one
                log.warning("closed %s: TLS handshake failed: %s", peer, exc)
                with self._lock:
                    self._conns.discard(raw)
                _close(raw)
                return
            with self._lock:
                self._conns.discard(raw)
                self._conns.add(conn)
        out = Outbox(conn)
        conn_state = _Conn(None, Session(self.users)) if self.users else _Conn(self.gateway, None)
        writer = threading.Thread(target=out.write_rest, name=f"kafka-w-{peer[1]}", daemon=True)
        writer.start()
        try:
            while not self._stop.is_set():
                head = _read(conn, 4)
                if head is None:
                    return
                size = _SIZE.unpack(head)[0]
                if not 0 < size <= self.config.max_request_bytes:
                    self.closed_oversize += 1
                    log.warning("closed %s: a %d-byte frame (--max-request-bytes %d)", peer, size,
                                self.config.max_request_bytes)
                    return
                frame = _read(conn, size)
                if frame is None:
                    return
                answer = self.answer(frame, peer, conn_state)
                if answer is None:
                    return
                out.put(answer)
        except OSError:
            pass   # the client went away
        except Exception:   # a request that breaks the gateway's code: this connection ends, no other
            log.exception("closed %s: its request could not be answered", peer)
        finally:
            out.close(self.config.request_timeout_ms / 1000 + 5)
            writer.join(5)
            with self._lock:
                self._conns.discard(conn)
            _close(conn)

    def answer(self, frame: bytes, peer=None, conn: "_Conn | None" = None):
        """What answers one request frame: its bytes (b"" for none: acks=0), a Deferred giving them
        once its sends are answered, or None: close the connection."""
        conn = conn or _Conn(self.gateway, None)
        try:
            req = protocol.parse(frame)
        except protocol.BadRequest as exc:
            self.closed_bad += 1
            log.warning("closed %s: %s", peer, exc)
            return None
        if req.body is None:
            return protocol.unsupported(req)
        if req.api_key in (protocol.SASL_HANDSHAKE, protocol.SASL_AUTHENTICATE):
            values = self._sasl(req, peer, conn)
        elif conn.gw is None and req.api_key != protocol.API_VERSIONS:
            log.warning("closed %s: %s before SASL authentication", peer, api_key_map.get(req.api_key, req.api_key))
            return None
        else:
            values = self._handle(req, peer, (conn.gw or self.gateway).handle, req)
        if isinstance(values, dict) and "error_code" in values:   # group calls: one error for the call
            self.gateway._count(api_key_map.get(req.api_key, str(req.api_key)), int(values["error_code"]))
        if values is None:
            return b""
        if callable(values):   # sends under way: answered once their futures are done
            return Deferred(getattr(values, "futures", ()),
                            lambda: protocol.response_frame(req, protocol.response(req, self._handle(req, peer, values))))
        if req.api_key == protocol.FETCH:   # its records sent from where they are, not copied into one buffer
            return fetchframe.frame(req, values) or protocol.response_frame(req, protocol.response(req, values))
        return protocol.response_frame(req, protocol.response(req, values))

    def _sasl(self, req, peer, conn: "_Conn") -> dict:
        if conn.session is None or conn.gw is not None:
            return {"error_code": ILLEGAL_SASL_STATE, "error_message": "no SASL here, or already authenticated",
                    "mechanisms": list(MECHANISMS) if conn.session else []}
        values = self._handle(req, peer, conn.session.apis()[req.api_key], req.body)
        if conn.session.user is not None:
            conn.gw = self._gateway_for(conn.session.user)
            log.info("%s authenticated as %s (%s)", peer, conn.session.user, conn.session.mechanism)
        elif values.get("error_code") == SASL_AUTHENTICATION_FAILED:
            log.warning("%s failed SASL %s authentication", peer, conn.session.mechanism)
        return values

    @staticmethod
    def _handle(req, peer, fn, *args):
        try:
            return fn(*args)
        except Exception:
            log.exception("%s v%d from %s failed", req.api_key, req.version, peer)
            return {"error_code": protocol.UNKNOWN_SERVER_ERROR}


def _read(conn: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = conn.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _close(conn: socket.socket) -> None:
    try:
        conn.close()
    except OSError:
        pass


@dataclass
class _Conn:
    """A connection's identity: the gateway (SDK clients) it acts through, None until SASL succeeds."""
    gw: Gateway | None
    session: Session | None


def _status_security(config):
    """Auth on: PING/STATUS is a CURVE server with the cluster's key, like every service's socket."""
    if not config.auth_dir:
        return None
    from quiver.runtime.security import Security
    return Security(config.auth_dir, "namesrv")
