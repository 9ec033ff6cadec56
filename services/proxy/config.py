"""Proxy settings (each a --flag and a QUIVER_* env var)."""

import os
from dataclasses import dataclass

from quiver.runtime.settings import ServiceSettings, setting
from quiver.wire.names import addr_problem, topic_problem

MESSAGE_TYPES = ("NORMAL", "FIFO", "DELAY", "TRANSACTION")


@dataclass(frozen=True)
class Config(ServiceSettings):
    """Quiver gRPC proxy: RocketMQ 5 clients (apache.rocketmq.v2.MessagingService)."""
    grpc_listen: str = setting("0.0.0.0:8081", "HOST:PORT of the gRPC MessagingService (RocketMQ 5 clients' "
                                               "endpoints)")
    listen: str = setting("0.0.0.0:10961", "HOST:PORT answering PING and STATUS, like every service")
    advertise: str = setting("", "HOST:PORT clients are told to use in routes; empty: the address the client "
                                 "reached the proxy by")
    auth_dir: str = setting("", "auth on: the cluster's auth dir; the proxy's SDK clients use its admin.key "
                                "(unless --credentials names another key)")
    credentials: str = setting("", "auth on: the key file the proxy's SDK clients use")
    access_keys: str = setting("", "auth on: JSON file {access key: {secret, credentials: a Quiver user's key "
                                   "file}}: RocketMQ 5 clients' AK/SK, checked, each served as that user")
    serve_unverified: bool = setting(False, "auth on, no --access-keys: serve RocketMQ 5 clients anyway, all with "
                                            "the proxy's key; off: every RPC answers UNAUTHORIZED")
    grpc_threads: int = setting(256, "gRPC worker threads: each connected client's telemetry stream holds one, "
                                     "each long-polling receive another")
    max_streams: int = setting(0, "Telemetry streams open at once, all clients (each holds a gRPC worker "
                                  "thread; the other workers serve calls); 0: half of --grpc-threads")
    max_streams_per_key: int = setting(16, "Telemetry streams open at once per access key (one per client "
                                           "instance), at most --max-streams; more are TOO_MANY_REQUESTS")
    max_calls_per_key: int = setting(0, "long polls (ReceiveMessage, PullMessage) in flight per access key; more "
                                        "are TOO_MANY_REQUESTS (unary calls wait in the pool's queue); 0: half of "
                                        "the workers the streams leave")
    signature_window_s: int = setting(900, "auth on: a signature's x-mq-date-time must be within this many "
                                           "seconds of the proxy's clock (UTC or local time)")
    request_timeout_ms: int = setting(3000, "how long one broker request waits")
    max_body_bytes: int = setting(4 * 1024 * 1024, "largest message body accepted")
    default_invisible_ms: int = setting(30_000, "invisible duration of a receive that names none "
                                                "(PushConsumer), renewed until acked")
    renew_max_ms: int = setting(3 * 3600 * 1000, "longest a PushConsumer delivery is kept invisible by renewal; "
                                                 "then it comes back to the group like any unacked message")
    long_polling_ms: int = setting(5000, "long-polling time PushConsumers are told to use")
    max_long_polling_ms: int = setting(30_000, "longest long poll a receive may ask for")
    pop_consume_from: str = setting("last", "where a POP group new to a queue starts: last (RocketMQ's rule: "
                                            "at 0 while the queue's first message is in memory, else at its "
                                            "last message) or first")
    transaction_group: str = setting("proxy_tx", "producer group of transactional sends (the txn-checker asks "
                                                 "it; the proxy forwards the check to a client)")
    topic_message_types: str = setting("", "'Topic=TYPE;...' a topic accepting only TYPE (NORMAL, DELAY, "
                                           "TRANSACTION); others accept FIFO if created with order, else "
                                           "NORMAL, DELAY and TRANSACTION")

    def __post_init__(self):
        for flag, value in (("--grpc-listen", self.grpc_listen), ("--listen", self.listen)):
            host, sep, port = value.rpartition(":")
            if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
                raise ValueError(f"{flag} {value!r}: use HOST:PORT")
        if self.advertise and addr_problem(self.advertise):
            raise ValueError(f"--advertise {self.advertise!r}: {addr_problem(self.advertise)}")
        if not 4 <= self.grpc_threads <= 1024:
            raise ValueError("--grpc-threads must be in 4..1024")
        if not 0 <= self.max_streams < self.grpc_threads:
            raise ValueError("--max-streams must be in 0..--grpc-threads - 1 (the rest of the workers serve calls)")
        if not 1 <= self.max_streams_per_key <= 100_000:
            raise ValueError("--max-streams-per-key must be in 1..100000")
        if not 0 <= self.max_calls_per_key <= self.grpc_threads - self.streams_cap:
            raise ValueError("--max-calls-per-key must be in 0..--grpc-threads - --max-streams")
        if not 1 <= self.signature_window_s <= 86_400:
            raise ValueError("--signature-window-s must be in 1..86400")
        if not 100 <= self.request_timeout_ms <= 60_000:
            raise ValueError("--request-timeout-ms must be in 100..60000")
        if not 1 <= self.max_body_bytes <= 64 * 1024 * 1024:
            raise ValueError("--max-body-bytes must be in 1..67108864")
        if not 100 <= self.default_invisible_ms <= 12 * 3600 * 1000:
            raise ValueError("--default-invisible-ms must be in 100..43200000")
        if not 1000 <= self.renew_max_ms <= 24 * 3600 * 1000:
            raise ValueError("--renew-max-ms must be in 1000..86400000")
        if not 0 <= self.long_polling_ms <= self.max_long_polling_ms <= 300_000:
            raise ValueError("need 0 <= --long-polling-ms <= --max-long-polling-ms <= 300000")
        if self.pop_consume_from not in ("first", "last"):
            raise ValueError("--pop-consume-from is first or last")
        self.message_types()   # a bad --topic-message-types fails at start

    @property
    def streams_cap(self) -> int:
        return self.max_streams or self.grpc_threads // 2

    @property
    def calls_cap(self) -> int:
        """All calls in flight: the workers the streams leave."""
        return self.grpc_threads - self.streams_cap

    @property
    def calls_per_key_cap(self) -> int:
        return self.max_calls_per_key or max(1, self.calls_cap // 2)

    @property
    def key_file(self) -> str | None:
        if self.credentials:
            return self.credentials
        return os.path.join(self.auth_dir, "admin.key") if self.auth_dir else None

    @property
    def closed(self) -> bool:
        """Auth on without --access-keys nor --serve-unverified: no v2 client is served."""
        return self.key_file is not None and not self.access_keys and not self.serve_unverified

    def message_types(self) -> dict[str, str]:
        """--topic-message-types as {topic: type}."""
        out = {}
        for part in filter(None, (p.strip() for p in self.topic_message_types.split(";"))):
            topic, sep, kind = part.partition("=")
            topic, kind = topic.strip(), kind.strip().upper()
            if not sep or topic_problem(topic) or kind not in MESSAGE_TYPES or kind == "FIFO":
                raise ValueError(f"--topic-message-types {part!r}: use Topic=NORMAL|DELAY|TRANSACTION "
                                 "(FIFO topics are created with order)")
            out[topic] = kind
        return out
