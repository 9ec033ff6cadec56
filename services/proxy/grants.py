"""What an access key's user may do, for the two decisions the proxy makes itself.

Every broker call a client causes is made with its user's key, so the brokers' ACL decides it.
Two things reach no broker as that user: the topics a client declares in its Telemetry
settings (they decide who is asked about an open transaction) and the transaction check-backs
the proxy hands to clients. For these the proxy follows the brokers' ACL: a snapshot
(ACL_SNAPSHOT, with the proxy's own key, which must be SUPER: admin.key by default) fetched
every REFRESH_S by `refresh` (app.py's background thread) and at once, at most every
RECHECK_S, when a settings check is refused (a grant of a moment ago). A decision is a
broker's (quiver.runtime.acl) for the key's user with no source address. Without access keys
(auth off, or --serve-unverified: every client is the proxy itself) everything is allowed;
with access keys and no snapshot, nothing is.
"""

import logging
import threading
import time

from quiver.client.access import broker_access
from quiver.errors import QuiverError
from quiver.runtime.acl import Acl
from quiver.wire import requests as rq

log = logging.getLogger(__name__)

REFRESH_S = 3.0
RECHECK_S = 0.5


class Grants:
    """`client`: the proxy's own started ClientBase; `keys`: {access key: (secret, Credentials)}."""

    def __init__(self, client, keys: dict, clock=time.monotonic):
        self.client = broker_access(client)   # broker calls
        self.keys = keys
        self.acl: Acl | None = None
        self._clock = clock
        self._fetched = float("-inf")
        self._rechecked = float("-inf")
        self._lock = threading.Lock()

    def allowed(self, access_key: str, resource: str, action: str) -> bool:
        """May this access key's user do `action` on `resource` ("topic:Pay", "group:g")?"""
        if not self.keys:
            return True
        entry = self.keys.get(access_key)
        acl = self.acl
        if entry is None or acl is None:
            return False
        user = acl.by_key.get(entry[1].public_key)
        return user is not None and acl.allowed(user.name, resource, action)

    def check(self, access_key: str, resource: str, action: str) -> str | None:
        """None when allowed (asking the brokers again once if not); else what to say."""
        if self.allowed(access_key, resource, action):
            return None
        now = self._clock()
        if now - self._rechecked >= RECHECK_S:
            self._rechecked = now
            self.fetch()
            if self.allowed(access_key, resource, action):
                return None
        if self.acl is None:
            return "the proxy cannot read the cluster's ACL (its own key must be a SUPER user's)"
        return f"access key {access_key!r} may not {action} {resource!r}"

    def refresh(self) -> None:
        """Fetch when the snapshot is REFRESH_S old (any thread but a client's IO thread)."""
        if self.keys and self._clock() - self._fetched >= REFRESH_S:
            self.fetch()

    def fetch(self) -> None:
        with self._lock:
            self._fetched = self._clock()
            known = self.acl.version if self.acl is not None else None
            try:
                brokers = sorted(self.client.all_broker_addrs().items())
            except QuiverError as exc:
                log.warning("ACL snapshot: no broker list: %s", exc)
                return
            for name, addr in brokers:
                try:
                    ext = self.client.call_broker(addr, rq.AclSnapshot(known=known or None)).ext or {}
                except QuiverError as exc:
                    log.warning("ACL snapshot from %s (%s) failed: %s", name, addr, exc)
                    continue
                if not ext.get("unchanged"):
                    self.acl = Acl.from_snapshot(ext)
                return
