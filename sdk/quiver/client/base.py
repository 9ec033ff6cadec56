"""What every client shares: name servers, route cache, broker calls, fault avoidance.

Routes come from any reachable name server and are refreshed every 30 s (and
on demand after a failure). A broker that failed or answered slowly is avoided
for a while (RocketMQ 5's latency table), so sends go elsewhere at once.
Route and cluster data are read defensively: an entry whose address is not
host:port (or that is not shaped like a route entry) is skipped and logged once
per client, so one bad registration cannot break every user of the route.

All of it is private to the client (its API is what apps call): helpers and the
project's own modules use it through access.py's BrokerAccess.
"""

import dataclasses
import logging
import os
import reprlib
import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import wait
from dataclasses import dataclass
from typing import Any, Self, cast

from quiver.wire import requests as rq
from quiver.wire.codes import RequestCode, ResponseCode
from quiver.errors import ClientError, NoPermissionError, QuiverError, TopicNotExistError
from quiver.wire.names import is_valid_addr
from quiver.wire.names import split_addrs
from quiver.wire.curve import Credentials, credentials_from
from quiver.wire.protocol import Envelope
from quiver.wire.transport import Transport
from quiver.client.access import BrokerAccess
from quiver.client.tracing import ClientTrace

log = logging.getLogger(__name__)

# RocketMQ 5 latency fault table: latency >= left -> avoid for right (ms)
_LATENCY_MAX = (15_000, 5_000, 3_000, 1_800, 550, 100, 50)
_NOT_AVAILABLE = (30_000, 10_000, 6_000, 5_000, 2_000, 0, 0)


_READ_CODES = frozenset((RequestCode.QUERY_CONSUMER_OFFSET, RequestCode.GET_MAX_OFFSET, RequestCode.GET_MIN_OFFSET,
                         RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                         RequestCode.VIEW_MESSAGE_BY_ID, RequestCode.QUERY_MESSAGE))


def _ignore(_result: object) -> None:  # callback of fire-and-forget requests
    pass


_MAX_SKIPS_REMEMBERED = 1024
_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother = 3, 60, 60


def _short(value: object) -> str:
    # bounded (a 1000-deep list has no repr), ASCII only (no control or right-to-left characters)
    text = _REPR.repr(value).encode("ascii", "backslashreplace").decode()
    return text if len(text) <= 60 else text[:57] + "..."


def _broker_id(key: object) -> int | None:
    """A broker id key of an `addrs` map ("0", "1" ... on the wire), or None."""
    if type(key) is int:
        return key if key >= 0 else None
    if isinstance(key, str) and key.isascii() and key.isdigit() and len(key) <= 10:
        return int(key)
    return None


def _addrs_of(name: object, entry: object, skipped: list[str]) -> dict[int, str]:
    """{broker id: address} of one broker entry, leaving out (into `skipped`) what is not host:port."""
    addrs = entry.get("addrs") if isinstance(entry, dict) else None
    if not isinstance(addrs, dict):
        skipped.append(f"broker {_short(name)}: its addrs are {_short(addrs)}, not a map of id -> host:port")
        return {}
    out: dict[int, str] = {}
    for key, addr in addrs.items():
        bid = _broker_id(key)
        if bid is None or not is_valid_addr(addr):
            skipped.append(f"broker {_short(name)}: address {_short(addr)} (id {_short(key)}) is not host:port")
            continue
        out[bid] = addr
    return out


@dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    topic: str
    broker: str
    queue_id: int


