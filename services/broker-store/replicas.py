"""--auto-failover: this broker as the controller sees it, and the role it makes it play.

Owns the heartbeat to the controllers (every --controller-heartbeat-interval-ms,
to each of them; the Raft leader answers the assignment), the current role,
epoch and SyncStateSet, the master's lease, the epoch file, the swap between
ha_master.ReplicationMaster and ha_slave.ReplicationSlave, and the master's
SyncStateSet changes (RocketMQ 5's ReplicasManager). Does not own streaming
(ha_master, ha_slave), the epoch rules (epochs) nor the controller.

    assignment master, epoch E:  cut to the last whole record, epoch file += <E, end>,
                                 start a ReplicationMaster, register as broker id 0
    assignment slave of M:       stop the master part (its waiting writes answered
                                 FLUSH_SLAVE_TIMEOUT: stored, not acknowledged), start a
                                 ReplicationSlave of M, register under the controller's id

Lease: a master may acknowledge only until lease_ms after it SENT the last
heartbeat the leader answered "master at E" (the controller elects another only
a full timeout after it RECEIVED it). Writes are refused (SERVICE_NOT_AVAILABLE,
the producer retries elsewhere) while the lease is out, while this broker is no
master, or while the SyncStateSet is smaller than --min-in-sync-replicas.

SyncStateSet: `required` (the members whose ack a SYNC write waits for) is the
committed set minus this master, plus members being added: a member is waited
for before the controller may count it, and dropped only once the controller
committed its removal, so every member the controller may elect has every
acknowledged write. A member that has not caught up for
--ha-max-time-not-caught-up-ms is removed; a connected replica that caught up
is added. One change in flight at a time.
"""

import logging
import os
import time

from quiver.errors import QuiverError, ServiceNotAvailableError
from quiver.runtime.settings import split_addrs
from quiver.wire import requests as rq
from quiver.wire.codes import RequestCode, ResponseCode

from . import replica_append
from .epochs import EpochFile
from .visibility import FOLLOW_LOCAL

log = logging.getLogger(__name__)

SSS_CHECK_S = 0.2


