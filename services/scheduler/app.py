"""The scheduler process: a Service loop (PING/STATUS/SCHEDULE_CANCEL), its units, its jobs.

Threads: the service thread owns all delivery state (levels.py, timers.py)
and runs the per-queue timers; the SDK's IO thread only hands replies over
(`request`); one control thread does the blocking work (rebalance, reading a
unit's start offsets, rebuilding an index); the writer thread (writer.py) does
the timer index's writes, so what a write promises (an ingested offset, a
cancel's answer) goes out only once it is committed; APScheduler jobs,
registered in `_jobs`, only trigger steps. A unit goes starting -> running (after
`takeover_delay_ms`, so the previous owner's last commit lands first) -> released.
"""

import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from apscheduler.schedulers.background import BackgroundScheduler

from quiver.client.access import broker_access
from quiver.wire import requests as rq
from quiver.errors import QueryNotFoundError, QuiverError
from quiver.runtime.acl_sync import AclFollower
from quiver.runtime.security import service_security
from quiver.runtime.service import Service
from quiver.runtime.settings import split_addrs
from quiver.wire.transport import Transport
from quiver.wire.validation import SCHEDULE_TOPIC

from . import db as dbm
from . import reput
from .allocation import LEVEL
from .cancels import Cancels, topic_of
from .db import TimerDB
from .handlers import make_handlers
from .levels import Levels
from .membership import Membership, SchedulerClient
from .writer import Writer
from .stats import DeliveryStats
from .timers import Timers, plan_start
from .tracing import DeliveryTrace

log = logging.getLogger(__name__)


