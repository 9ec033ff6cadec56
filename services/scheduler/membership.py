"""Who the schedulers are and which units are mine (runs on the control thread, blocking calls).

Each scheduler heartbeats to every broker as a consumer of `--group` (client
id `scheduler|HOST:PORT|pid|nonce`, so the address is in it). A rebalance step:
ask each broker for its delay table (SCHEDULE_INIT, which also creates the
system topics), list the group's members (GET_CONSUMER_LIST_BY_GROUP, union
over brokers), drop members that failed `dead_after` PINGs in a row (a killed
instance stays listed on the broker for its 120 s client expiry, but stops
answering PING at once), then take the averaged share of all units.
Brokers push NOTIFY_CONSUMER_IDS_CHANGED when members come or go; that only
triggers an early step.
"""

import logging
import os
import time
from concurrent.futures import wait
from dataclasses import dataclass

from quiver.wire import names
from quiver.wire import requests as rq
from quiver.client.access import broker_access
from quiver.client.base import ClientBase
from quiver.wire.codes import RequestCode
from quiver.errors import QuiverError
from quiver.wire.validation import SCHEDULE_TOPIC, TIMER_TOPIC

from .allocation import Unit, addr_of, allocate, client_id, units_of

log = logging.getLogger(__name__)


class SchedulerClient(ClientBase):
    def __init__(self, config, on_members_changed):
        super().__init__(config.namesrv, request_timeout=3.0)
        self.group = config.group
        self.client_id = client_id(config.advertised, os.getpid(), time.monotonic_ns())
        self._heartbeat_interval_s = config.heartbeat_interval_ms / 1000
        self._on_changed = on_members_changed

    def _heartbeat_payload(self) -> rq.HeartBeat:
        """This instance as a member of --group, subscribed to every parked message (tag "*")."""
        subs = {t: rq.Subscription(type="TAG", expression="*") for t in (SCHEDULE_TOPIC, TIMER_TOPIC)}
        me = rq.ConsumerData(group=self.group, subscriptions=subs, model="CLUSTERING")
        return rq.HeartBeat(client_id=self.client_id, consumers=[me])

    def _members_changed(self, addr, env):
        self._on_changed()
        return None

    _push_handlers = {RequestCode.NOTIFY_CONSUMER_IDS_CHANGED: _members_changed}


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A broker as the last rebalance saw it: where it is and its SCHEDULE_INIT answer."""
    addr: str
    init: rq.ScheduleInitReply


class Membership:
    def __init__(self, client: SchedulerClient, dead_after: int = 3, ping_timeout_s: float = 1.5):
        self.client = client
        self.dead_after = dead_after
        self.ping_timeout_s = ping_timeout_s
        self.failures: dict[str, int] = {}
        self.brokers: dict[str, BrokerInfo] = {}
        self.members: list[str] = []

    def step(self) -> tuple[list[Unit], dict[str, BrokerInfo]]:
        """(my units, broker info) from a fresh look at brokers and members."""
        c = self.client
        brokers = {}
        access = broker_access(c)
        for name, addr in access.all_broker_addrs().items():
            try:
                init = rq.ScheduleInitReply.decode(access.call_broker(addr, rq.ScheduleInit()).ext)
            except QuiverError as exc:
                log.warning("broker %s (%s) did not answer SCHEDULE_INIT: %s", name, addr, exc)
                continue
            brokers[name] = BrokerInfo(addr, init)
        ids = {c.client_id}
        for name, info in brokers.items():
            try:
                env = access.call_broker(info.addr, rq.GetConsumerList(group=c.group))
                ids.update(rq.ConsumerListReply.decode(env.ext).ids)
            except QuiverError as exc:
                log.warning("members of %s from %s: %s", c.group, name, exc)
        live = self._alive(sorted(ids))
        if live != self.members:
            log.info("scheduler members: %s", live)
        self.members, self.brokers = live, brokers
        units = [u for name, info in sorted(brokers.items())
                 for u in units_of(name, info.init.schedule_queues, info.init.timer_queues)]
        return allocate(units, live, c.client_id), brokers

    def _alive(self, ids: list[str]) -> list[str]:
        me = self.client.client_id
        futs = {}
        for cid in ids:
            addr = addr_of(cid)
            if cid == me or addr is None or names.addr_problem(addr):  # no scheduler can be reached there
                continue
            try:
                futs[cid] = broker_access(self.client).transport.call_future(addr, rq.Ping(), timeout=self.ping_timeout_s)
            except QuiverError as exc:  # shutting down
                log.debug("member %s not pinged: %s", cid, exc)
                futs[cid] = None
        wait([f for f in futs.values() if f is not None], self.ping_timeout_s + 0.5)
        live = [me]
        for cid, fut in futs.items():
            answered = _ping_answer(fut)
            ok = answered is not None
            if ok and answered.client_id != cid:
                self.failures[cid] = self.dead_after   # its address now belongs to another instance
                continue
            self.failures[cid] = 0 if ok else self.failures.get(cid, 0) + 1
            if self.failures[cid] < self.dead_after:
                live.append(cid)
        for cid in list(self.failures):
            if cid not in futs:
                del self.failures[cid]
        return sorted(live)


def _ping_answer(fut) -> rq.PingReply | None:
    """The PING reply a member sent, or None if it did not answer (in time, or well)."""
    if fut is None or not fut.done() or fut.exception() is not None or fut.result().code != 0:
        return None
    try:
        return rq.PingReply.decode(fut.result().ext)
    except QuiverError:
        return None