class Route:
    """A topic's queues: broker name -> address (the master's, id 0, else a slave's),
    every address of a broker name by id (`by_id`), writable and readable queues, the
    filter servers of each broker address (`filter_servers`) and every live filter server
    of the topic's clusters (`cluster_filter_servers`, [] from an older name server).

    Entries that are not well formed (an address that is not host:port, a queue
    count that is not an integer 0..1024 ...) are left out and described in
    `skipped`, for the client to log once."""

    def __init__(self, topic: str, data: dict[str, Any]):
        self.topic = topic
        route = self._decode(topic, data)
        self.by_id: dict[str, dict[int, str]] = {b.broker_name: dict(b.addrs) for b in route.brokers}
        self.addrs: dict[str, str | None] = {name: ids.get(0) or (ids[min(ids)] if ids else None)
                                             for name, ids in self.by_id.items()}
        self.filter_servers: dict[str, list[str]] = {a: s for a, s in route.filter_servers.items() if s}
        self.cluster_filter_servers: list[str] = route.cluster_filter_servers
        write: list[MessageQueue] = []
        read: list[MessageQueue] = []
        self.order = False   # created with order=True on some broker: a FIFO topic
        for q in route.queues:
            name = q.broker_name
            if not self.addrs.get(name):
                continue
            if q.perm & 2 and 0 in self.by_id[name]:  # writes go to masters only
                write.extend(MessageQueue(topic, name, i) for i in range(q.write))
            if q.perm & 4:
                read.extend(MessageQueue(topic, name, i) for i in range(q.read))
            self.order = self.order or q.order
        self.write_queues = sorted(write)
        self.read_queues = sorted(read)

    def _decode(self, topic: str, data: object) -> rq.RouteData:
        """The reply through its schema (rq.RouteData); what it left out goes to `skipped`. A
        field of the wrong shape is left out alone: the rest of the route stands."""
        ext = {**data, _TOPIC: topic} if isinstance(data, dict) else {_TOPIC: topic}
        route, self.skipped = rq.RouteData.decode_skipping(ext, drop_fields=True)
        return route

    def addr(self, broker: str) -> str:
        """The address of `broker`, one that this route's queues name (those all have one)."""
        return cast(str, self.addrs[broker])


_TOPIC = rq.RouteData.key("topic")


