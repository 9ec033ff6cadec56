"""The filter server process: a Service loop, its broker attachment, registration.

A filter server is attached to one broker. `--broker HOST:PORT` names it;
otherwise it asks the name servers for the cluster and attaches to the live
master with the fewest filter servers (ties broken by a hash of our own
address, so replicas started together spread out), and moves only if that
broker disappears. It registers with its broker at start and every
`register_interval_ms` (the broker expires it after 30 s of silence and
reports it to the name servers, so routes carry it); on shutdown it
unregisters. It serves pulls for any broker of its cluster (a pull names its
broker): each round also refreshes the cluster's broker addresses
(`known_brokers`), with or without `--broker`, and a pull for any other
address starts one look at the cluster at once (at most one a second) and
waits for it: a broker that joined since the last round is served without
waiting for the next one.
"""

import hashlib
import logging
import time
from collections import Counter

from quiver.wire import requests as rq
from quiver.wire.codes import ResponseCode
from quiver.errors import QuiverError
from quiver.runtime.acl_sync import AclFollower
from quiver.runtime.security import service_security
from quiver.runtime.service import Service
from quiver.runtime.settings import split_addrs
from quiver.wire.transport import Transport

from .handlers import make_handlers
from .selectors import SelectorCache

log = logging.getLogger(__name__)

RETRY_S = 1.0
LOOK_EVERY_S = 1.0   # on-demand looks at the cluster (a pull for an unknown broker), at most this often


def _rank(me: str, addr: str) -> bytes:
    return hashlib.blake2b(f"{me}|{addr}".encode(), digest_size=8).digest()


def pick_broker(cluster: rq.ClusterData, me: str, current: str | None = None) -> str | None:
    """The master to attach to: the least loaded, staying on `current` unless another has fewer.

    When filter servers started together crowd one broker while another has
    fewer, only one of them (the highest rank) moves per round, so they spread
    out without oscillating (`--scale filter=N` with N >= brokers covers all).
    """
    load = {addr: [f for f in info.filter_servers if f != me]
            for addr, info in cluster.live.items() if info.broker_id == 0}
    if not load:
        return None
    least = min(len(v) for v in load.values())
    if current in load:
        if len(load[current]) <= least:
            return current
        crowd = load[current] + [me]
        if max(crowd, key=lambda f: _rank(f, current)) != me:
            return current
    return min(load, key=lambda a: (len(load[a]), _rank(me, a)))


