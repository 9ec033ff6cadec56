"""Console settings (each a --flag and a QUIVER_* env var)."""

import os
from dataclasses import dataclass

from quiver.runtime.settings import ServiceSettings, setting


@dataclass(frozen=True)
class Config(ServiceSettings):
    """Quiver web console: cluster, topics, groups, messages, DLQ, scheduler, transactions."""
    http_listen: str = setting("127.0.0.1:8080", "HOST:PORT of the web pages (HTTP)")
    listen: str = setting("0.0.0.0:10951", "HOST:PORT answering PING and STATUS, like every service "
                                           "(quiver ping, quiver status, compose healthchecks)")
    auth_dir: str = setting("", "auth on: the cluster's auth dir (its server key); every page needs a login "
                                "as a Quiver user and reads with her key")
    credentials: str = setting("", "auth on without --auth-dir: a key file naming the cluster's server key "
                                   "(the console reads with each logged-in user's key, never this one)")
    admin_token: str = setting("", "auth off: password a browser gives on /login to run actions, required "
                                   "with --allow-actions (auth on: users log in with their own keys)")
    allow_actions: bool = setting(False, "allow actions (create, send to and delete a topic, reset offsets, DLQ "
                                         "resend); auth on: each runs with the logged-in user's rights; auth off: "
                                         "after /login with --admin-token; unset: read-only")
    groups: str = setting("", "consumer groups listed even before they have a retry or DLQ topic, 'g1;g2'")
    request_timeout_ms: int = setting(2000, "how long one Admin request waits (a down broker costs this)")
    preview_bytes: int = setting(2048, "bytes of a message body shown")
    http_threads: int = setting(4, "HTTP worker threads")
    http_connection_limit: int = setting(500, "HTTP connections held at once; more wait in the listen backlog")
    http_connections_per_address: int = setting(100, "HTTP connections held at once from one client address; "
                                                     "more are closed as they arrive")
    http_idle_timeout_s: int = setting(30, "an HTTP connection idle this long is closed (seconds)")
    cookie_secure: bool = setting(False, "mark the session cookie Secure (a TLS proxy in front serves the pages "
                                         "over HTTPS)")
    session_idle_s: int = setting(900, "auth on: a login ends after this long without a page (seconds)")
    session_max_s: int = setting(28800, "auth on: a login ends this long after it began (seconds)")
    max_sessions: int = setting(256, "auth on: logins open at once (a user's oldest of more than 8 ends)")
    login_max_failures: int = setting(5, "auth on: failed logins of one access key or from one address "
                                         "within --login-window-s that lock it out")
    login_window_s: int = setting(300, "auth on: the window failed logins are counted in (seconds)")
    login_lockout_s: int = setting(300, "auth on: how long a locked-out key or address is refused (seconds)")

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
        for flag, value, low, high in (("--http-connection-limit", self.http_connection_limit, 10, 10_000),
                                       ("--http-connections-per-address", self.http_connections_per_address,
                                        1, 10_000),
                                       ("--http-idle-timeout-s", self.http_idle_timeout_s, 1, 3600),
                                       ("--session-idle-s", self.session_idle_s, 10, 86_400),
                                       ("--session-max-s", self.session_max_s, 10, 7 * 86_400),
                                       ("--max-sessions", self.max_sessions, 1, 10_000),
                                       ("--login-max-failures", self.login_max_failures, 1, 1000),
                                       ("--login-window-s", self.login_window_s, 1, 86_400),
                                       ("--login-lockout-s", self.login_lockout_s, 1, 86_400)):
            if not low <= value <= high:
                raise ValueError(f"{flag} must be in {low}..{high}")
        if self.allow_actions and not self.auth_on and not self.admin_token:
            # nobody acts anonymously: without users, the token's /login is who may act
            raise ValueError("--allow-actions with auth off needs --admin-token (QUIVER_ADMIN_TOKEN, the password "
                             "/login asks before any action), or auth on (--auth-dir) so users log in with their keys")

    @property
    def key_file(self) -> str | None:
        """Auth on: --credentials, else the auth dir's admin.key, else None (QUIVER_CREDENTIALS
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
        """Auth off: only with --allow-actions. Auth on: with --allow-actions, or a token set (which
        turned them on before users logged in with their keys)."""
        return self.allow_actions or (self.auth_on and bool(self.admin_token))

    def server_key(self) -> str:
        """Auth on: the cluster's server public key (the auth dir's server.key, else the key file's)."""
        from quiver.wire.curve import AuthDir, read_credentials
        if self.auth_dir:
            return AuthDir(self.auth_dir).server.public_key
        return read_credentials(self.credentials).server_key

    @property
    def known_groups(self) -> list[str]:
        return [g.strip() for g in self.groups.split(";") if g.strip()]
