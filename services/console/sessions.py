"""Logged-in users (auth on): server-side sessions, each holding a Quiver user's key pair and
the Admin that reads with it.

The browser holds only a random session token (inside Flask's signed cookie); the user's
secret key and her Admin stay in this process. A session ends when idle longer than
`idle_s`, `max_s` after login, at logout, or when a user opens more than `per_key` sessions
(her oldest goes). Admins are shared by the sessions of one access key and shut down when
its last session ends, so a console holds at most one Admin (one IO thread) per user logged
in. Not owned: checking a login (login.py), the cookie (Flask)."""

import hashlib
import logging
import secrets
import threading
import time
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

SWEEP_EVERY_S = 5.0


@dataclass
class Session:
    access_key: str
    admin: object
    created: float
    seen: float
    ip: str = ""
    token_hash: bytes = field(default=b"", repr=False)


def _hash(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class SessionsFull(Exception):
    """No room for another session: the console says so (503) instead of evicting someone."""


class Sessions:
    def __init__(self, idle_s: float, max_s: float, max_sessions: int, per_key: int, clock=time.monotonic):
        self.idle_s, self.max_s = idle_s, max_s
        self.max_sessions, self.per_key = max_sessions, per_key
        self._clock = clock
        self._lock = threading.Lock()
        self._by_hash: dict[bytes, Session] = {}
        self._admins: dict[str, list] = {}   # access key -> [admin, sessions using it]
        self._swept = clock()

    def admin_of(self, access_key: str):
        """The Admin a live session of this key already uses, or None."""
        with self._lock:
            held = self._admins.get(access_key)
            return held[0] if held else None

    def open(self, access_key: str, admin, ip: str) -> str:
        """A new session for a checked login; its token (for the cookie). `admin` is the key's
        shared Admin when it had one, else a new one this store now owns."""
        token = secrets.token_urlsafe(32)
        now = self._clock()
        ended = []
        full = False
        with self._lock:
            ended += self._sweep_locked(now, force=True)
            mine = sorted((s for s in self._by_hash.values() if s.access_key == access_key), key=lambda s: s.created)
            while len(mine) >= self.per_key:
                ended += self._end_locked(mine.pop(0))
            ended = [a for a in ended if a is not admin]   # the key's Admin, reused below
            held = self._admins.get(access_key)
            if len(self._by_hash) >= self.max_sessions:
                full = True
                if held is None or held[0] is not admin:
                    ended.append(admin)
            else:
                held = self._admins.setdefault(access_key, [admin, 0])
                if held[0] is not admin:   # raced another login of the same key: keep the first
                    ended.append(admin)
                held[1] += 1
                s = Session(access_key, held[0], now, now, ip, _hash(token))
                self._by_hash[s.token_hash] = s
        self._shutdown(ended)
        if full:
            raise SessionsFull(f"{self.max_sessions} sessions are open: try again when one ends")
        return token

    def get(self, token) -> Session | None:
        """The live session of `token` (its idle clock restarted), or None."""
        if not isinstance(token, str) or not token:
            return None
        now = self._clock()
        with self._lock:
            ended = self._sweep_locked(now)
            s = self._by_hash.get(_hash(token))
            if s is not None and self._expired(s, now):
                ended += self._end_locked(s)
                s = None
            if s is not None:
                s.seen = now
        self._shutdown(ended)
        return s

    def close(self, token) -> None:
        if not isinstance(token, str):
            return
        with self._lock:
            s = self._by_hash.get(_hash(token))
            ended = self._end_locked(s) if s is not None else []
        self._shutdown(ended)

    def sweep(self) -> None:
        """End the expired sessions now (pages sweep as they go; this also runs with nobody looking)."""
        with self._lock:
            ended = self._sweep_locked(self._clock(), force=True)
        self._shutdown(ended)

    def close_all(self) -> None:
        with self._lock:
            ended = [a for a, _ in self._admins.values()]
            self._by_hash.clear()
            self._admins.clear()
        self._shutdown(ended)

    def __len__(self) -> int:
        with self._lock:
            return len(self._by_hash)

    def users(self) -> int:
        with self._lock:
            return len(self._admins)

    # ---- inside the lock -------------------------------------------------------------------

    def _expired(self, s: Session, now: float) -> bool:
        return now - s.seen > self.idle_s or now - s.created > self.max_s

    def _sweep_locked(self, now: float, force: bool = False) -> list:
        if not force and now - self._swept < SWEEP_EVERY_S:
            return []
        self._swept = now
        ended = []
        for s in [s for s in self._by_hash.values() if self._expired(s, now)]:
            ended += self._end_locked(s)
        return ended

    def _end_locked(self, s: Session) -> list:
        """Forget `s`; the Admin to shut down if it was its key's last session."""
        if self._by_hash.pop(s.token_hash, None) is None:
            return []
        held = self._admins.get(s.access_key)
        if held is None:
            return []
        held[1] -= 1
        if held[1] > 0:
            return []
        del self._admins[s.access_key]
        return [held[0]]

    @staticmethod
    def _shutdown(admins: list) -> None:
        for admin in admins:   # outside the lock: a shutdown joins an IO thread
            try:
                admin.shutdown()
            except Exception:
                log.warning("an Admin of an ended session did not shut down cleanly", exc_info=True)
