"""Services other than brokers follow the brokers' ACL: a snapshot fetched every few seconds.

The name server, filter servers, scheduler and txn-checker authenticate and
authorize with the same users and rules as the brokers, which store them.
Every `interval_s` (and at once, at most twice a second, when ZAP sees a key it
does not know — a user just added) the follower asks one broker for its
snapshot with the version it has; an unchanged ACL costs one small reply.
A request this ACL refuses is held for one fetch too (started at most twice a
second, joined by the refusals that come while it runs or waits to start) and checked
again once it is answered: a grant of a moment ago is served at once, not after the
interval, even right after another refusal's fetch.
Everything runs on the transport's IO thread through callbacks: the service
thread never waits on it. A broker that does not answer is skipped for the
next one; the snapshot in use stays until a newer one comes.
"""

import logging
import threading
import time

from quiver.errors import QuiverError
from quiver.runtime.acl import Acl
from quiver.wire import requests as rq
from quiver.wire.codes import ResponseCode

log = logging.getLogger(__name__)

MAX_HELD = 1000   # refused requests waiting for one re-check fetch; more are refused at once


class AclFollower:
    def __init__(self, security, transport, brokers=None, namesrvs=(), interval_s: float = 3.0,
                 clock=time.monotonic):
        self.security = security
        self.transport = transport
        self._brokers_fn = brokers       # fn() -> broker addresses, or None: learn them from name servers
        self._namesrvs = list(namesrvs)
        self._known: list[str] = []
        self._turn = 0
        self.interval_s = interval_s
        self._clock = clock
        self._last = 0.0
        self._last_soon = float("-inf")
        self._asked_cluster = 0.0
        self._last_recheck = float("-inf")
        self._held: list | None = None   # callbacks of refused requests, while a re-check fetch runs
        self._lock = threading.Lock()
        self.fetched = 0
        self.failures = 0
        security.on_unknown_key = self.soon
        security.on_denied = self.recheck

    def brokers(self) -> list[str]:
        return sorted(self._brokers_fn()) if self._brokers_fn is not None else self._known

    def soon(self) -> threading.Event | None:
        """A key ZAP did not know: fetch now unless fetched in the last half second (any thread).
        Returns an event set once that fetch is answered (or failed), None if none was started."""
        now = self._clock()
        if now - self._last_soon < 0.5:   # its own clock: a periodic fetch a moment ago predates the user
            return None
        self._last_soon = now
        answered = threading.Event()
        self.step(answered.set)
        return answered

    def recheck(self, then) -> bool:
        """A request this ACL refused (service thread): fetch and call then() once answered (any
        thread), so it is checked again. The fetch starts now, or half a second after the last
        one started (so at most two a second). False: not held (too many wait), refuse it now."""
        with self._lock:
            if self._held is not None:
                if len(self._held) >= MAX_HELD:
                    return False
                self._held.append(then)
                return True
            now = self._clock()
            wait = self._last_recheck + 0.5 - now
            self._last_recheck = max(now, self._last_recheck + 0.5)
            self._held = [then]
        if wait > 0:
            # the last fetch may predate this request's grant: held for the next one, when it is due
            timer = threading.Timer(wait, self.step, (self._rechecked,))
            timer.daemon = True
            timer.start()
        else:
            self.step(self._rechecked)
        return True

    def _rechecked(self) -> None:
        with self._lock:
            held, self._held = self._held or [], None
        for then in held:
            then()

    def step(self, done=None) -> None:
        """Fetch the snapshot; done() once it is answered or failed (any thread)."""
        done = done or (lambda: None)
        self._last = self._clock()
        if self._brokers_fn is None and (not self._known or self._last - self._asked_cluster > 30):
            self._ask_cluster()
        addrs = self.brokers()
        if not addrs:
            done()
            return
        addr = addrs[self._turn % len(addrs)]
        try:
            self.transport.send(addr, rq.AclSnapshot(known=self.security.acl.version or None), None, (),
                                lambda result: self._got(addr, result, done), 3.0)
        except QuiverError as exc:
            self._failed(addr, exc)
            done()

    def _got(self, addr, result, done) -> None:
        try:
            self._take(addr, result)
        finally:
            done()

    def _take(self, addr, result) -> None:
        if isinstance(result, Exception) or result.code != ResponseCode.SUCCESS:
            self._failed(addr, result if isinstance(result, Exception) else result.remark)
            return
        ext = result.ext or {}
        if ext.get("unchanged"):
            return
        try:
            acl = Acl.from_snapshot(ext)
        except (TypeError, ValueError, KeyError) as exc:
            self._failed(addr, f"bad snapshot: {exc}")
            return
        self.security.set_acl(acl)
        self.fetched += 1
        log.info("ACL from %s: %d users, version %s", addr, len(acl.users), acl.version)

    def _failed(self, addr, why) -> None:
        self.failures += 1
        self._turn += 1  # the next broker next time
        log.debug("ACL snapshot from %s failed: %s", addr, why)

    def _ask_cluster(self) -> None:
        self._asked_cluster = self._clock()
        for ns in self._namesrvs[:1]:
            def done(result, ns=ns):
                if isinstance(result, Exception) or result.code != ResponseCode.SUCCESS:
                    self._namesrvs.append(self._namesrvs.pop(0))  # another name server next time
                    return
                try:
                    cluster = rq.ClusterReply.decode(result.ext).cluster
                    # masters hold the newest ACL (a slave's lags by a sync round); slaves only without one
                    masters = sorted(b.addrs[0] for b in cluster.brokers.values() if 0 in b.addrs)
                    self._known = masters or sorted(a for b in cluster.brokers.values() for a in b.addrs.values())
                except QuiverError as exc:
                    log.debug("cluster info from %s unreadable: %s", ns, exc)
            try:
                self.transport.send(ns, rq.GetClusterInfo(), None, (), done, 3.0)
            except QuiverError:
                pass

    def status(self) -> dict:
        return {"acl_version": self.security.acl.version, "acl_users": len(self.security.acl.users),
                "acl_fetched": self.fetched, "acl_fetch_failures": self.failures}
