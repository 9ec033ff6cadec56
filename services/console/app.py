"""The console process: the Flask app, the Admin(s) it reads through, waitress serving it.

`create_app(config, admin, stats, users)` builds the WSGI app (unit tests drive it with
Flask's test client over `quiver.testing.stub_cluster`); `App(config).run()` serves it on
--http-listen with --http-threads worker threads, and answers PING and STATUS on --listen
like every service, until SIGTERM. Auth off, every page reads through one Admin; auth on,
the console holds no key of its own: each page reads through the Admin of the user logged
in (sessions.py), so nobody sees more than her own key could read. Admins are thread-safe
(their transport's IO thread owns the sockets); their calls are counted for /metrics."""

import logging
import secrets
import threading
import time
from datetime import datetime, timezone

from flask import Flask, flash, g, redirect, render_template, request, session, url_for

from . import routes
from .guard import Guard, Refused
from .login import Limiter, UserLogin
from .metrics import ConsoleStats, CountingAdmin
from .rates import Rates
from .sessions import Sessions

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


OPEN_PAGES = frozenset({"login", "healthz", "static"})   # served before a login (auth on)
MAX_SESSIONS_PER_USER = 8


class SessionAdmin:
    """Auth on: the logged-in user's Admin, looked up per request (the Guard put it in g)."""

    def __getattr__(self, name):
        s = g.get("user_session")
        if s is None:
            raise Refused("log in first")
        return getattr(s.admin, name)


def user_login(config, make_admin, server_key: str) -> UserLogin:
    """Auth on: sessions and the login checks, from the settings."""
    sessions = Sessions(config.session_idle_s, config.session_max_s, config.max_sessions, MAX_SESSIONS_PER_USER)
    limiter = Limiter(config.login_max_failures, config.login_window_s, config.login_lockout_s)
    return UserLogin(sessions, limiter, make_admin, server_key)


def create_app(config, admin, stats: ConsoleStats | None = None, users: UserLogin | None = None) -> Flask:
    """The pages over `admin` (auth off) or over each logged-in user's own Admin (`users`: auth
    on, `admin` unused); each request and Admin call counted in `stats` (a new one if None)."""
    stats = stats if stats is not None else ConsoleStats()
    app = Flask(__name__)
    app.config.update(SECRET_KEY=secrets.token_bytes(32), SESSION_COOKIE_HTTPONLY=True,
                      SESSION_COOKIE_SAMESITE="Strict", SESSION_COOKIE_NAME="quiver_console",
                      SESSION_COOKIE_SECURE=config.cookie_secure,
                      MAX_CONTENT_LENGTH=64 * 1024)
    guard = Guard(config.actions_enabled, config.admin_token, users)
    reader = SessionAdmin() if users is not None else admin
    routes.register(app, CountingAdmin(reader, stats), config, Rates(), guard)
    app.jinja_env.filters.update(ts=fmt_ts, size=fmt_size, rate=fmt_rate, pct=fmt_pct)

    @app.context_processor
    def common():
        s = g.get("user_session")
        return {"auth_on": config.auth_on, "actions_enabled": guard.actions_enabled,
                "needs_login": guard.needs_login, "logged_in": guard.logged_in(), "can_act": guard.can_act(),
                "csrf_token": guard.csrf_token, "namesrv": config.namesrv, "user_login": users is not None,
                "user": s.access_key[:10] if s is not None else ""}

    @app.before_request
    def started():
        g.started = time.monotonic()
        if users is None or guard.current() is not None or request.endpoint in OPEN_PAGES:
            return None
        if request.method != "GET":
            return render_template("error.html", page="", title="Refused", message="log in first"), 403
        if session.pop("sid", None):
            flash("your session ended (logged out, idle or too old): log in again", "error")
        here = request.path + (f"?{request.query_string.decode('latin-1')}" if request.query_string else "")
        return redirect(url_for("login", next=here), 303)

    @app.after_request
    def headers(response):
        response.headers.update(SECURITY_HEADERS)
        stats.served(request.endpoint, response.status_code, time.monotonic() - g.get("started", time.monotonic()))
        return response
    return app