class App:
    def __init__(self, config):
        self.config = config
        self.advertised = config.advertised
        self.counters = Counter()
        self.selectors = SelectorCache(config.selector_cache)
        self.selectivity: dict = {}   # (group, topic, expression) -> EWMA of matched/scanned
        self.broker: str | None = config.broker or None
        # every broker address of the cluster: a pull for a broker with no filter server of its
        # own may come here (the pull names its broker: PullMessage.broker_addr)
        self.known_brokers: set[str] = set()
        self._looking: list = []          # callbacks waiting for the look at the cluster in flight
        self._looked_at = 0.0             # time.monotonic() of the last on-demand look
        self.registered_at: float | None = None
        self.namesrvs = split_addrs(config.namesrv)
        self.security = service_security(config, "filter")
        self.service = Service(config.listen, {}, "filter", self.status, security=self.security)
        self.service.counters = self.counters
        self.service.handlers.update(make_handlers(self))
        self.transport = Transport("filter")
        self.acl = None
        if self.security is not None:  # users and rules come from the brokers
            self.acl = AclFollower(self.security, self.transport, namesrvs=self.namesrvs)
            self.service.every("acl_sync", self.acl.interval_s, self.acl.step, first_delay_s=0.5)

    # ---- attachment and registration (service thread; replies come back through the inbox) -------

    def register_step(self) -> None:
        """Refresh the cluster's broker addresses (the brokers we serve), pick ours unless --broker
        names it, register with it; schedules the next step. A broker named by --broker is
        registered with at once: the cluster view only widens which pulls we take."""
        if self.config.broker:
            self._register()
            self._ask_cluster(list(self.namesrvs), attach=False)
        else:
            self._ask_cluster(list(self.namesrvs))

    def look_for_broker(self, then) -> None:
        """A pull named a broker we do not know: ask the name servers now (one look in flight, at
        most one a second); `then()` runs on the service thread when the look is over."""
        now = time.monotonic()
        if not self._looking and now - self._looked_at < LOOK_EVERY_S:
            then()
            return
        self._looking.append(then)
        if len(self._looking) == 1:
            self._looked_at = now
            self._ask_cluster(list(self.namesrvs), attach=False)

    def _looked(self) -> None:
        waiting, self._looking = self._looking, []
        for then in waiting:
            then()

    def _ask_cluster(self, namesrvs: list[str], attach: bool = True) -> None:
        if not namesrvs:
            self._looked()
            if attach:
                log.warning("no name server answered; cannot pick a broker (retrying)")
                self._next(RETRY_S)
            else:
                log.debug("no name server answered; serving the brokers known so far")
            return
        addr, rest = namesrvs[0], namesrvs[1:]

        def done(result):
            self.service.call_soon_threadsafe(self._cluster_answer, result, rest, attach)
        self.transport.send(addr, rq.GetClusterInfo(), None, (), done, 3.0)

    def _cluster_answer(self, result, rest, attach: bool = True) -> None:
        if isinstance(result, Exception) or result.code != ResponseCode.SUCCESS:
            self._ask_cluster(rest, attach)
            return
        try:
            cluster = rq.ClusterReply.decode(result.ext).cluster
        except QuiverError as exc:
            log.warning("cluster info ignored: %s", exc.remark)
            self._ask_cluster(rest, attach)
            return
        self.known_brokers = {a for b in cluster.brokers.values() for a in b.addrs.values()}
        self._looked()
        if not attach:
            return
        chosen = pick_broker(cluster, self.advertised, self.broker)
        if chosen != self.broker:
            if chosen:
                log.info("attaching to broker %s", chosen)
            else:
                log.warning("no live broker to attach to (retrying)")
            if self.broker:  # leave the old broker's list at once (it would expire us in 30 s)
                self.transport.send(self.broker, rq.RegisterFilterServer(addr=self.advertised, unregister=True),
                                    None, (), lambda _r: None, 2.0)
            self.broker = chosen
            self.registered_at = None
        if self.broker:
            self._register()
        else:
            self._next(RETRY_S)

    def _register(self) -> None:
        broker = self.broker

        def done(result):
            self.service.call_soon_threadsafe(self._registered, broker, result)
        self.transport.send(broker, rq.RegisterFilterServer(addr=self.advertised), None, (), done, 3.0)

    def _registered(self, broker, result) -> None:
        if isinstance(result, Exception) or result.code != ResponseCode.SUCCESS:
            log.warning("registration with broker %s failed: %s", broker,
                        result if isinstance(result, Exception) else result.remark)
            self.registered_at = None
            self._next(RETRY_S)
            return
        if self.registered_at is None:
            try:
                name = rq.RegisterFilterServerReply.decode(result.ext).broker_name
            except QuiverError as exc:   # FieldError: registered all the same, the name is only logged
                name = f"unnamed: {exc}"
            log.info("registered with broker %s (%s)", broker, name)
        self.registered_at = time.time()
        self._next(self.config.register_interval_ms / 1000)

    def _next(self, delay_s: float) -> None:
        self.service.call_later(min(delay_s, self.config.register_interval_ms / 1000), self.register_step)

    def status(self) -> dict:
        return {"role": "filter", "addr": self.advertised, "broker": self.broker,
                "registered": self.registered_at is not None, "selectors": len(self.selectors),
                "serves_brokers": sorted(self.known_brokers | ({self.broker} if self.broker else set()))[:100],
                "subscriptions": self.selectors.subscriptions()[:50],
                "selector_cache": {"hits": self.selectors.hits, "misses": self.selectors.misses}}

    # ---- lifecycle --------------------------------------------------------------------------------

    def run(self) -> None:
        self.service.bind()
        self.register_step()
        log.info("filter server on %s (advertised %s, broker %s)", self.config.listen, self.advertised,
                 self.broker or "picked from the name servers")
        try:
            self.service.run()
        finally:
            self.shutdown()

    def shutdown(self) -> None:
        if self.broker:
            leave = rq.RegisterFilterServer(addr=self.advertised, unregister=True)
            fut = self.transport.call_future(self.broker, leave, timeout=1.0)
            try:
                fut.result(1.5)
            except Exception:
                pass
        self.transport.close()
        self.service.close()