class ClientBase:
    """Owns the Transport, the name-server list and the route cache."""

    _route_refresh_s = 30.0

    def __init__(self, namesrv: str | list[str] | None, request_timeout: float = 3.0,
                 credentials: str | Credentials | None = None,
                 tracer_factory: "Callable[[ClientBase], ClientTrace] | None" = None) -> None:
        # auth on: a key file path or Credentials (None: QUIVER_CREDENTIALS, if set); read now so a
        # bad path fails at construction, not at the first send
        self.credentials = credentials_from(credentials)
        self.namesrvs = split_addrs(namesrv if namesrv is not None else os.environ.get("QUIVER_NAMESRV", "127.0.0.1:9876"))
        if not self.namesrvs:
            raise ClientError("no name server given: pass namesrv='host:port;host:port'")
        self.request_timeout = request_timeout
        self.client_id = f"{socket.gethostname()}@{os.getpid()}#{time.monotonic_ns()}"
        self._transport: Transport | None = None
        self._routes: dict[str, tuple[float, Route]] = {}
        self._avoid: dict[str, float] = {}
        self._read_down: dict[str, float] = {}
        self._cluster: dict[str, Any] = {}
        self._skips_logged: set[str] = set()
        self._lock = threading.Lock()
        self._started = False
        # traced clients (trace=True): what start() builds the ClientTrace (`tracer`) with
        self._tracer_factory = tracer_factory
        self._traced = tracer_factory is not None
        self._brokers = BrokerAccess(self)   # what helpers of this client may use (access.py)
        self._connection_listener: Callable[[str, str], object] | None = None

    # ---- lifecycle ------------------------------------------------------------

    _heartbeat_interval_s = 30.0
    tracer: ClientTrace | None = None   # records a traced client's events while it runs
    _transport_factory = Transport  # what start() builds; quiver.testing.attach gives a client a fake one

    def start(self) -> Self:
        """Open the transport (its IO thread) and start heartbeating if this client sends any;
        returns the client. Calling it again does nothing."""
        if not self._started:
            self._transport = self._transport_factory(type(self).__name__, on_push=self._on_push, identity_prefix=self.client_id,
                                                    credentials=self.credentials)
            if self._connection_listener is not None:
                self._transport.connection_listener = self._connection_listener
            self._started = True
            if self._tracer_factory is not None and self.tracer is None:
                self.tracer = self._tracer_factory(self)
            self._hb_stop = threading.Event()
            if self._heartbeat_payload() is not None:
                self._send_heartbeats()
                threading.Thread(target=self._heartbeat_loop, name="heartbeat", daemon=True).start()
        return self

    def on_connection(self, fn: Callable[[str, str], object] | None) -> None:
        """Call `fn(address, state)` when a connection of this client to a name server or broker
        changes: "connected" (its handshake succeeded, also again after a loss), "disconnected",
        or "refused" (the peer does not accept this client's key). It runs on a worker thread of
        the client (never its IO thread); what it raises is logged. None: no more calls."""
        self._connection_listener = fn
        if self._transport is not None:
            self._transport.connection_listener = fn

    def shutdown(self) -> None:
        """Leave the groups this client heartbeats, send what the trace queue holds (bounded) and
        close the transport. Calling it again, or before start(), does nothing."""
        if self._started:
            self._hb_stop.set()
            self._before_close()
            self._started = False
            tracer, self.tracer = self.tracer, None
            if tracer is not None:
                tracer.dispatcher.close()   # what is queued is sent, bounded by its timeout
            self._io().close()

    # ---- heartbeats and pushed requests ----------------------------------------------

    def _heartbeat_payload(self) -> rq.HeartBeat | dict[str, Any] | None:
        """The HEART_BEAT this client sends (an `rq.HeartBeat`; its `client_id` is always this
        client's), or None to send none. The wire form {"producers": [...], "consumers": [...]}
        is still accepted from a subclass and decoded through the schema (`_heartbeat`)."""
        return None

    def _heartbeat(self) -> rq.HeartBeat | None:
        """`_heartbeat_payload()` as a typed HEART_BEAT of this client; FieldError if a dict
        payload does not fit the schema."""
        payload = self._heartbeat_payload()
        if payload is None:
            return None
        if isinstance(payload, rq.HeartBeat):
            if payload.client_id != self.client_id:
                payload = dataclasses.replace(payload, client_id=self.client_id)
            return payload
        return rq.HeartBeat.decode({**payload, rq.HeartBeat.key("client_id"): self.client_id})

    def _heartbeat_brokers(self) -> dict[str, str]:
        """Broker name -> address this client heartbeats to (default: every broker)."""
        return self._all_broker_addrs()

    def _send_heartbeats(self) -> None:
        """Send `_heartbeat()` now to every broker in `_heartbeat_brokers()` and their slaves (also
        done every `_heartbeat_interval_s`); a failure is logged, never raised."""
        try:
            req = self._heartbeat()
            if req is None:
                return
            brokers = self._heartbeat_brokers()
        except QuiverError as exc:
            log.warning("heartbeat skipped: %s", exc)
            return
        # slaves too: while a master is down its slave answers the group's consumer list
        for addr in [*brokers.values(), *self._slave_addrs(brokers)]:
            try:
                self._io().send(addr, req, None, (), _ignore, self.request_timeout)
            except QuiverError as exc:  # shut down meanwhile
                log.debug("heartbeat to %s not sent: %s", addr, exc)
                return

    def _heartbeat_loop(self) -> None:
        while not self._hb_stop.wait(self._heartbeat_interval_s):
            self._send_heartbeats()

    def _before_close(self) -> None:
        """Leave every group this client heartbeats, at once: the broker tells the other
        members (they rebalance now, not after the 120 s expiry) and stops pushing to us."""
        try:
            hb = self._heartbeat()
        except QuiverError:
            return
        if hb is None:
            return
        leaving = [rq.UnregisterClient(client_id=self.client_id, producer_group=g) for g in hb.producers]
        leaving += [rq.UnregisterClient(client_id=self.client_id, consumer_group=c.group) for c in hb.consumers]
        try:
            addrs = list(self._heartbeat_brokers().values()) if leaving else []
        except QuiverError:
            return
        futs = [self._io().call_future(addr, req, timeout=1.0) for addr in addrs for req in leaving]
        wait(futs, 2.0)  # best effort: a broker that does not answer expires us later anyway

    # handlers for requests a broker pushes: {RequestCode: method(addr, env) -> frames | None}
    _push_handlers: dict[int, Callable[[Any, str, Envelope], Any]] = {}

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def _on_push(self, addr: str, env: Envelope) -> Any:
        handler = self._push_handlers.get(env.code)
        if handler is None:
            log.debug("ignoring pushed request %s from %s", env.code, addr)
            return None
        return handler(self, addr, env)

    def _need_started(self) -> None:
        if not self._started:
            raise ClientError(f"{type(self).__name__} is not started: call start() first")

    def _io(self) -> Transport:
        """The transport start() built (ClientError before that), typed for the callers."""
        if self._transport is None:
            raise ClientError(f"{type(self).__name__} is not started: call start() first")
        return self._transport

    # ---- name server ---------------------------------------------------------------

    def _call_namesrv(self, code: "int | rq.Schema", ext: dict[str, Any] | None = None) -> dict[str, Any]:
        """The reply's ext from the first name server that answers; `code` is a typed request
        (quiver.wire.requests), or a bare code with `ext`."""
        last: Exception | None = None
        missing: TopicNotExistError | None = None
        for addr in self.namesrvs:
            try:
                reply: dict[str, Any] = self._io().call(addr, code, ext, timeout=self.request_timeout).ext
                return reply
            except NoPermissionError:  # every name server checks the same grants
                raise
            except TopicNotExistError as exc:  # one restarted moments ago knows no route until brokers register
                missing = exc
            except QuiverError as exc:
                last = exc
        if missing is not None:
            raise missing
        raise ClientError(f"no name server answered ({'; '.join(self.namesrvs)}): {last}")

    def _cached_route(self, topic: str) -> Route | None:
        """The last route fetched for `topic`, however old; never calls the name server
        (safe on the IO thread)."""
        cached = self._routes.get(topic)
        return cached[1] if cached else None

    def _route(self, topic: str, refresh: bool = False) -> Route:
        """`topic`'s queues and broker addresses from a name server, cached for `_route_refresh_s`
        (`refresh=True` asks again). TopicNotExistError when no name server knows the topic,
        ClientError when none answers or the route is not a map."""
        now = time.monotonic()
        cached = self._routes.get(topic)
        if cached and not refresh and now - cached[0] < self._route_refresh_s:
            return cached[1]
        data = self._call_namesrv(rq.GetRouteInfo(topic=topic)).get("route")
        if not isinstance(data, dict):
            raise ClientError(f"the name server's route of {topic!r} is {_short(data)}, not a map")
        route = Route(topic, data)
        self._log_skipped(f"route of {topic!r}", route.skipped)
        self._routes[topic] = (now, route)
        return route

    def _cluster_info(self) -> dict[str, Any]:
        """The name server's cluster info, with every broker address that is not host:port left out
        (and brokers left with no address, and `live` entries under such an address)."""
        info = self._call_namesrv(rq.GetClusterInfo()).get("cluster")
        if not isinstance(info, dict):
            raise ClientError(f"the name server's cluster info is {_short(info)}, not a map")
        skipped: list[str] = []
        brokers: dict[str, Any] = {}
        raw_brokers, raw_live = info.get("brokers"), info.get("live")
        for name, entry in (raw_brokers if isinstance(raw_brokers, dict) else {}).items():
            ids = _addrs_of(name, entry, skipped)
            if ids:
                brokers[name] = {**entry, "addrs": {str(k): a for k, a in sorted(ids.items())}}
        live = raw_live if isinstance(raw_live, dict) else {}
        info = {**info, "brokers": brokers, "live": {a: v for a, v in live.items() if is_valid_addr(a)}}
        self._log_skipped("cluster info", skipped)
        self._cluster = info
        return info

    def _log_skipped(self, where: str, skipped: list[str]) -> None:
        """Each skipped entry is logged once per client (a route is read every 30 s)."""
        for what in skipped:
            if what not in self._skips_logged:
                if len(self._skips_logged) < _MAX_SKIPS_REMEMBERED:
                    self._skips_logged.add(what)
                log.warning("%s from the name server: skipped %s", where, what)

    def _slave_addrs(self, names: Iterable[str]) -> list[str]:
        """Slave addresses (ids >= 1) of these broker names, from the last cluster info."""
        brokers = self._cluster.get("brokers", {})
        return [a for n in names for bid, a in sorted((brokers.get(n) or {}).get("addrs", {}).items())
                if str(bid) != "0"]

    def _broker_addr(self, broker: str, topic: str | None = None) -> str:
        """The address of broker name `broker` (its master's, else a slave's): from `topic`'s
        route when given, else from the cluster info. ClientError if no name server has it."""
        if topic:
            routed = self._route(topic).addrs.get(broker)
            if routed:
                return routed
        info = self._cluster_info()["brokers"].get(broker)
        if not info:
            raise ClientError(f"broker {broker!r} is not registered with any name server")
        addr: str = info["addrs"].get("0") or next(iter(info["addrs"].values()))
        return addr

    def _all_broker_addrs(self) -> dict[str, str]:
        """Broker name -> address (its master's, else a slave's) of every registered broker."""
        return {name: b["addrs"].get("0") or next(iter(b["addrs"].values()))
                for name, b in self._cluster_info()["brokers"].items() if b["addrs"]}

    # ---- reads from slaves ------------------------------------------------------------------

    _master_retry_s = 5.0   # after a failed read, the master is tried again this much later

    def _read_addr(self, topic: str, broker: str, route: Route | None = None, wait: bool = True) -> str | None:
        """Where reads of a broker name go: its master, or (while the master's reads fail)
        its lowest-id slave. The cached route is used when there is one; without one,
        `wait=False` (IO thread) answers None instead of asking a name server."""
        if route is None:
            cached = self._routes.get(topic)
            if cached is None and not wait:
                return None
            route = cached[1] if cached else self._route(topic)
        ids = route.by_id.get(broker) or {}
        now = time.monotonic()
        for bid in sorted(ids):
            addr = ids[bid]
            if self._read_down.get(addr, 0) <= now:
                return addr
        return route.addrs.get(broker)

    def _read_failed(self, addr: str) -> None:
        """A read from `addr` failed with a connection error: use a slave for a while."""
        self._read_down[addr] = time.monotonic() + self._master_retry_s

    def _call_read(self, topic: str, broker: str, code: "int | rq.Schema",
                  ext: dict[str, Any] | None = None) -> Envelope:
        """A read request (offsets, queue bounds; typed, quiver.wire.requests) to the master, else to a slave."""
        addr = self._read_addr(topic, broker)
        if addr is None:
            raise ClientError(f"broker {broker!r} of topic {topic!r} has no address")
        return self._call_broker(addr, code, ext)

    # ---- fault avoidance -----------------------------------------------------------------

    def _note_latency(self, broker: str, latency_ms: float, failed: bool = False) -> None:
        """Record a request's latency to `broker` (or a failure): a slow or failing broker is
        avoided for a while (RocketMQ's latency fault table; see `_available`)."""
        if failed:
            latency_ms = 10_000
        for bound, avoid in zip(_LATENCY_MAX, _NOT_AVAILABLE):
            if latency_ms >= bound:
                if avoid:
                    self._avoid[broker] = time.monotonic() + avoid / 1000
                return

    def _available(self, broker: str) -> bool:
        """False while `broker` is avoided after a slow or failed request (`_note_latency`)."""
        until = self._avoid.get(broker)
        if until is None:
            return True
        if until > time.monotonic():
            return False
        self._avoid.pop(broker, None)   # served its time: an empty table lets the producer skip these checks
        return True

    def _call_broker(self, addr: str, code: "int | rq.Schema", ext: dict[str, Any] | None = None,
                    bodies: Sequence[bytes] = (), timeout: float | None = None,
                    ok: tuple[int, ...] = (ResponseCode.SUCCESS,)) -> Envelope:
        """A request to a broker: `code` is a typed request (quiver.wire.requests), or a bare code with `ext`. Reads (offsets, queue bounds, consumer lists, lookups) sent
        to a master that is unreachable go to its slaves (known from cached routes)."""
        self._need_started()
        slaves = self._slaves_of_master(addr) if getattr(code, "CODE", code) in _READ_CODES else ()
        if not slaves:
            return self._io().call(addr, code, ext, bodies, timeout or self.request_timeout, ok)
        now = time.monotonic()
        order = [a for a in (addr, *slaves) if self._read_down.get(a, 0) <= now] or [addr, *slaves]
        for i, a in enumerate(order):
            try:
                return self._io().call(a, code, ext, bodies, timeout or self.request_timeout, ok)
            except ClientError:
                self._read_failed(a)
                if i == len(order) - 1:
                    raise
        raise ClientError(f"no reply from {addr} or its slaves")  # not reached: the last failure raised

    def _slaves_of_master(self, addr: str) -> list[str]:
        for _, route in list(self._routes.values()):
            for ids in route.by_id.values():
                if ids.get(0) == addr:
                    return [ids[b] for b in sorted(ids) if b]
        return []
