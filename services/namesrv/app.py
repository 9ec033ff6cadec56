"""The name server process: a Service loop plus the broker-expiry scan."""

import logging

from quiver.runtime.service import Service

from .handlers import make_handlers
from .route_table import RouteTable

log = logging.getLogger(__name__)


class App:
    def __init__(self, config):
        self.config = config
        self.table = RouteTable()
        self.service = Service(config.listen, make_handlers(self.table), "namesrv", self.status)

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
                "clusters": sorted(self.table.clusters)}

    def run(self) -> None:
        self.service.bind()
        self.service.call_later(self.config.scan_interval_ms / 1000, self._scan)
        try:
            self.service.run()
        finally:
            self.service.close()

    def shutdown(self) -> None:
        """Stop serving (from any thread); run() closes the socket as it returns."""
        self.service.stop()
