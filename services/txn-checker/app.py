"""The txn-checker process: a Service loop for PING/STATUS plus the check job.

The check round runs on APScheduler's thread (one job, never overlapping)
with its own SDK client; the service thread only answers health and status.
"""

import collections
from datetime import datetime
import logging
import time

from apscheduler.schedulers.background import BackgroundScheduler

from quiver.runtime.acl_sync import AclFollower
from quiver.runtime.security import service_security
from quiver.runtime.service import Service
from quiver.runtime.settings import split_addrs
from quiver.wire.transport import Transport

from .checking import Checker, CheckerClient
from .handlers import make_handlers

log = logging.getLogger(__name__)


class App:
    def __init__(self, config):
        self.config = config
        self.counters = collections.Counter()
        self.security = service_security(config, "txn-checker")  # before any socket: they all take its key
        self.service = Service(config.listen, make_handlers(self), "txn-checker", self.status, security=self.security)
        self.acl = None
        if self.security is not None:  # users and rules come from the brokers
            self.acl = AclFollower(self.security, Transport("txn-checker-acl"), namesrvs=split_addrs(config.namesrv))
            self.service.every("acl_sync", self.acl.interval_s, self.acl.step, first_delay_s=0.5)
        self.client = CheckerClient(config.namesrv, config.group, config.heartbeat_interval_ms / 1000, config.advertised)
        self.checker = Checker(self.client, config, self.counters)
        self.scheduler = BackgroundScheduler(daemon=True)
        self.last_round: dict = {}
        self.last_round_ms = 0.0

    def check_step(self) -> dict:
        t0 = time.monotonic()
        try:
            self.last_round = self.checker.step()
        except Exception:
            log.exception("check round failed")
            self.counters["failed_rounds"] += 1
            return {}
        self.last_round_ms = round((time.monotonic() - t0) * 1000, 1)
        if self.last_round:
            log.info("check round: %s in %.0f ms", self.last_round, self.last_round_ms)
        return self.last_round

    def _jobs(self) -> None:
        self.scheduler.add_job(self.check_step, "interval", seconds=self.config.check_interval_ms / 1000,
                               id="check", max_instances=1, coalesce=True, next_run_time=datetime.now())

    def status(self) -> dict:
        return {"role": "txn-checker", "group": self.config.group, "client_id": self.client.client_id,
                "brokers": sorted(self.checker.owned), "checks": dict(self.counters),
                "last_round": self.last_round, "last_round_ms": self.last_round_ms,
                "check_interval_ms": self.config.check_interval_ms,
                "transaction_timeout_ms": self.config.transaction_timeout_ms, "max_checks": self.config.max_checks}

    def run(self) -> None:
        self.service.bind()
        self.client.start()
        self._jobs()
        self.service.serve(self.scheduler, self.shutdown, wait_jobs=True)   # a round ends before the client

    def shutdown(self) -> None:
        """What run() does last (Service.serve has stopped the jobs)."""
        self.client.shutdown()
        self.service.close()
