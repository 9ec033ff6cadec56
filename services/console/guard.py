"""Who may run an action (reset offset, DLQ resend, create topic), and the CSRF token.

The rules, from the settings (config.Config.actions_enabled):
- auth on (the console holds an admin key): actions only after /login with --admin-token;
  no token set: read-only;
- auth off: read-only unless --allow-actions; then, with --admin-token set, still only
  after /login.
Every POST carries the session's CSRF token (a hidden field), compared in constant time.
The session is Flask's signed cookie (HttpOnly, SameSite=Strict) under a key made at
start, so a restart logs everybody out. Not owned: what an action does (routes.py)."""

import hashlib
import hmac
import secrets

from flask import session

CSRF_FIELD = "csrf_token"


class Refused(Exception):
    """An action or form refused: the message says why (shown with 403)."""


class Guard:
    def __init__(self, actions_enabled: bool, admin_token: str):
        self.actions_enabled = actions_enabled
        self._token_digest = hashlib.sha256(admin_token.encode()).digest() if admin_token else None

    @property
    def needs_login(self) -> bool:
        return self.actions_enabled and self._token_digest is not None

    def csrf_token(self) -> str:
        if CSRF_FIELD not in session:
            session[CSRF_FIELD] = secrets.token_urlsafe(32)
        return session[CSRF_FIELD]

    def check_csrf(self, form) -> None:
        sent, mine = form.get(CSRF_FIELD, ""), session.get(CSRF_FIELD, "")
        if not mine or not isinstance(sent, str) or not hmac.compare_digest(sent.encode(), mine.encode()):
            raise Refused("the form's CSRF token is missing or stale: reload the page and try again")

    def logged_in(self) -> bool:
        return session.get("admin") is True

    def can_act(self) -> bool:
        return self.actions_enabled and (not self.needs_login or self.logged_in())

    def check_action(self, form) -> None:
        """Raise Refused unless this browser may run an action now (CSRF first)."""
        self.check_csrf(form)
        if not self.actions_enabled:
            raise Refused("actions are off: this console is read-only (README, Web console)")
        if self.needs_login and not self.logged_in():
            raise Refused("log in with the console's admin token first")

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
        session.clear()
