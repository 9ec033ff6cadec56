"""The console process: one Admin, the Flask app around it, waitress serving it.

`create_app(config, admin, stats)` builds the WSGI app (unit tests drive it with Flask's test
client over `quiver.testing.stub_cluster`); `App(config).run()` serves it on --http-listen
with --http-threads worker threads, and answers PING and STATUS on --listen like every
service, until SIGTERM. Every page reads through the one Admin (thread-safe: its
transport's IO thread owns the sockets), counted for /metrics (metrics.py)."""

import logging
import secrets
import threading
import time
from datetime import datetime, timezone

from flask import Flask, g, request

from . import routes
from .guard import Guard
from .metrics import ConsoleStats, CountingAdmin
from .rates import Rates

log = logging.getLogger(__name__)

SECURITY_HEADERS = {
    # no script at all, styles from our own file, no framing: a value that slipped an
    # escape still could not run
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; "
                               "frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def create_app(config, admin, stats: ConsoleStats | None = None) -> Flask:
    """The pages over `admin`; each request and Admin call counted in `stats` (a new one if None)."""
    stats = stats if stats is not None else ConsoleStats()
    app = Flask(__name__)
    app.config.update(SECRET_KEY=secrets.token_bytes(32), SESSION_COOKIE_HTTPONLY=True,
                      SESSION_COOKIE_SAMESITE="Strict", MAX_CONTENT_LENGTH=64 * 1024)
    guard = Guard(config.actions_enabled, config.admin_token)
    routes.register(app, CountingAdmin(admin, stats), config, Rates(), guard)
    app.jinja_env.filters.update(ts=fmt_ts, size=fmt_size, rate=fmt_rate, pct=fmt_pct)

    @app.context_processor
    def common():
        return {"auth_on": config.auth_on, "actions_enabled": guard.actions_enabled,
                "needs_login": guard.needs_login, "logged_in": guard.logged_in(), "can_act": guard.can_act(),
                "csrf_token": guard.csrf_token, "namesrv": config.namesrv}

    @app.before_request
    def started():
        g.started = time.monotonic()

    @app.after_request
    def headers(response):
        response.headers.update(SECURITY_HEADERS)
        stats.served(request.endpoint, response.status_code, time.monotonic() - g.get("started", time.monotonic()))
        return response
    return app


def fmt_ts(ms) -> str:
    if not isinstance(ms, int) or ms <= 0:
        return ""
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def fmt_size(n) -> str:
    if not isinstance(n, (int, float)):
        return ""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return ""


def fmt_rate(r) -> str:
    return "" if r is None else f"{r:.1f}/s"


def fmt_pct(ratio) -> str:
    return "" if not isinstance(ratio, (int, float)) else f"{ratio * 100:.1f} %"


class App:
    """The HTTP server (waitress, its own threads) and the PING/STATUS service loop (this thread)."""

    def __init__(self, config):
        from quiver.client.admin import Admin
        from quiver.runtime.service import Service
        self.config = config
        self.admin = Admin(namesrv=config.namesrv, timeout=config.request_timeout_ms / 1000,
                           credentials=config.key_file)
        self.stats = ConsoleStats()
        self.wsgi = create_app(config, self.admin, self.stats)
        self.http = None
        self.url = ""
        self.service = Service(config.listen, {}, "console", self.status, security=_status_security(config))

    def status(self) -> dict:
        return {"role": "console", "url": self.url, "namesrv": self.config.namesrv,
                "auth": self.config.auth_on, "actions": self.config.actions_enabled}

    def bind(self) -> None:
        """HTTP first: once PING answers, the pages are served too."""
        from waitress.server import create_server
        host, port = self.config.http_listen.rsplit(":", 1)
        self.http = create_server(self.wsgi, host=host.strip("[]"), port=int(port),
                                  threads=self.config.http_threads, ident="quiver-console")
        self.url = f"http://{host}:{self.http.effective_port}/"
        self.service.bind()
        log.info("console on %s (name servers %s, auth %s, actions %s)", self.url, self.config.namesrv,
                 "on" if self.config.auth_on else "off", "on" if self.config.actions_enabled else "off")
        warn_if_exposed(self.config, host, self.url)

    def run(self) -> None:
        if self.http is None:
            self.bind()
        web = threading.Thread(target=self._serve_http, name="http", daemon=True)
        web.start()
        try:
            self.service.run()
        finally:
            self.http.close()
            self.http.task_dispatcher.shutdown(timeout=5)
            self.admin.shutdown()

    def _serve_http(self) -> None:
        try:
            self.http.run()
        except Exception:   # the socket map emptied by close() during shutdown lands here too
            log.debug("http loop ended", exc_info=True)


def warn_if_exposed(config, host: str, url: str) -> None:
    """Auth off and the pages reachable beyond loopback: say so at start."""
    if not config.auth_on and host not in ("127.0.0.1", "localhost", "::1", "[::1]"):
        log.warning("auth is off and the console listens beyond loopback (%s): whoever reaches it reads "
                    "every topic", url)


def _status_security(config):
    """Auth on: the PING/STATUS socket is a CURVE server with the cluster's key; it admits the
    auth dir's admin key and the services' keys (the ACL's other users are not followed here).
    `Security` wants a service key for outgoing calls; the console makes none under it (its
    Admin holds the admin key), so the name server's key, in every auth dir, stands in."""
    if not config.auth_dir:
        return None
    from quiver.runtime.security import Security
    return Security(config.auth_dir, "namesrv")
