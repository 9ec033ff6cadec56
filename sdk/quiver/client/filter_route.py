"""Where a consumer pulls a queue from, and SQL92 subscription checks.

Tag subscriptions pull from the queue's broker. SQL92 subscriptions pull
through a filter server, never from the broker itself, so an unfiltered
message can never reach the app. Any filter server of the cluster can serve
any broker (the pull names the broker: PullMessage.broker_addr), so the route
offers them nearest first (`candidates`): those attached to the queue's broker
(`route.filter_servers[broker_addr]`), else those of the topic's other brokers,
else any live one of the topic's clusters (`route.cluster_filter_servers`).
Everything is read from the cached route: pull addressing runs on the
transport's IO thread and never asks anyone. Used by PullConsumer and
PushConsumer alike:

    servers = FilterServers(client_id)
    addr = servers.pull_address(route, mq, selector)     # raises NoFilterServerError
    ... on a failed pull (ClientError / RequestTimeoutError / SERVICE_NOT_AVAILABLE):
    servers.failed(addr)                                 # avoided for a while; next call fails over

Consumers are spread over the nearest tier's filter servers by a stable hash
of (client id, queue); a failed one is avoided for `avoid_s`, and its queues
move to the others of that tier, or to the next tier when the whole tier
failed (and back when it returns). With none left, `pull_address` raises
NoFilterServerError: the caller logs it (`servers.log_unavailable`) and
retries later with a refreshed route.

`as_selector(expression)` is what both consumers' `subscribe` accepts;
`check_subscription` validates an expression at subscribe/start time through
CHECK_CLIENT_CONFIG on a filter server of the topic's brokers or clusters
(falling back to the broker, which relays to one of its filter servers).
"""

import hashlib
import logging
import threading
import time

from quiver.wire import requests as rq
from quiver.wire.codes import ResponseCode
from quiver.errors import ClientError, FieldError, QuiverError, SubscriptionParseError
from quiver.client.message import MessageSelector

log = logging.getLogger(__name__)

AVOID_S = 10.0
LOG_EVERY_S = 10.0
# pull failures that mean "this filter server is gone or unusable": fail over
FAILOVER_CODES = frozenset({ResponseCode.SERVICE_NOT_AVAILABLE, ResponseCode.SYSTEM_BUSY,
                            ResponseCode.REQUEST_CODE_NOT_SUPPORTED, ResponseCode.SYSTEM_ERROR})


class NoFilterServerError(ClientError):
    """No live filter server serves the queue's broker: SQL92 pulls wait until one is back."""


def as_selector(expression) -> MessageSelector:
    """A subscription: a MessageSelector as given, or a tag expression ("*", "TagA || TagB")."""
    sel = expression if isinstance(expression, MessageSelector) else MessageSelector.tags(expression)
    if sel.type not in ("TAG", "SQL92"):
        raise ClientError(f"unknown selector type {sel.type!r}: use MessageSelector.tags or .sql")
    return sel


def wire_subscriptions(subscriptions: dict) -> dict:
    """topic -> rq.Subscription, as a consumer's heartbeat names its subscriptions."""
    return {t: rq.Subscription(type=s.type, expression=s.expression) for t, s in subscriptions.items()}


def is_sql(selector) -> bool:
    return selector is not None and getattr(selector, "type", "TAG") == "SQL92"


def _stable_hash(text: str) -> int:
    # not crc32: it is linear, and its low bits barely move between 'c1|T|0' and 'c2|T|1'
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def candidates(route, broker_addr: str) -> list[list[str]]:
    """The filter servers that may serve `broker_addr`, in tiers, nearest first: its own, then
    those of the topic's other brokers, then the other live ones of the topic's clusters."""
    own = set(route.filter_servers.get(broker_addr) or ())
    topic = {a for addrs in route.filter_servers.values() for a in addrs} - own
    cluster = set(route.cluster_filter_servers) - own - topic
    return [sorted(tier) for tier in (own, topic, cluster) if tier]


