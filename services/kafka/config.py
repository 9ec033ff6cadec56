"""Kafka gateway settings (each a --flag and a QUIVER_* env var)."""

import os
from dataclasses import dataclass

from quiver.runtime.settings import ServiceSettings, setting
from quiver.wire.names import addr_problem


def _host_port(flag: str, value: str) -> None:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{flag} {value!r}: use HOST:PORT")


@dataclass(frozen=True)
class Config(ServiceSettings):
    """Quiver Kafka gateway: Kafka clients (librdkafka, the Java client ...) over Quiver topics."""
    kafka_listen: str = setting("0.0.0.0:9092", "HOST:PORT Kafka clients connect to (bootstrap.servers)")
    listen: str = setting("0.0.0.0:10971", "HOST:PORT answering PING and STATUS, like every service")
    advertise: str = setting("", "HOST:PORT Metadata hands out as the broker's address; empty: --kafka-listen "
                                 "(a wildcard host replaced by this machine's hostname)")
    max_request_bytes: int = setting(16 * 1024 * 1024, "largest Kafka request frame; a larger one closes that "
                                                        "connection")
    max_message_bytes: int = setting(4 * 1024 * 1024, "largest message value (and batch) a Produce may store")
    max_connections: int = setting(1024, "Kafka connections open at once; more are closed on accept")
    request_timeout_ms: int = setting(5000, "how long one broker request waits")
    sasl_users: str = setting("", "JSON file {user: {password, credentials: a Quiver user's key file}} (mode 0600): "
                                  "Kafka clients authenticate (SASL PLAIN, SCRAM-SHA-256/512) and act as that user; "
                                  "empty: no SASL")
    tls_cert: str = setting("", "PEM certificate (chain) of the Kafka listener: clients connect with TLS (SSL, or "
                                "SASL_SSL with --sasl-users); empty: plaintext")
    tls_key: str = setting("", "PEM private key of --tls-cert")
    credentials: str = setting("", "auth on: the key file the gateway's own SDK clients use; without --sasl-users "
                                   "every Kafka client acts with it, so it must be given then (a user with only the "
                                   "rights anonymous clients may have); empty: the auth dir's admin.key")

    @property
    def key_file(self) -> str | None:
        if self.credentials:
            return self.credentials
        return os.path.join(self.auth_dir, "admin.key") if self.auth_dir else None

    def __post_init__(self):
        _host_port("--kafka-listen", self.kafka_listen)
        _host_port("--listen", self.listen)
        if self.advertise and addr_problem(self.advertise):
            raise ValueError(f"--advertise {self.advertise!r}: {addr_problem(self.advertise)}")
        if self.auth_dir and not self.sasl_users and not self.credentials:
            # unauthenticated Kafka clients would act with the auth dir's SUPER key
            raise ValueError("auth is on (--auth-dir) but Kafka clients do not authenticate: give --sasl-users, or "
                             "--credentials with the key of a user holding only what every client may do")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ValueError("--tls-cert and --tls-key go together")
        if not 1024 <= self.max_request_bytes <= 256 * 1024 * 1024:
            raise ValueError("--max-request-bytes must be in 1024..268435456")
        if not 1 <= self.max_message_bytes <= 64 * 1024 * 1024:
            raise ValueError("--max-message-bytes must be in 1..67108864")
        if not 1 <= self.max_connections <= 100_000:
            raise ValueError("--max-connections must be in 1..100000")
        if not 100 <= self.request_timeout_ms <= 60_000:
            raise ValueError("--request-timeout-ms must be in 100..60000")
