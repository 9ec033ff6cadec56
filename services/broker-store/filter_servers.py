"""The broker's side of SQL92 filtering: which filter servers are attached to it.

Owns REGISTER_FILTER_SERVER (a filter server says "I serve SQL92 pulls for
you", every few seconds) and CHECK_CLIENT_CONFIG (a consumer validating its
subscription). `FilterServerRegistry.addrs()` is the set the broker reports to
the name servers with each registration; an entry silent for
FILTER_SERVER_EXPIRY_MS (RocketMQ's 30 s) is dropped, and any change calls
`on_change` (the app re-registers at once) so routes carry the new set.

Does not own the SQL92 engine: services never import each other, so a SQL92
CHECK_CLIENT_CONFIG is relayed to one of the attached filter servers and its
answer (SUCCESS or SUBSCRIPTION_PARSE_FAILED with the parser's message and
position) is passed back. Tag subscriptions are checked here (nothing to
compile). SQL92 pulls are refused by pulling.py: they go through a filter server.
"""

import logging
import time

from quiver.wire.codes import RequestCode, ResponseCode
from quiver.errors import FieldError
from quiver.wire.replies import RegisterFilterServerReply, SubscriptionParseFailedReply

log = logging.getLogger(__name__)

FILTER_SERVER_EXPIRY_MS = 30_000
SCAN_INTERVAL_S = 5.0
RELAY_TIMEOUT_S = 3.0


class FilterServerRegistry:
    """addr -> last registration (monotonic s); `on_change()` after every change of the set."""

    def __init__(self, on_change, expiry_ms: int = FILTER_SERVER_EXPIRY_MS, clock=time.monotonic):
        self.on_change = on_change
        self.expiry_s = expiry_ms / 1000
        self.clock = clock
        self.seen: dict[str, float] = {}

    def addrs(self) -> list[str]:
        return sorted(self.seen)

    def register(self, addr: str) -> bool:
        """Note a registration; True if the set changed."""
        new = addr not in self.seen
        self.seen[addr] = self.clock()
        if new:
            log.info("filter server %s attached", addr)
            self.on_change()
        return new

    def unregister(self, addr: str) -> bool:
        if self.seen.pop(addr, None) is None:
            return False
        log.info("filter server %s detached", addr)
        self.on_change()
        return True

    def expire_step(self) -> list[str]:
        """Drop filter servers silent past the expiry (a step a test can call)."""
        now = self.clock()
        gone = [a for a, t in self.seen.items() if now - t > self.expiry_s]
        for addr in gone:
            del self.seen[addr]
            log.warning("filter server %s silent for %.0f s: dropped", addr, self.expiry_s)
        if gone:
            self.on_change()
        return gone


class FilterServerRequests:
    """REGISTER_FILTER_SERVER and CHECK_CLIENT_CONFIG. A SQL92 check is relayed over
    `transport`; its answer comes back on the transport's thread and is handed to the
    service thread with `post` (Service.call_soon_threadsafe)."""

    def __init__(self, registry: FilterServerRegistry, broker_name: str, broker_id: int, transport, post):
        self.registry = registry
        self.broker_name = broker_name
        self.broker_id = broker_id
        self.transport = transport
        self.post = post

    def handlers(self) -> dict:
        return {RequestCode.REGISTER_FILTER_SERVER: self.register_filter_server,
                RequestCode.CHECK_CLIENT_CONFIG: self.check_client_config}

    def register_filter_server(self, req) -> None:
        addr = req.args.addr
        if req.args.unregister:
            self.registry.unregister(addr)
        else:
            self.registry.register(addr)
        req.reply(ResponseCode.SUCCESS, "", RegisterFilterServerReply(broker_name=self.broker_name,
                                                                        broker_id=self.broker_id))

    def check_client_config(self, req) -> None:
        if (req.args.expression_type or "TAG") == "TAG":
            req.reply(ResponseCode.SUCCESS)
            return
        targets = self.registry.addrs()
        if not targets:
            req.reply(ResponseCode.SYSTEM_ERROR,
                      f"broker {self.broker_name} has no filter server attached, so it cannot check SQL92 "
                      "expressions: start one (python -m quiver_filter --broker ...)")
            return
        self._relay(req, targets)

    def _relay(self, req, targets: list[str]) -> None:
        """Ask the filter servers in turn; answer with the first real answer."""
        addr, rest = targets[0], targets[1:]

        def done(result):
            if isinstance(result, Exception):
                if rest:
                    self._relay(req, rest)
                else:
                    self.post(req.reply, ResponseCode.SYSTEM_ERROR, f"no attached filter server answered: {result}")
                return
            try:   # relayed as the schema reads it: only the expression's error position
                ext = SubscriptionParseFailedReply.decode(result.ext) if result.ext else None
            except FieldError:
                ext = None   # a garbled position: the remark still says what failed
            self.post(req.reply, result.code, result.remark or "", ext)

        self.transport.send(addr, req.args, None, (), done, RELAY_TIMEOUT_S)