def fmt_ts(ms) -> str:
    """UTC with its offset written, as the CLI prints times (quiver.tools.cli_common.ms_text)."""
    if not isinstance(ms, int) or ms <= 0:
        return ""
    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(" ", "milliseconds")


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
        self.stats = ConsoleStats()
        timeout = config.request_timeout_ms / 1000
        if config.auth_on:   # no key of its own: each user's Admin, made at her login
            self.admin = None
            self.users = user_login(config, lambda creds: Admin(namesrv=config.namesrv, timeout=timeout,
                                                                credentials=creds), config.server_key())
        else:
            self.admin, self.users = Admin(namesrv=config.namesrv, timeout=timeout), None
        self.wsgi = create_app(config, self.admin, self.stats, self.users)
        self.http = None
        self.url = ""
        self.service = Service(config.listen, {}, "console", self.status, security=_status_security(config))
        if self.users is not None:   # an expired session's Admin goes even when no page is loaded
            self.service.every("sessions", 30.0, self.users.sessions.sweep)

    def status(self) -> dict:
        st = {"role": "console", "url": self.url, "namesrv": self.config.namesrv,
              "auth": self.config.auth_on, "actions": self.config.actions_enabled}
        if self.users is not None:
            st.update(sessions=len(self.users.sessions), users=self.users.sessions.users())
        return st

    def bind(self) -> None:
        """HTTP first: once PING answers, the pages are served too."""
        from waitress.server import create_server
        host, port = self.config.http_listen.rsplit(":", 1)
        c = self.config
        # idle connections are closed after --http-idle-timeout-s (checked every second), up to
        # --http-connection-limit are held (poll, not select: no 1024-descriptor ceiling) and at
        # most --http-connections-per-address from one client, so idle sockets cannot take the
        # place of other people's requests
        self.http = create_server(self.wsgi, host=host.strip("[]"), port=int(port), threads=c.http_threads,
                                  ident="quiver-console", connection_limit=c.http_connection_limit,
                                  channel_timeout=c.http_idle_timeout_s, cleanup_interval=1,
                                  asyncore_use_poll=True, max_request_body_size=64 * 1024,
                                  max_request_header_size=16 * 1024, backlog=1024)
        self.http.channel_class = per_address_cap(self.http, c.http_connections_per_address)
        self.url = f"http://{host}:{self.http.effective_port}/"
        self.service.bind()
        log.info("console on %s (name servers %s, auth %s, actions %s)", self.url, self.config.namesrv,
                 "on" if self.config.auth_on else "off", "on" if self.config.actions_enabled else "off")
        warn_if_exposed(self.config, host, self.url)
        if self.config.auth_on and self.config.admin_token:
            log.warning("auth is on: --admin-token is not asked at /login (users log in with their own keys); "
                        "it only turns actions on, as --allow-actions does")

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
            if self.users is not None:
                self.users.sessions.close_all()
            if self.admin is not None:
                self.admin.shutdown()

    def _serve_http(self) -> None:
        try:
            self.http.run()
        except Exception:   # the socket map emptied by close() during shutdown lands here too
            log.debug("http loop ended", exc_info=True)


def per_address_cap(server, cap: int):
    """waitress's channel maker, refusing (closing at once) a connection from an address that
    already holds `cap`: one client cannot take every connection the server holds."""
    make = server.channel_class

    def channel(srv, conn, addr, adj, map=None):
        host = addr[0] if isinstance(addr, tuple) else addr
        held = sum(1 for ch in list(srv.active_channels.values())
                   if isinstance(ch.addr, tuple) and ch.addr[0] == host)
        if held >= cap:
            conn.close()
            return None
        return make(srv, conn, addr, adj, map=map)
    return channel


def warn_if_exposed(config, host: str, url: str) -> None:
    """Auth off and the pages reachable beyond loopback: say so at start."""
    if not config.auth_on and host not in ("127.0.0.1", "localhost", "::1", "[::1]"):
        log.warning("auth is off and the console listens beyond loopback (%s): whoever reaches it reads "
                    "every topic", url)


def _status_security(config):
    """Auth on: the PING/STATUS socket is a CURVE server with the cluster's key; it admits the
    auth dir's admin key and the services' keys (the ACL's other users are not followed here).
    `Security` wants a service key for outgoing calls; the console makes none under it (its
    Admins hold the logged-in users' keys), so the name server's key, in every auth dir, stands in."""
    if not config.auth_dir:
        return None
    from quiver.runtime.security import Security
    return Security(config.auth_dir, "namesrv")
