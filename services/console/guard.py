"""Who may see pages and run actions (reset offset, DLQ resend, create topic), and the CSRF token.

The rules, from the settings (config.Config):
- auth on: every page but /login and /healthz needs a login as a Quiver user (her access
  key and secret key, login.py); each page reads, and each action (when actions are on)
  runs, with her key, so the console never has more rights than the person looking;
- auth off: every page open (the console listens on loopback by default); read-only unless
  --allow-actions, and then, with --admin-token set, actions only after /login with it.
Every POST carries the session's CSRF token (a hidden field), compared in constant time.
The session is Flask's signed cookie (HttpOnly, SameSite=Strict) under a key made at
start, so a restart logs everybody out; with auth on it holds only a random token naming
the server-side session (sessions.py). Not owned: what an action does (routes.py)."""

import hashlib
import hmac
import secrets

from flask import g, session

from .login import MAX_KEY_FILE_BYTES, LoginRefused, pair_from_key_file

CSRF_FIELD = "csrf_token"


class Refused(Exception):
    """An action or form refused: the message says why (shown with 403)."""


class Guard:
    def __init__(self, actions_enabled: bool, admin_token: str, users=None):
        self.actions_enabled = actions_enabled
        self.users = users   # login.UserLogin with auth on: users log in with their keys
        self._token_digest = (hashlib.sha256(admin_token.encode()).digest()
                              if admin_token and users is None else None)

    @property
    def needs_login(self) -> bool:
        return self.users is not None or (self.actions_enabled and self._token_digest is not None)

    def csrf_token(self) -> str:
        if CSRF_FIELD not in session:
            session[CSRF_FIELD] = secrets.token_urlsafe(32)
        return session[CSRF_FIELD]

    def check_csrf(self, form) -> None:
        sent, mine = form.get(CSRF_FIELD, ""), session.get(CSRF_FIELD, "")
        if not mine or not isinstance(sent, str) or not hmac.compare_digest(sent.encode(), mine.encode()):
            raise Refused("the form's CSRF token is missing or stale: reload the page and try again")

    def logged_in(self) -> bool:
        if self.users is not None:
            return g.get("user_session") is not None
        return session.get("admin") is True

    def current(self):
        """Auth on: this request's live user session (None: not logged in, or it ended); kept in g."""
        g.user_session = self.users.sessions.get(session.get("sid"))
        return g.user_session

    def login_user(self, form, ip: str, files=None) -> None:
        """Auth on: log in with an uploaded key file, else an access key and secret key typed
        (login.LoginRefused if not)."""
        self.check_csrf(form)
        upload = files.get("key_file") if files is not None else None
        if upload is not None and upload.filename:
            try:
                access, secret = pair_from_key_file(upload.read(MAX_KEY_FILE_BYTES + 1))
            except LoginRefused:
                self.users.limiter.failed(("ip", ip))   # a guesser's bad file counts like a bad secret
                raise
        else:
            access, secret = form.get("access_key", ""), form.get("secret_key", "")
        token = self.users.login(access, secret, ip)
        self.users.sessions.close(session.get("sid"))
        session.clear()   # a new session: nothing fixed before login is kept
        session["sid"] = token

    def can_act(self) -> bool:
        return self.actions_enabled and (not self.needs_login or self.logged_in())

    def check_action(self, form) -> None:
        """Raise Refused unless this browser may run an action now (CSRF first)."""
        self.check_csrf(form)
        if not self.actions_enabled:
            raise Refused("actions are off: this console is read-only (README, Web console)")
        if self.needs_login and not self.logged_in():
            raise Refused("log in first" + ("" if self.users is not None else " with the console's admin token"))

    def login(self, form) -> bool:
        self.check_csrf(form)
        if self._token_digest is None:
            return False
        given = form.get("token", "")
        ok = isinstance(given, str) and hmac.compare_digest(hashlib.sha256(given.encode()).digest(),
                                                            self._token_digest)
        if ok:
            session.clear()   # a new session: a token fixed before login is not kept
            session["admin"] = True
        return ok

    def logout(self, form) -> None:
        self.check_csrf(form)
        if self.users is not None:
            self.users.sessions.close(session.get("sid"))
        session.clear()
