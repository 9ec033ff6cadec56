"""The broker's side of SQL92 filtering: which filter servers are attached to it.

Owns REGISTER_FILTER_SERVER (a filter server says "I serve SQL92 pulls for
you", every few seconds) and CHECK_CLIENT_CONFIG (a consumer validating its
subscription). `app.filter_servers` is the set the broker reports to the name
servers with each registration; an entry silent for FILTER_SERVER_EXPIRY_MS
(RocketMQ's 30 s) is dropped, and any change re-registers at once so routes
carry the new set.

Does not own the SQL92 engine: services never import each other, so a SQL92
CHECK_CLIENT_CONFIG is relayed to one of the attached filter servers and its
answer (SUCCESS or SUBSCRIPTION_PARSE_FAILED with the parser's message and
position) is passed back. Tag subscriptions are checked here (nothing to
compile). SQL92 pulls are refused by pulling.py: they go through a filter server.
"""

import logging
import time

from quiver.codes import RequestCode, ResponseCode

log = logging.getLogger(__name__)

FILTER_SERVER_EXPIRY_MS = 30_000
SCAN_INTERVAL_S = 5.0
RELAY_TIMEOUT_S = 3.0


class FilterServerRegistry:
    """addr -> last registration (monotonic s); mirrors its keys into `app.filter_servers`."""

    def __init__(self, app, expiry_ms: int = FILTER_SERVER_EXPIRY_MS, clock=time.monotonic):
        self.app = app
        self.expiry_s = expiry_ms / 1000
        self.clock = clock
        self.seen: dict[str, float] = {}

    def register(self, addr: str) -> bool:
        """Note a registration; True if the set changed."""
        new = addr not in self.seen
        self.seen[addr] = self.clock()
        if new:
            log.info("filter server %s attached", addr)
            self._changed()
        return new

    def unregister(self, addr: str) -> bool:
        if self.seen.pop(addr, None) is None:
            return False
        log.info("filter server %s detached", addr)
        self._changed()
        return True

    def expire_step(self) -> list[str]:
        """Drop filter servers silent past the expiry (a step a test can call)."""
        now = self.clock()
        gone = [a for a, t in self.seen.items() if now - t > self.expiry_s]
        for addr in gone:
            del self.seen[addr]
            log.warning("filter server %s silent for %.0f s: dropped", addr, self.expiry_s)
        if gone:
            self._changed()
        return gone

    def _changed(self) -> None:
        self.app.filter_servers.clear()
        self.app.filter_servers.update(self.seen)
        self.app.register_all()


def make_handlers(app):
    registry = FilterServerRegistry(app)
    app.filter_registry = registry

    app.service.every("filter_server_scan", SCAN_INTERVAL_S, registry.expire_step)

    def register_filter_server(req):
        addr = req.args.addr
        if req.args.unregister:
            registry.unregister(addr)
        else:
            registry.register(addr)
        req.reply(ResponseCode.SUCCESS, "", {"broker_name": app.config.name, "broker_id": app.config.broker_id})

    def check_client_config(req):
        if (req.args.expression_type or "TAG") == "TAG":
            req.reply(ResponseCode.SUCCESS)
            return
        targets = sorted(registry.seen)
        if not targets:
            req.reply(ResponseCode.SYSTEM_ERROR,
                      f"broker {app.config.name} has no filter server attached, so it cannot check SQL92 "
                      "expressions: start one (python -m quiver_filter --broker ...)")
            return
        _relay(app, req, targets)

    return {RequestCode.REGISTER_FILTER_SERVER: register_filter_server,
            RequestCode.CHECK_CLIENT_CONFIG: check_client_config}


def _relay(app, req, targets: list[str]) -> None:
    """Ask the filter servers in turn; answer with the first real answer."""
    addr, rest = targets[0], targets[1:]

    def done(result):
        if isinstance(result, Exception):
            if rest:
                _relay(app, req, rest)
            else:
                app.service.call_soon_threadsafe(req.reply, ResponseCode.SYSTEM_ERROR,
                                                 f"no attached filter server answered: {result}")
            return
        app.service.call_soon_threadsafe(req.reply, result.code, result.remark or "", result.ext)

    app.transport.send(addr, req.args, None, (), done, RELAY_TIMEOUT_S)