class Replicas:
    """`make_master(terms)` / `make_slave(terms)` build the replication parts; `on_role(role)` tells
    the App the role changed (its request table and registration follow)."""

    def __init__(self, config, store, service, transport, make_master, make_slave, on_role):
        self.config = c = config
        self.store = store
        self.service = service
        self.transport = transport
        self.make_master, self.make_slave, self.on_role = make_master, make_slave, on_role
        self.controllers = split_addrs(c.controllers)
        self.me = c.advertised
        self.epochs = EpochFile(os.path.join(c.store_dir, "epochs"))
        self.role = "none"
        self.epoch = 0                     # the newest epoch the controller named
        self.master_addr = ""
        self.broker_id = 0                 # the id the controller gave this member (a slave registers with it)
        self.sss: list[str] = []
        self.required: frozenset = frozenset()
        self.adding: set[str] = set()
        self.adding_since: dict[str, float] = {}
        self.altering = False
        self.lease_until = 0.0
        self.leader = ""
        self.term = 0                      # the newest controller Raft term an answer carried
        self.ha = None                     # the ReplicationMaster or ReplicationSlave of the current role
        self.took_office = 0.0
        self.switches = 0
        self.resigned = False   # stopping (resign): no assignment is taken any more
        self.last_answer = 0.0

    # ---- what the replication parts read --------------------------------------------------

    def epoch_list(self) -> list:
        return self.epochs.entries

    def lease_valid(self) -> bool:
        return self.role == "master" and time.monotonic() < self.lease_until

    @property
    def is_slave(self) -> bool:
        return self.role != "master"

    def writable(self) -> None:
        """Raise unless a write may be taken now (the send guard in app.py)."""
        if self.role != "master":
            raise ServiceNotAvailableError(f"not the master of {self.config.name} (role {self.role}, epoch "
                                           f"{self.epoch}, master {self.master_addr or 'unknown'})")
        if not self.lease_valid():
            raise ServiceNotAvailableError(f"master lease of epoch {self.epoch} expired: no controller answer")
        if len(self.sss) < self.config.min_in_sync_replicas:
            raise ServiceNotAvailableError(f"in-sync replicas {len(self.sss)} < min_in_sync_replicas "
                                           f"{self.config.min_in_sync_replicas}")

    def note_newer_epoch(self, epoch: int) -> None:
        """A replica follows epoch `epoch`: this master was deposed; stop acknowledging now."""
        if epoch > self.epoch and self.role == "master":
            log.warning("a replica reports epoch %d: this master (epoch %d) was replaced", epoch, self.epoch)
            self.lease_until = 0.0
            self.heartbeat_step()

    # ---- the App's replication part (delegated to the current role) -----------------------

    def note_put(self, end: int) -> None:
        if self.role == "master":
            self.ha.note_put(end)

    def wait_for_slave(self, end: int, req, out: dict) -> None:
        if self.role == "master" and self.config.ha_acks == "sync":
            self.ha.wait_for_slave(end, req, out)
        elif not self.lease_valid():
            # async acks: the lease may have run out while the write was flushed; stored, not acknowledged
            req.reply(ResponseCode.FLUSH_SLAVE_TIMEOUT, f"master lease of epoch {self.epoch} expired", out)
        else:
            req.reply(ResponseCode.SUCCESS, "", out)

    def expire_step(self) -> None:
        if self.role == "master":
            self.ha.expire_step()

    def set_master(self, master_addr: str, ha_addr: str) -> None:
        """Name servers' idea of the master: the controller's wins here."""

    def handlers(self) -> dict:
        # both roles answer both codes (one refusing each): the current one does
        return {code: (lambda req, code=code: self._dispatch(code, req))
                for code in (RequestCode.HA_SYNC_METADATA, RequestCode.HA_SLAVE_OFFSETS)}

    def _dispatch(self, code, req) -> None:
        if self.ha is None:
            req.reply(ResponseCode.SERVICE_NOT_AVAILABLE, "no role assigned by the controller yet")
            return
        self.ha.handlers()[code](req)

    def start(self) -> None:
        # nothing on disk is served before the role's confirm offset says it is held by the in-sync replicas
        self.store.set_replica_confirm(0)
        self.epochs.load(self.store.max_phys_offset)
        if not self.epochs.entries and self.store.max_phys_offset > self.store.min_phys_offset:
            # bytes from before --auto-failover: epoch 0, shared with replicas that have them
            self.epochs.append(0, self.store.min_phys_offset)
        self.epoch = self.epochs.epoch
        self.service.every("controller_heartbeat", self.config.controller_heartbeat_interval_ms / 1000,
                           self.heartbeat_step, first_delay_s=0)
        self.service.every("sync_state_set", SSS_CHECK_S, self.sss_step)

    def stop(self) -> None:
        if self.ha is not None:
            self.ha.stop()
            self.ha = None

    # ---- heartbeat ---------------------------------------------------------------------------

    def resign(self, done) -> None:
        """The last step of a drain (draining.py): acknowledge nothing more and tell the controllers,
        whose leader elects an in-sync replica at once; `done()` (any thread) once it answered."""
        self.resigned = True
        self.lease_until = 0.0
        answered = []

        def one(result) -> None:
            if not answered and not isinstance(result, Exception) and result.code == ResponseCode.SUCCESS:
                answered.append(result)
                done()
        for addr in self.controllers:
            try:
                self.transport.send(addr, self._heartbeat(), None, (), one, timeout=1.0)
            except QuiverError as exc:
                log.debug("resignation to controller %s not sent: %s", addr, exc)

    def _heartbeat(self) -> rq.ControllerHeartbeat:
        c = self.config
        return rq.ControllerHeartbeat(cluster=c.cluster, broker_name=c.name, addr=self.me, ha_addr=c.ha_advertised,
                                      max_offset=self.store.max_phys_offset, epoch=self.epochs.epoch,
                                      resign=self.resigned)

    def heartbeat_step(self) -> None:
        c = self.config
        req = self._heartbeat()
        sent = time.monotonic()
        soon = self.service.call_soon_threadsafe
        for addr in self.controllers:
            try:
                self.transport.send(addr, req, None, (), lambda r, a=addr: soon(self._answered, a, sent, r),
                                    timeout=max(0.2, c.controller_heartbeat_interval_ms / 1000 * 3))
            except QuiverError as exc:
                log.debug("heartbeat to controller %s not sent: %s", addr, exc)

    def _answered(self, addr: str, sent: float, result) -> None:
        if isinstance(result, Exception) or result.code != ResponseCode.SUCCESS:
            return  # a follower, or down: the leader answers
        if self.resigned:
            return  # the leader answers a resigned broker's heartbeat with no assignment
        try:
            a = rq.ControllerAssignment.decode(result.ext)
        except QuiverError as exc:
            log.warning("assignment from controller %s ignored: %s", addr, exc.remark)
            return
        self.leader, self.last_answer = addr, time.monotonic()
        self.apply(a, sent)

    def apply(self, a, sent: float) -> None:
        """An assignment answered to a heartbeat sent at `sent` (time.monotonic())."""
        if self.resigned:
            return   # an answer to a heartbeat from before the resignation: no new lease
        if a.term < self.term:
            log.info("assignment of controller term %d ignored: term %d answered already", a.term, self.term)
            return  # a deposed controller leader's answer
        self.term = a.term
        if a.epoch < self.epoch or a.role == "none":
            return  # an answer older than what this broker already knows
        self.broker_id = a.broker_id or self.broker_id
        if a.role == "master":
            lease = sent + a.lease_ms / 1000
            if self.role != "master" or a.epoch != self.epoch:
                self._become_master(a.epoch, lease)
            self.lease_until = max(self.lease_until, lease)
        elif a.role == "slave":
            if self.role != "slave" or a.master_addr != self.master_addr or a.epoch != self.epoch:
                self._become_slave(a.epoch, a.master_addr or "", a.master_ha_addr or "")
        self._set_sss(a.sync_state_set)

    def _set_sss(self, sss: list[str]) -> None:
        self.sss = list(sss)
        self.adding -= set(sss)  # committed: waited for as a member from now on
        self.required = frozenset((set(sss) | self.adding) - {self.me})
        if self.role == "master":
            self.ha.recheck()

    # ---- role changes --------------------------------------------------------------------------

    def _become_master(self, epoch: int, lease_until: float) -> None:
        log.warning("controller: this broker is the master of %s at epoch %d", self.config.name, epoch)
        self._stop_role("became master")
        end = self.store.max_phys_offset
        replica_append.truncate(self.store, end)  # a torn tail a crash left is not this epoch's
        if epoch > self.epochs.epoch:
            self.epochs.append(epoch, end)
        self.role, self.epoch, self.master_addr = "master", epoch, self.me
        self.lease_until, self.adding, self.took_office = lease_until, set(), time.monotonic()
        self.ha = self.make_master(self)
        self.ha.start()
        self.switches += 1
        self.on_role("master")

    def _become_slave(self, epoch: int, master_addr: str, master_ha: str) -> None:
        log.warning("controller: this broker is a slave of %s (%s) at epoch %d", master_addr, master_ha, epoch)
        self._stop_role(f"deposed: {master_addr} is the master of epoch {epoch}; stored here, not acknowledged")
        if self.store.replica_confirm == FOLLOW_LOCAL:  # was alone in its set: what it had, not what comes
            self.store.set_replica_confirm(self.store.confirm_offset)
        self.role, self.epoch, self.master_addr = "slave", epoch, master_addr
        self.lease_until = 0.0
        self.ha = self.make_slave(self)
        self.ha.master_addr, self.ha.target = master_addr, master_ha
        self.ha.start()
        self.switches += 1
        self.on_role("slave")

    def _stop_role(self, why: str) -> None:
        if self.ha is None:
            return
        if self.role == "master":
            self.ha.fail_pending(why)
        self.ha.stop()
        self.ha = None

    # ---- confirm offset: what reads may see (visibility.py) ----------------------------------------

    def update_confirm(self, acked: int | None) -> None:
        """Master: `acked` is the least offset every other member of `required` acked (None: there is
        none, the master's own end counts). Never moves back: a member still to connect or being added
        holds it where it is until it has caught up to it."""
        store = self.store
        if acked is None:
            store.set_replica_confirm(FOLLOW_LOCAL)
            return
        cur = store.replica_confirm
        floor = store.confirm_offset if cur is None or cur == FOLLOW_LOCAL else cur
        new = max(floor, min(acked, store.max_phys_offset))
        if new != cur:
            store.set_replica_confirm(new)

    def follow_confirm(self, confirm: int) -> None:
        """Replica: the master's confirm offset, as far as this log has its bytes."""
        store = self.store
        cur = store.replica_confirm
        floor = 0 if cur is None else store.confirm_offset if cur == FOLLOW_LOCAL else cur
        new = max(floor, min(confirm, store.max_phys_offset))
        if new != cur:
            store.set_replica_confirm(new)

    # ---- SyncStateSet (master) -------------------------------------------------------------------

    def sss_step(self) -> None:
        if self.role != "master" or self.altering or not self.leader:
            return
        now = time.monotonic()
        acks = self.ha.link_acks
        limit = self.config.ha_max_time_not_caught_up_ms / 1000
        end = self.store.max_phys_offset
        for addr in self.sss:
            if addr == self.me:
                continue
            acked, caught = acks.get(addr, (0, 0.0))
            # an idle replica reports seldom: having everything is being caught up
            caught = now if addr in acks and acked >= end else max(caught, self.took_office)
            if now - caught > limit:
                log.warning("replica %s not caught up for %.1f s: leaving the SyncStateSet", addr, now - caught)
                self._alter([a for a in self.sss if a != addr], None)
                return
        for addr in [a for a in self.adding if a not in self.sss]:
            # a joiner holds the confirm offset where it was; it is proposed once it has all of it, so the
            # controller never counts a member that lacks a record a consumer may have read (RocketMQ's rule)
            if addr in acks and acks[addr][0] >= self.store.confirm_offset:
                self._alter(self.sss + [addr], addr)
                return
            if addr not in acks or now - self.adding_since.get(addr, now) > limit:
                log.info("replica %s did not catch up to the confirm offset: not added to the SyncStateSet", addr)
                self.adding.discard(addr)
                self._set_sss(self.sss)
                return
        for addr, (acked, caught) in acks.items():
            if addr not in self.sss and addr not in self.adding and (acked >= end or now - caught < SSS_CHECK_S * 2):
                self.adding.add(addr)  # waited for (SYNC acks, the confirm offset) before the controller may count it
                self.adding_since[addr] = now
                self._set_sss(self.sss)
                return

    def _alter(self, sss: list[str], adding: str | None) -> None:
        c = self.config
        req = rq.AlterSyncStateSet(cluster=c.cluster, broker_name=c.name, master_addr=self.me, epoch=self.epoch,
                                   sync_state_set=sss)
        self.altering = True
        soon = self.service.call_soon_threadsafe
        epoch = self.epoch
        try:
            self.transport.send(self.leader, req, None, (), lambda r: soon(self._altered, epoch, adding, r),
                                timeout=2.0)
        except QuiverError as exc:
            self._altered(epoch, adding, exc)

    def _altered(self, epoch: int, adding: str | None, result) -> None:
        self.altering = False
        if adding is not None:
            self.adding.discard(adding)
        if epoch != self.epoch or self.role != "master":
            return
        if isinstance(result, Exception) or result.code != ResponseCode.SUCCESS:
            log.info("SyncStateSet change not made: %s", result if isinstance(result, Exception) else result.remark)
            self._set_sss(self.sss)
            return
        try:
            a = rq.ControllerAssignment.decode(result.ext)
        except QuiverError:
            return
        log.info("SyncStateSet of %s is now %s", self.config.name, a.sync_state_set)
        self._set_sss(a.sync_state_set)

    def status(self) -> dict:
        out = {"auto_failover": True, "role": self.role, "epoch": self.epoch, "master_addr": self.master_addr,
               "sync_state_set": self.sss, "epochs": [list(e) for e in self.epochs.entries],
               "lease_valid": self.lease_valid(), "controller_leader": self.leader, "controller_term": self.term,
               "switches": self.switches,
               "member_id": self.broker_id}
        if self.ha is not None:
            out.update(self.ha.status())
        return out