class App:
    def __init__(self, config):
        self.config = config
        self.security = service_security(config, "scheduler")  # before any socket: they all take its key
        if not config.db_url:
            os.makedirs(config.data_dir, exist_ok=True)
        self.db = TimerDB(config.url)
        self.cancelled = Cancels(self.db.tombstones())
        self.stats = DeliveryStats()
        self.client = SchedulerClient(config, self.request_rebalance)
        self.trace = DeliveryTrace(config.namesrv, config.group, config.advertised)  # Delayed events
        self.service = Service(config.listen, make_handlers(self), "scheduler", self.status, security=self.security)
        self.acl = None
        if self.security is not None:  # users and rules come from the brokers
            self.acl = AclFollower(self.security, Transport("scheduler-acl"), namesrvs=split_addrs(config.namesrv))
            self.service.every("acl_sync", self.acl.interval_s, self.acl.step, first_delay_s=0.5)
        self.writer = Writer(self.db.engine, self.service.call_soon_threadsafe)
        self.levels = Levels(self)
        self.timers = Timers(self)
        self.membership = Membership(self.client)
        self.owned: dict = {}          # unit -> "starting" | "running"
        self.brokers: dict = {}        # broker name -> membership.BrokerInfo
        self.control = ThreadPoolExecutor(1, thread_name_prefix="scheduler-control")
        self._rebalance_pending = threading.Event()
        self.aps = BackgroundScheduler(daemon=True)

    # ---- IO: replies come back on the service thread ----------------------------------

    def request(self, addr, req, callback, bodies=(), timeout: float = 3.0) -> None:
        """Send `req` (a typed request, quiver.wire.requests) to a broker; `callback(envelope | error)`
        runs on this thread."""
        soon = self.service.call_soon_threadsafe
        try:
            broker_access(self.client).transport.send(addr, req, None, bodies, lambda r: soon(callback, r), timeout)
        except QuiverError as exc:
            soon(callback, exc)

    # ---- rebalance --------------------------------------------------------------------------

    def request_rebalance(self) -> None:
        if not self._rebalance_pending.is_set():
            self._rebalance_pending.set()
            self.control.submit(self._rebalance)

    def _rebalance(self) -> None:
        self._rebalance_pending.clear()
        try:
            mine, brokers = self.membership.step()
        except QuiverError as exc:
            log.warning("rebalance skipped: %s", exc)
            return
        except Exception:
            log.exception("rebalance failed")
            return
        self.service.call_soon_threadsafe(self.apply_allocation, mine, brokers)

    def apply_allocation(self, mine, brokers) -> None:
        """Service thread: release what is no longer mine, start (after a delay) what is new. A
        broker name now at another address (a new master after a failover) starts its units over
        there, from the offsets that master has."""
        moved = {n for n, info in brokers.items() if n in self.brokers and self.brokers[n].addr != info.addr}
        if moved:
            log.info("brokers %s moved (a new master): their queues restart there", sorted(moved))
        self.brokers = brokers
        mine = set(mine)
        for unit in [u for u in self.owned if u not in mine or u.broker in moved]:
            self._release(unit)
        for unit in sorted(mine - set(self.owned)):
            self.owned[unit] = "starting"
            self.service.call_later(self.config.takeover_delay_ms / 1000,
                                    lambda u=unit: self.control.submit(self._prepare, u))

    def _release(self, unit) -> None:
        state = self.owned.pop(unit, None)
        if state == "running":
            (self.levels if unit.kind == LEVEL else self.timers).stop(unit)

    def restart_unit(self, unit) -> None:
        """Service thread: stop `unit` and start it again as the next rebalance allots it."""
        self._release(unit)
        self.request_rebalance()

    def _prepare(self, unit) -> None:
        """Control thread: read where the unit resumes (blocking calls), then begin it."""
        if self.owned.get(unit) != "starting":
            return
        if unit.kind != LEVEL:
            self.writer.sync()   # a previous run's ingests land first: the index's progress is read next
        info = self.brokers.get(unit.broker)
        if info is None:
            return
        addr = info.addr
        try:
            if unit.kind == LEVEL:
                call = broker_access(self.client).call_broker
                try:
                    env = call(addr, rq.QueryConsumerOffset(group=self.config.group, topic=SCHEDULE_TOPIC,
                                                            queue_id=unit.queue_id))
                except QueryNotFoundError:
                    env = call(addr, rq.GetMinOffset(topic=SCHEDULE_TOPIC, queue_id=unit.queue_id))
                start = rq.OffsetReply.decode(env.ext).offset
            else:
                start = plan_start(broker_access(self.client), self.db, self.config.group, unit, addr)
        except QuiverError as exc:
            log.warning("cannot start %s yet: %s", unit, exc)
            self.service.call_soon_threadsafe(self._retry_start, unit)
            return
        self.service.call_soon_threadsafe(self._begin, unit, info, start)

    def _retry_start(self, unit) -> None:
        if self.owned.get(unit) == "starting":
            self.service.call_later(1.0, lambda: self.control.submit(self._prepare, unit))

    def _begin(self, unit, info, start) -> None:
        if self.owned.get(unit) != "starting":
            return
        self.owned[unit] = "running"
        max_bytes = reput.body_cap(self.config.max_reput_bytes, info.init)
        if unit.kind == LEVEL:
            delays = info.init.delay_levels_ms
            self.levels.start(unit, info.addr, delays[min(unit.queue_id, len(delays) - 1)], start, max_bytes)
        else:
            self.timers.start(unit, info.addr, start, max_bytes)

    # ---- cancel -------------------------------------------------------------------------------

    def cancel(self, msg_id: str, topic: str, answer) -> None:
        """`answer(result)`: 'cancelled', 'too_late' (delivered or being delivered) or 'unknown'
        (remembered as a tombstone), or an exception if the tombstone could not be stored. Only a
        message whose real topic is `topic` is cancelled: the sender was authorized for PUB on that
        topic, not on the message's. Deliveries skip it at once; the answer waits for the writer."""
        r = self.levels.cancel(msg_id, topic)
        if r == "delivered" or msg_id in self.timers.in_flight_ids():
            return answer("too_late")
        pending = False
        if r is None:
            found = self.db.state_of(msg_id)
            state = found[0] if found is not None and topic_of(found[1]) == topic else None
            if state == dbm.DELIVERED:
                return answer("too_late")
            if state == dbm.CANCELLED:
                return answer("cancelled")
            if state == dbm.PENDING:
                pending, r = True, "cancelled"
            elif found is None and msg_id in self.stats.recent:
                return answer("too_late")
        self.cancelled.add(msg_id, topic)
        result = r or "unknown"

        def write(conn):
            if pending:
                self.db.write_cancel(conn, msg_id)
            self.db.write_tombstone(conn, msg_id, topic)
        self.writer.submit(write, lambda res: answer(res if isinstance(res, Exception) else result))

    # ---- status and jobs ---------------------------------------------------------------------------

    def status(self) -> dict:
        running = sorted(u for u, s in self.owned.items() if s == "running")
        timer_brokers = [u.broker for u in running if u.kind != LEVEL]
        return {"role": "scheduler", "client_id": self.client.client_id, "members": self.membership.members,
                "owned": [str(u) for u in running],
                "starting": [str(u) for u, s in self.owned.items() if s == "starting"],
                "pending": {"levels": self.levels.pending_by_level(),
                            "timers": self.db.pending_count(timer_brokers) if timer_brokers else 0},
                "timers_in_memory": self.timers.in_memory(), "delivered": self.stats.count,
                "early": self.stats.early, "cancelled_skipped": self.stats.cancelled_skipped,
                "lag_ms": self.stats.lag_summary()}

    def purge_step(self) -> None:
        """Queued for the writer, so a long purge never holds the index's lock against it."""
        now = int(time.time() * 1000)
        done, tombs = now - self.config.delivered_keep_ms, now - self.config.timer_horizon_ms
        self.writer.submit(lambda conn: self.db.write_purge(conn, done, tombs))

    def _jobs(self) -> None:
        soon = self.service.call_soon_threadsafe
        c = self.config
        self.aps.add_job(self.request_rebalance, "interval", seconds=c.rebalance_interval_ms / 1000, id="rebalance")
        self.aps.add_job(lambda: soon(self.timers.load_step), "interval", seconds=c.timer_window_ms / 3000,
                         id="timer-window")
        self.aps.add_job(lambda: soon(self.timers.roll_step), "interval",
                         seconds=max(1.0, min(c.roll_after_ms / 4000, 600.0)), id="roll-forward")
        self.aps.add_job(self.purge_step, "interval", seconds=600, id="purge")

    # ---- lifecycle ------------------------------------------------------------------------------------

    def run(self) -> None:
        self.service.bind()
        self.client.start()
        self._jobs()
        self.request_rebalance()
        log.info("scheduler %s serving on %s", self.client.client_id, self.config.listen)
        self.service.serve(self.aps, self.shutdown)

    def shutdown(self) -> None:
        """What run() does last (Service.serve has stopped the jobs)."""
        self.timers.flush_marks()
        if self.writer.sync(5.0):   # what is written hands back its progress: it goes out below
            self.service._run_inbox()
        self.levels.stop_all()
        self.timers.stop_all()
        self.owned.clear()
        deadline = time.monotonic() + 1.0
        t = broker_access(self.client).transport
        while t is not None and t._pending and time.monotonic() < deadline:
            self.service._run_inbox()
            time.sleep(0.01)
        self.control.shutdown(wait=False, cancel_futures=True)
        self.trace.close()
        self.client.shutdown()
        self.writer.close()
        self.db.close()
        self.service.close()
