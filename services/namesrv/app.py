"""The name server process: a Service loop plus the broker-expiry scan."""

import logging

from quiver.runtime.acl_sync import AclFollower
from quiver.runtime.security import service_security
from quiver.runtime.service import Service
from quiver.wire.transport import Transport

from .handlers import make_handlers
from .route_table import RouteTable

log = logging.getLogger(__name__)


class App:
    def __init__(self, config):
        self.config = config
        self.table = RouteTable()
        self.security = service_security(config, "namesrv")
        self.service = Service(config.listen, make_handlers(self.table), "namesrv", self.status, security=self.security)
        self.controller = None
        if config.controller:  # imported here: a plain name server needs no Raft library
            from .controller import Controller
            self.controller = Controller(config, self.service)
            self.service.handlers.update(self.controller.handlers())
        self.acl = None
        if self.security is not None:  # users and rules come from the registered brokers
            self.acl = AclFollower(self.security, Transport("namesrv-acl"), brokers=lambda: list(self.table.live))
            self.service.every("acl_sync", self.acl.interval_s, self.acl.step, first_delay_s=0.5)

    def scan_step(self) -> list[str]:
        gone = self.table.expire(self.config.broker_expiry_ms / 1000)
        for addr in gone:
            log.warning("broker %s silent for %d ms: dropped", addr, self.config.broker_expiry_ms)
        return gone

    def _scan(self) -> None:
        self.scan_step()
        self.service.call_later(self.config.scan_interval_ms / 1000, self._scan)

    def status(self) -> dict:
        return {"role": "namesrv", "brokers": len(self.table.live), "topics": len(self.table.topics),
                "clusters": sorted(self.table.clusters), **(self.acl.status() if self.acl else {}),
                **(self.controller.status() if self.controller else {})}

    def run(self) -> None:
        self.service.bind()
        self.service.call_later(self.config.scan_interval_ms / 1000, self._scan)
        if self.controller is not None:
            self.controller.start()
        try:
            self.service.run()
        finally:
            if self.controller is not None:
                self.controller.stop()
            self.service.close()

    def shutdown(self) -> None:
        """Stop serving (from any thread); run() closes the socket as it returns."""
        self.service.stop()
