"""Logging in as a Quiver user (auth on): the key pair's check, the cluster's word, and the
lock-out of guessers.

A user logs in with her key file (uploaded), or its access key (public key) and
secret key typed. The pair is checked here first (the secret must derive the access key: no network call for a
wrong secret); then one request with that pair (cluster info, which any user may ask)
tells whether the cluster knows the key. Failures count per access key and per client
address; `max_failures` within `window_s` lock that key and that address out for
`lockout_s` (429 with Retry-After), a right secret included. At most `VERIFYING` logins
talk to the cluster at once, so guessed keys cannot hold every HTTP thread. Not owned: the
sessions (sessions.py), the form and cookie (routes.py)."""

import hmac
import json
import logging
import re
import threading
import time
from collections import OrderedDict, deque

import zmq

from quiver.errors import QuiverError
from quiver.wire.curve import Credentials

log = logging.getLogger(__name__)

VERIFYING = 2              # logins asking the cluster at the same time
VERIFY_QUEUE_S = 5.0       # how long a login waits for one of those places
MAX_SUBJECTS = 10_000      # keys and addresses remembered; the oldest go first
_Z85 = re.compile(r"[0-9A-Za-z.\-:+=^!/*?&<>()\[\]{}@%$#]{40}")
REFUSED_KEY = "refused this client's key"   # the transport's words for a key the cluster does not know


def _pair_matches(access_key: str, secret_key: str) -> bool:
    """The secret derives the access key (both Z85 CURVE keys), compared in constant time."""
    if not (_Z85.fullmatch(access_key) and _Z85.fullmatch(secret_key)):
        return False
    try:
        derived = zmq.curve_public(secret_key.encode())
    except (zmq.ZMQError, ValueError):
        return False
    return hmac.compare_digest(derived, access_key.encode())


MAX_KEY_FILE_BYTES = 4096   # a key file is about 250 bytes of JSON


def pair_from_key_file(data) -> tuple[str, str]:
    """(access key, secret key) from a key file's text or bytes (`quiver acl user add` writes it:
    JSON with public_key and secret_key); LoginRefused saying what is wrong. Nothing else in it
    (its server key, its user name) is believed: the cluster's server key is the console's own."""
    if isinstance(data, str):
        data = data.encode("utf-8", "replace")
    if not isinstance(data, bytes) or not data.strip() or len(data) > MAX_KEY_FILE_BYTES:
        raise LoginRefused(f"a key file is JSON of at most {MAX_KEY_FILE_BYTES} bytes")
    try:
        doc = json.loads(data)
    except ValueError:
        raise LoginRefused("the key file is not JSON: give the file `quiver acl user add` wrote") from None
    pair = (doc.get("public_key"), doc.get("secret_key")) if isinstance(doc, dict) else (None, None)
    if not all(isinstance(k, str) for k in pair):
        raise LoginRefused("the key file has no public_key and secret_key")
    return pair


class LoginRefused(Exception):
    """A login refused: `status` is the HTTP answer (403 wrong, 429 locked, 503 cannot check now)."""

    def __init__(self, message: str, status: int = 403, retry_after: int = 0):
        super().__init__(message)
        self.status, self.retry_after = status, retry_after


class Limiter:
    """Failed logins per subject (("key", access key) or ("ip", address)) in a sliding window."""

    def __init__(self, max_failures: int, window_s: float, lockout_s: float, clock=time.monotonic):
        self.max_failures, self.window_s, self.lockout_s = max_failures, window_s, lockout_s
        self._clock = clock
        self._lock = threading.Lock()
        self._subjects: OrderedDict = OrderedDict()   # subject -> [deque of failure times, locked until]

    def locked_for(self, *subjects) -> float:
        """Seconds until every one of `subjects` may try again (0: none is locked)."""
        now = self._clock()
        with self._lock:
            left = [e[1] - now for e in (self._subjects.get(s) for s in subjects) if e is not None]
        return max([0.0, *left])

    def failed(self, *subjects) -> None:
        now = self._clock()
        with self._lock:
            for s in subjects:
                entry = self._subjects.pop(s, None) or [deque(), 0.0]
                times = entry[0]
                times.append(now)
                while times and now - times[0] > self.window_s:
                    times.popleft()
                while len(times) > self.max_failures:
                    times.popleft()
                if len(times) >= self.max_failures:
                    entry[1] = now + self.lockout_s
                self._subjects[s] = entry   # to the end: the most recently failed go last
            while len(self._subjects) > MAX_SUBJECTS:
                self._subjects.popitem(last=False)

    def succeeded(self, subject) -> None:
        with self._lock:
            self._subjects.pop(subject, None)


class UserLogin:
    """Checks a login and opens its session. `make_admin(Credentials)` builds the Admin a user
    reads with; `server_key` is the cluster's public key (the auth dir's)."""

    def __init__(self, sessions, limiter: Limiter, make_admin, server_key: str):
        self.sessions, self.limiter = sessions, limiter
        self.make_admin, self.server_key = make_admin, server_key
        self._verifying = threading.BoundedSemaphore(VERIFYING)

    def login(self, access_key, secret_key, ip: str) -> str:
        """The new session's token, or LoginRefused."""
        access_key = access_key.strip() if isinstance(access_key, str) else ""
        secret_key = secret_key.strip() if isinstance(secret_key, str) else ""
        subjects = (("key", access_key[:40]), ("ip", ip))
        wait = self.limiter.locked_for(*subjects)
        if wait > 0:
            raise LoginRefused(f"too many failed logins for this key or from this address: try again in "
                               f"{int(wait) + 1} s", 429, int(wait) + 1)
        if not _pair_matches(access_key, secret_key):
            self.limiter.failed(*subjects)
            raise LoginRefused("wrong access key or secret key (both are in the user's key file: "
                               "public_key and secret_key)")
        if not self._verifying.acquire(timeout=VERIFY_QUEUE_S):
            raise LoginRefused("too many logins are being checked: try again in a moment", 503, 2)
        try:
            admin = self._verified_admin(access_key, secret_key, subjects)
        finally:
            self._verifying.release()
        self.limiter.succeeded(subjects[0])
        return self.sessions.open(access_key, admin, ip)

    def _verified_admin(self, access_key: str, secret_key: str, subjects):
        shared = self.sessions.admin_of(access_key)
        admin = shared or self.make_admin(Credentials(f"console:{access_key[:8]}", access_key, secret_key,
                                                      self.server_key))
        try:
            admin.cluster_info()
        except QuiverError as exc:
            if shared is None:
                admin.shutdown()
            if REFUSED_KEY in str(exc):
                self.limiter.failed(*subjects)
                raise LoginRefused("the cluster does not know this access key (not an ACL user, or deleted "
                                   "or rotated)") from None
            log.warning("console login could not be checked: %s", exc)
            raise LoginRefused(f"the cluster cannot check a login now: {exc}", 503, 5) from None
        return admin
