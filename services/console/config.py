"""Console settings (each a --flag and a QUIVER_* env var)."""

import os
from dataclasses import dataclass

from quiver.runtime.settings import setting


@dataclass(frozen=True)
class Config:
    """Quiver web console: cluster, topics, groups, messages, DLQ, scheduler, transactions."""
    http_listen: str = setting("127.0.0.1:8080", "HOST:PORT of the web pages (HTTP)")
    listen: str = setting("0.0.0.0:10951", "HOST:PORT answering PING and STATUS, like every service "
                                           "(quiver ping, quiver status, compose healthchecks)")
    namesrv: str = setting("127.0.0.1:9876", "name servers, 'host:port;host:port'")
    auth_dir: str = setting("", "auth on: the cluster's auth dir; the console uses its admin.key "
                                "(unless --credentials names another key)")
    credentials: str = setting("", "auth on: the key file the console's Admin uses (a SUPER user's for actions)")
    admin_token: str = setting("", "password a browser gives on /login to run actions; with auth on, "
                                   "no actions without one")
    allow_actions: bool = setting(False, "auth off: allow actions (reset offset, DLQ resend, create topic); "
                                         "off: read-only")
    groups: str = setting("", "consumer groups listed even before they have a retry or DLQ topic, 'g1;g2'")
    request_timeout_ms: int = setting(2000, "how long one Admin request waits (a down broker costs this)")
    preview_bytes: int = setting(2048, "bytes of a message body shown")
    http_threads: int = setting(4, "HTTP worker threads")
    metrics_listen: str = setting("", "HOST:PORT serving Prometheus metrics at /metrics; empty: off")
    log_level: str = setting("INFO", "logging level")
    log_format: str = setting("text", "log lines: text, or json (one object a line: time, level, logger, "
                                      "message, exc)")

    def __post_init__(self):
        for flag, value in (("--http-listen", self.http_listen), ("--listen", self.listen)):
            host, sep, port = value.rpartition(":")
            if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
                raise ValueError(f"{flag} {value!r}: use HOST:PORT")
        if not 100 <= self.request_timeout_ms <= 60_000:
            raise ValueError("--request-timeout-ms must be in 100..60000")
        if not 16 <= self.preview_bytes <= 1 << 20:
            raise ValueError("--preview-bytes must be in 16..1048576")
        if not 1 <= self.http_threads <= 64:
            raise ValueError("--http-threads must be in 1..64")

    @property
    def key_file(self) -> str | None:
        """The Admin's key: --credentials, else the auth dir's admin.key, else None (QUIVER_CREDENTIALS
        is the env var of --credentials, so it is already in `credentials`)."""
        if self.credentials:
            return self.credentials
        if self.auth_dir:
            return os.path.join(self.auth_dir, "admin.key")
        return None

    @property
    def auth_on(self) -> bool:
        return self.key_file is not None

    @property
    def actions_enabled(self) -> bool:
        """Auth on: actions only with a token to log in with; auth off: only with --allow-actions."""
        return bool(self.admin_token) if self.auth_on else self.allow_actions

    @property
    def known_groups(self) -> list[str]:
        return [g.strip() for g in self.groups.split(";") if g.strip()]