def pull_address(route, mq, selector, client_id: str = "", avoid=()) -> str:
    """The address to pull `mq` from: its broker (tags) or the nearest live filter server (SQL92)."""
    broker_addr = route.addrs.get(mq.broker)
    if not broker_addr:
        raise ClientError(f"broker {mq.broker!r} of {mq} is not in the route")
    if not is_sql(selector):
        return broker_addr
    tiers = candidates(route, broker_addr)
    for tier in tiers:
        live = [a for a in tier if a not in avoid]
        if live:
            return live[_stable_hash(f"{client_id}|{mq.topic}|{mq.queue_id}") % len(live)]
    servers = [a for tier in tiers for a in tier]
    why = f"all of {servers} failed recently" if servers else "none is registered in its cluster"
    raise NoFilterServerError(
        f"no filter server for broker {mq.broker} ({broker_addr}) to pull {mq.topic}:{mq.queue_id} with a SQL92 "
        f"subscription: {why}; start one (python -m quiver_filter). Retrying.")


class FilterServers:
    """A consumer's view of filter servers: recent failures, rate-limited logging. Thread-safe."""

    def __init__(self, client_id: str, avoid_s: float = AVOID_S, clock=time.monotonic):
        self.client_id = client_id
        self.avoid_s = avoid_s
        self.clock = clock
        self._failed: dict[str, float] = {}
        self._lock = threading.Lock()
        self._logged = 0.0

    def avoided(self) -> set[str]:
        now = self.clock()
        with self._lock:
            for addr in [a for a, t in self._failed.items() if t <= now]:
                del self._failed[addr]
            return set(self._failed)

    def pull_address(self, route, mq, selector) -> str:
        return pull_address(route, mq, selector, self.client_id, self.avoided())

    def failed(self, addr: str) -> None:
        with self._lock:
            if addr not in self._failed:
                log.warning("filter server %s failed; moving its queues to another filter server", addr)
            self._failed[addr] = self.clock() + self.avoid_s

    def ok(self, addr: str) -> None:
        with self._lock:
            self._failed.pop(addr, None)

    def log_unavailable(self, exc: Exception) -> None:
        now = self.clock()
        if now - self._logged >= LOG_EVERY_S:
            self._logged = now
            log.error("%s", exc)


def should_fail_over(result) -> bool:
    """True if a pull result (exception or reply envelope) means the filter server is unusable."""
    if isinstance(result, Exception):
        return isinstance(result, ClientError) or getattr(result, "code", None) in FAILOVER_CODES
    return result.code in FAILOVER_CODES


def check_subscription(client, topic: str, selector, group: str = "") -> bool:
    """Compile `selector` remotely; raise SubscriptionParseError (with .position) if it is bad.

    Tries the filter servers of the topic's brokers, then the others of their
    clusters, then the brokers (which relay to theirs). True if some server
    checked it; False (after logging) if none could, in which case the first
    pull will report a bad expression.
    """
    if not is_sql(selector):
        return True
    route = client.route(topic, refresh=True)
    req = rq.CheckClientConfig(group=group or None, topic=topic, expression_type="SQL92",
                               expression=selector.expression)
    brokers = sorted({a for a in route.addrs.values() if a})
    targets = [f for b in brokers for f in sorted(route.filter_servers.get(b) or ())]
    targets += sorted(route.cluster_filter_servers) + brokers
    last: Exception | None = None
    for addr in dict.fromkeys(targets):
        try:
            env = client.transport.call(addr, req, timeout=client.request_timeout,
                                        ok=(ResponseCode.SUCCESS, ResponseCode.SUBSCRIPTION_PARSE_FAILED))
        except QuiverError as exc:
            last = exc
            continue
        if env.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED:
            err = SubscriptionParseError(f"subscription to {topic!r} is not valid SQL92: {env.remark}")
            try:
                err.position = rq.SubscriptionParseFailedReply.decode(env.ext).position
            except FieldError:  # the position only helps; the refusal stands without it
                err.position = None
            err.expression = selector.expression
            raise err
        return True
    log.error("could not validate the SQL92 subscription to %r (no filter server or broker answered: %s); "
              "nothing will be delivered until a filter server of the topic's cluster is up", topic, last)
    return False
