"""Where a consumer pulls a queue from, and SQL92 subscription checks.

Tag subscriptions pull from the queue's broker. SQL92 subscriptions pull
through a filter server attached to that broker (the route carries them:
`route.filter_servers[broker_addr]`), never from the broker itself, so an
unfiltered message can never reach the app. Used by PullConsumer and
PushConsumer alike:

    servers = FilterServers(client_id)
    addr = servers.pull_address(route, mq, selector)     # raises NoFilterServerError
    ... on a failed pull (ClientError / RequestTimeoutError / SERVICE_NOT_AVAILABLE):
    servers.failed(addr)                                 # avoided for a while; next call fails over

Consumers are spread over a broker's filter servers by a stable hash of
(client id, queue); a failed one is avoided for `avoid_s`, and its queues move
to the others of the same broker. With none left, `pull_address` raises
NoFilterServerError: the caller logs it (`servers.log_unavailable`) and
retries later with a refreshed route.

`as_selector(expression)` is what both consumers' `subscribe` accepts;
`check_subscription` validates an expression at subscribe/start time through
CHECK_CLIENT_CONFIG on a filter server of the topic's brokers (falling back to
the broker, which relays to one of its filter servers).
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


def pull_address(route, mq, selector, client_id: str = "", avoid=()) -> str:
    """The address to pull `mq` from: its broker (tags) or a filter server of its broker (SQL92)."""
    broker_addr = route.addrs.get(mq.broker)
    if not broker_addr:
        raise ClientError(f"broker {mq.broker!r} of {mq} is not in the route")
    if not is_sql(selector):
        return broker_addr
    servers = sorted(set(route.filter_servers.get(broker_addr) or ()))
    if not servers:
        # the broker has none of its own: any filter server of the cluster pulls from it (by `broker_addr`)
        servers = sorted({a for addrs in route.filter_servers.values() for a in addrs})
    live = [a for a in servers if a not in avoid]
    if not live:
        why = f"all of {servers} failed recently" if servers else "none is registered"
        raise NoFilterServerError(
            f"no filter server for broker {mq.broker} ({broker_addr}) to pull {mq.topic}:{mq.queue_id} with a SQL92 "
            f"subscription: {why}; start one (python -m quiver_filter --broker {broker_addr}). Retrying.")
    return live[_stable_hash(f"{client_id}|{mq.topic}|{mq.queue_id}") % len(live)]


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

    Tries every filter server of the topic's brokers, then the brokers (which
    relay to theirs). True if some server checked it; False (after logging) if
    none could, in which case the first pull will report a bad expression.
    """
    if not is_sql(selector):
        return True
    route = client.route(topic, refresh=True)
    req = rq.CheckClientConfig(group=group or None, topic=topic, expression_type="SQL92",
                               expression=selector.expression)
    targets = []
    for broker_addr in sorted(set(route.addrs.values())):
        targets.extend(sorted(route.filter_servers.get(broker_addr) or ()))
    targets.extend(sorted(set(route.addrs.values())))
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
              "nothing will be delivered until a filter server of the topic's brokers is up", topic, last)
    return False
