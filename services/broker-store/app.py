"""The broker process: builds every part in one place, runs the service loop and periodic jobs.

`App.__init__` is the whole wiring: store, metadata, topic table, clients, the
request parts (each given only what it uses, its codes in its `handlers()`,
merged by handlers.table) and replication. Nothing is loaded by name and no
part reaches back into the App; where a part needs the App (re-register after
a topic change, tell a consumer group its members changed) it gets that one
callable.

All store and metadata mutations happen on the service thread. APScheduler
(one BackgroundScheduler, jobs registered in `_jobs`) only hands work to that
thread, except offset persistence, which writes a snapshot on its own thread.

With --auto-failover the role is the controller's (replicas.Replicas): the
request table is rebuilt and the broker registers again each time it changes,
and writes pass the Replicas guard (master, lease held, enough in sync).
"""

import dataclasses
import logging
import os

from apscheduler.schedulers.background import BackgroundScheduler

from quiver.wire import names, protocol
from quiver.wire import requests as rq
from quiver.errors import QuiverError
from quiver.wire.ids import host_bytes, host_str
from quiver.runtime.security import service_security
from quiver.runtime.service import Service
from quiver.runtime.settings import split_addrs
from quiver.wire.transport import Transport

from . import data_format, ha_master, handlers
from .acl import AclRequests, AclStore
from .backup import Backups
from .clients import ClientRegistry
from .consume_stats import ConsumeStats, GroupWatch
from .disk_space import DiskSpace
from .draining import Drain
from .filter_servers import SCAN_INTERVAL_S, FilterServerRegistry, FilterServerRequests
from .group_commit import GroupCommit
from .ha_slave import ReplicationSlave
from .replicas import Replicas
from .locks import LockManager
from .metadata import Metadata, owner as metadata_owner
from .pop import PopRequests
from .pop_revive import REVIVE_INTERVAL_S, Revive, ReviveLog
from .pop_state import PopBook
from .pulling import Puller
from .retry import Retry, max_reconsume_times
from .schedule import Schedule
from .request_reply import ReplyRequests
from .sending import Sender
from .store import MessageStore
from .tiered import Tiered
from .tiered_store import open_store
from .topics import Topics
from .tracing import BrokerTrace
from .traffic import Traffic
from .transaction import Transactions

log = logging.getLogger(__name__)

FRAME_HEADROOM_BYTES = 64 * 1024


def max_frame_bytes(config) -> int:
    """The service socket's cap on one frame (ZMQ_MAXMSGSIZE is per frame, not per request).

    The largest legal frame is a header or a batch's bodies packed in one frame
    (a batch is at most max_message_bytes of bodies); their sum plus headroom
    is above both, and bounds what one peer can make the broker buffer."""
    return config.max_message_bytes + protocol.MAX_HEADER_BYTES + FRAME_HEADROOM_BYTES


class App:
    """`transport`: the client transport to name servers, filter servers and the master
    (a real one by default; quiver.testing passes its fake network's)."""

    def __init__(self, config, transport=None):
        self.config = c = config
        self._drain: Drain | None = None
        os.makedirs(c.store_dir, exist_ok=True)
        data_format.check(c.store_dir)  # FormatError before anything in it is opened
        self.security = service_security(c, "broker")  # before any socket: they all take its key
        self.service = Service(c.listen, {}, "broker-store", self.status, max_frame_bytes(c), self.security)
        self.counters = self.service.counters  # one map in STATUS: the parts' and the loops' failures
        self.transport = transport if transport is not None else Transport("broker")
        self.namesrvs = split_addrs(c.namesrv)
        self.scheduler = BackgroundScheduler(daemon=True)
        adv_host, adv_port = c.advertised.rsplit(":", 1)
        self.store_host = host_bytes(adv_host, int(adv_port))
        self.store = MessageStore(
            c.store_dir, segment_bytes=c.segment_bytes, cq_entries_per_file=c.cq_entries_per_file,
            index_slots=c.index_slots, index_entries=c.index_entries, flush_sync=c.flush == "sync",
            flush_interval_ms=c.flush_interval_ms, store_host=self.store_host, delay_levels_ms=c.delay_levels_ms,
            file_reserved_hours=c.file_reserved_hours, delete_when_hours=c.delete_when_hours,
            disk_max_used_ratio=c.disk_max_used_ratio, disk_clean_forcibly_ratio=c.disk_clean_forcibly_ratio,
            disk=DiskSpace(c.store_dir, c.disk_full_ratio, c.disk_clean_forcibly_ratio, c.disk_min_free_bytes,
                           c.disk_check_bytes, c.disk_check_interval_ms),
            logic_flush_interval_ms=c.logic_flush_interval_ms, prop_crc=c.append_prop_crc,
            on_flushed=self._flushed_from_thread, delete_retention_ms=c.delete_retention_ms,
            compaction_bytes_per_s=c.compaction_bytes_per_s)
        self.store.on_confirmed = self._visible  # the in-sync replicas' bound moved: held reads go on
        if c.tiered_store:
            self.store.attach_tiered(tiered_from_config(c))
        self.metadata = Metadata(c.metadata_url.strip() or f"sqlite:///{os.path.join(c.store_dir, 'metadata.db')}",
                                 broker=metadata_owner(c.name, c.broker_id), wait_s=c.metadata_wait_ms / 1000)
        self.acl = AclStore(self.metadata.engine, self.security.set_acl if self.security else None)
        if self.security is not None and self.security.dir.admin is not None:
            self.acl.seed_admin(self.security.dir.admin.public_key)
        self.topics = Topics(self.metadata, self.store, self.register_all, c.auto_create_topics,
                             c.default_topic_queues)
        self.clients = ClientRegistry(expiry_s=c.client_expiry_ms / 1000)
        self.filter_servers = FilterServerRegistry(self.register_all)
        self.traffic = Traffic()  # messages and bytes in and out, for /metrics (metrics.py)
        self.puller = Puller(self.store, self.topics, self.metadata, self.service, self.counters, c.long_poll_max_ms,
                             traffic=self.traffic)
        # replication: a master streams its CommitLog to slaves, a slave follows its master
        self.ha = self._replication()
        self.pop, self.pop_revive = self._pop()
        self.wait_for_slave = self.ha.wait_for_slave if c.ha_role in ("SYNC_MASTER", "AUTO") else None
        self.group_commit = GroupCommit(self.store, c.flush == "sync", c.sync_flush_timeout_ms, self._visible,
                                        self.wait_for_slave, defer=lambda fn: self.service.call_later(0.0, fn))
        self.watch = GroupWatch(self.clients, self.service.failures, self.notify_group_changed, c.client_expiry_ms)
        self.parts = self._request_parts()
        self.service.handlers.update(self._table())
        self.service.every("filter_server_scan", SCAN_INTERVAL_S, self.filter_servers.expire_step)
        self.service.every("group_watch", self.watch.period_s, self.watch.step)
        self.service.every("pop_revive", REVIVE_INTERVAL_S, self.pop_revive.step)

    def _replication(self):
        c = self.config
        if c.auto_failover:
            return Replicas(c, self.store, self.service, self.transport, self._make_master, self._make_slave,
                            self._role_changed)
        if c.is_slave:
            return ReplicationSlave(c, self.store, self.metadata, self.topics, self.service, self.transport,
                                    self.counters, self.puller.notify, self.register_all, self.acl)
        return ha_master.ReplicationMaster(c, self.store, self.metadata, self.topics,
                                           self.service.call_soon_threadsafe, self.security, self.acl)

    def _make_master(self, terms):
        return ha_master.ReplicationMaster(self.config, self.store, self.metadata, self.topics,
                                           self.service.call_soon_threadsafe, self.security, self.acl, terms=terms)

    def _make_slave(self, terms):
        return ReplicationSlave(self.config, self.store, self.metadata, self.topics, self.service, self.transport,
                                self.counters, self.puller.notify, self.register_all, self.acl, terms=terms)

    @property
    def is_slave(self) -> bool:
        """Whether writes go elsewhere now: fixed by --role, or the controller's choice."""
        return self.ha.is_slave if self.config.auto_failover else self.config.is_slave

    def _table(self) -> dict:
        table = handlers.table(self.parts, self.is_slave)
        if self.config.auto_failover and not self.is_slave:
            for code in handlers.SLAVE_REFUSES:
                if code in table:
                    table[code] = self._guarded(table[code])
        return table

    def _guarded(self, handler):
        def guarded(req):
            self.ha.writable()  # raises SERVICE_NOT_AVAILABLE: a producer refreshes its route and retries
            handler(req)
        return guarded

    def _role_changed(self, role: str) -> None:
        self.service.handlers.update(self._table())  # every part's code again; PING and STATUS stay
        self.register_all()

    def _request_parts(self) -> list:
        """Every part that answers requests, each with its own collaborators."""
        c, store, meta, topics, clients, commit = (self.config, self.store, self.metadata, self.topics, self.clients,
                                                   self.group_commit)
        txn = Transactions(store, topics, meta, clients, commit, self.counters, self.service.send_if_connected,
                           self.store_host)
        sender = Sender(c, store, topics, commit, self.counters, self._visible, txn.prepare,
                        note_put=None if self.is_slave and not c.auto_failover else self.ha.note_put,
                        wait_for_slave=self.wait_for_slave, traffic=self.traffic)
        return [
            sender, self.puller, self.pop, txn, self.ha,
            Retry(store, meta, topics, sender, self.counters, BrokerTrace(store, topics, self.counters, c.name)),
            Schedule(c, store, topics, commit, self.counters),
            LockManager(is_member=clients.is_consumer),
            FilterServerRequests(self.filter_servers, c.name, c.broker_id, self.transport,
                                 self.service.call_soon_threadsafe),
            ConsumeStats(c.name, store, meta, topics, clients),
            handlers.TopicRequests(topics, store.compaction, self.service.call_soon_threadsafe),
            handlers.OffsetRequests(topics, meta, store, self.service),
            handlers.OffsetResets(c.name, topics, meta, store, clients, self.service.send_if_connected),
            handlers.MessageRequests(store, self.service),
            handlers.ClientRequests(clients, self.notify_group_changed),
            ReplyRequests(c.name, c.cluster, store, topics, clients, sender.handle, self.service.send_if_connected,
                          self.counters),
            AclRequests(self.acl),
            Backups(c.backup_dir, store, meta, self.acl, {"broker": c.name, "cluster": c.cluster,
                                                          "broker_id": c.broker_id}, self.service.call_soon_threadsafe,
                    s3=(c.s3_endpoint, c.s3_credentials_file)),
        ]

    def _pop(self):
        """POP consumption: the in-flight book, its revive log, the requests and the revive step."""
        c = self.config
        book = PopBook(None)

        def limit(group: str) -> int:
            return max_reconsume_times(self.metadata.groups, group, book.asked_max.get(group))
        note_put = None if self.is_slave and not c.auto_failover else self.ha.note_put
        revive_log = ReviveLog(self.store, self.topics, c.cluster, note_put)
        pop = PopRequests(c.name, self.store, self.topics, book, revive_log, limit, self.counters,
                          c.long_poll_max_ms)
        revive = Revive(book, revive_log, self.store, self.topics, self.metadata, self.counters, limit, pop.wake,
                        pop.expire_held, notify=self._visible, writable=lambda: not self.is_slave,
                        traffic=self.traffic)
        book.start = revive.start_of
        return pop, revive

    def _visible(self, topic: str, queue_id: int) -> None:
        """A put made `topic`/`queue_id` readable: wake held pulls and held pops."""
        self.puller.notify(topic, queue_id)
        self.pop.notify(topic, queue_id)

    # ---- name servers -------------------------------------------------------------

    def register_all(self) -> None:
        c = self.config
        broker_id = c.broker_id
        if c.auto_failover:
            if self.ha.role == "none" or (self.ha.role == "master" and not self.ha.lease_valid()):
                return  # no role yet, or a master that may have been replaced: routes must not name it
            broker_id = 0 if self.ha.role == "master" else self.ha.broker_id
        is_slave = self.is_slave
        perm_mask = ~2 if is_slave else ~0  # a slave is routed only while no master is: readable, not writable
        # a topic stored before names were checked would make the whole registration refused
        topics = {t: rq.TopicConfig(read=conf["read"], write=conf["write"], perm=conf["perm"] & perm_mask,
                                    sysflag=conf.get("sysflag", 0), order=conf.get("order", False))
                  for t, conf in self.topics.rows.items() if names.is_valid_topic(t)}
        ha_addr = c.ha_advertised if not is_slave and self.ha.status().get("ha_listen") else None
        req = rq.RegisterBroker(cluster=c.cluster, broker_name=c.name, broker_addr=c.advertised,
                                broker_id=broker_id, data_version=rq.DataVersion(**self.topics.data_version),
                                topics=topics, filter_servers=self.filter_servers.addrs(), ha_addr=ha_addr)
        for addr in self.namesrvs:
            self.transport.send(addr, req, None, (), lambda r, a=addr: self._registered(a, r), timeout=5.0)

    def _registered(self, addr, result) -> None:
        if isinstance(result, Exception) or result.code != 0:
            log.warning("registration with name server %s failed: %s", addr,
                        result if isinstance(result, Exception) else result.remark)
        elif self.config.is_slave:
            try:
                reply = rq.RegisterBrokerReply.decode(result.ext)
            except QuiverError as exc:
                log.warning("registration reply from name server %s ignored: %s", addr, exc.remark)
                return
            self.ha.set_master(reply.master_addr or "", reply.ha_addr or "")

    # ---- consumers -------------------------------------------------------------------

    def notify_group_changed(self, group: str) -> None:
        for info in self.clients.consumers.get(group, {}).values():
            self.service.push(info.identity, rq.NotifyConsumerIdsChanged(group=group))

    # ---- threads -> service thread ---------------------------------------------------

    def _flushed_from_thread(self, offset: int) -> None:
        self.service.call_soon_threadsafe(self._flushed, offset)

    def _flushed(self, offset: int) -> None:
        self.group_commit.on_flushed(offset)
        self.store.wake_confirmed()

    def _jobs(self) -> None:
        soon = self.service.call_soon_threadsafe
        c = self.config
        self.scheduler.add_job(lambda: soon(self.register_all), "interval",
                               seconds=c.register_interval_ms / 1000, id="register")
        self.scheduler.add_job(self.metadata.persist_offsets, "interval",
                               seconds=c.offset_persist_interval_ms / 1000, id="offsets")
        self.scheduler.add_job(lambda: soon(self.store.clean_expired), "interval",
                               seconds=c.clean_interval_ms / 1000, id="retention")
        self.scheduler.add_job(lambda: soon(self._expire_clients), "interval", seconds=10, id="clients")
        self.scheduler.add_job(lambda: self.store.compaction.submit(None, soon), "interval",
                               seconds=c.compaction_interval_ms / 1000, id="compaction")

    def _expire_clients(self) -> None:
        for group in self.clients.expire():
            self.notify_group_changed(group)

    def _sync_flush_watch(self) -> None:
        self.group_commit.expire()
        self.service.call_later(0.05, self._sync_flush_watch)

    def _sync_slave_watch(self) -> None:
        self.ha.expire_step()
        self.service.call_later(0.05, self._sync_slave_watch)

    def status(self) -> dict:
        return {"role": "broker", "broker_name": self.config.name, "addr": self.config.advertised,
                "store_host": host_str(self.store_host),  # what its offset msgIds carry (an IPv4 under compose)
                "cluster": self.config.cluster, "flush": self.config.flush, "topics": len(self.topics),
                "broker_id": self.config.broker_id,
                "ha_role": self.config.ha_role if not self.config.auto_failover else f"AUTO ({self.ha.role})",
                "ha": self.ha.status(),
                "held_pulls": self.puller.held_count(), "held_pops": self.pop.held_count(),
                "store": self.store.stats(),
                "groups": group_inventory(self.metadata, self.clients), "producers": producer_inventory(self.clients),
                "config": shown_config(self.config)}

    # ---- lifecycle ----------------------------------------------------------------------

    def drain(self) -> None:
        """SIGTERM (on the service thread): stop without leaving a taken request unanswered (draining.py)."""
        if self._drain is None:
            c = self.config
            self._drain = Drain(self.service, handlers.SLAVE_REFUSES, self._in_flight, self._answer_held,
                                self.ha.resign if c.auto_failover else None, c.drain_timeout_ms / 1000)
        self._drain.begin()

    def _in_flight(self) -> int:
        return len(self.group_commit) + int(self.ha.status().get("waiting_replies") or 0)

    def _answer_held(self) -> None:
        self.puller.expire_step(now=float("inf"))
        self.pop.expire_held(now=float("inf"))

    def run(self) -> None:
        self.store.open()
        self.pop_revive.replay()   # in-flight POP messages, before any request
        self.service.bind()
        if not self.config.is_slave and not self.config.auto_failover:
            # before serving: offsets committed on a slave meanwhile
            ha_master.pull_slave_offsets(self.transport, self.namesrvs, self.config.name, self.config.advertised,
                                         self.metadata, store=self.store)
        self.ha.start()
        self.register_all()
        self._jobs()
        if self.config.flush == "sync":
            self.service.call_later(0.05, self._sync_flush_watch)
        if self.config.ha_role in ("SYNC_MASTER", "AUTO"):
            self.service.call_later(0.05, self._sync_slave_watch)
        log.info("broker %s (id %d, %s) serving on %s (advertised %s, flush %s)", self.config.name,
                 self.config.broker_id, self.config.ha_role, self.config.listen, self.config.advertised,
                 self.config.flush)
        self.service.serve(self.scheduler, self.shutdown)

    def shutdown(self) -> None:
        """What run() does last (Service.serve has stopped the jobs)."""
        c = self.config
        req = rq.UnregisterBroker(cluster=c.cluster, broker_name=c.name, broker_addr=c.advertised,
                                  broker_id=None if c.auto_failover else c.broker_id)
        futs = [self.transport.call_future(a, req, timeout=1.0) for a in self.namesrvs]
        for f in futs:
            try:
                f.result(1.5)
            except Exception:
                pass
        self.transport.close()
        try:
            self.ha.stop()
        except Exception:
            log.exception("stopping replication failed")
        self.store.close()
        self.metadata.close()
        self.service.close()


def tiered_from_config(c):
    return Tiered(open_store(c.tiered_store, c.s3_endpoint, c.s3_credentials_file), c.store_dir,
                  local_retention_hours=c.local_retention_hours, local_retention_bytes=c.local_retention_bytes,
                  remote_retention_days=c.remote_retention_days, cache_bytes=c.tiered_cache_bytes)


def group_inventory(metadata, clients) -> dict:
    """Every consumer group this broker knows (`quiver consumer list`): its stored config (None:
    never configured, the broker's defaults apply), queues with an offset, online members."""
    out: dict = {}
    for name, conf in list(metadata.groups.items()):
        out[name] = {"config": dict(conf), "offsets": 0, "online": 0}
    for grp, _, _ in list(metadata.offsets):
        out.setdefault(grp, {"config": None, "offsets": 0, "online": 0})["offsets"] += 1
    for grp, members in list(clients.consumers.items()):
        if members:
            out.setdefault(grp, {"config": None, "offsets": 0, "online": 0})["online"] = len(members)
    return dict(sorted(out.items()))


def producer_inventory(clients) -> dict:
    """Producer group -> the client ids heartbeating to this broker now (the console's producers online)."""
    return {grp: sorted(members) for grp, members in sorted(clients.producers.items()) if members}


def shown_config(config) -> dict:
    """The effective settings (`quiver broker config`), a database password hidden."""
    from sqlalchemy.engine import make_url
    out = dataclasses.asdict(config)
    if out.get("metadata_url"):
        try:
            out["metadata_url"] = make_url(out["metadata_url"]).render_as_string(hide_password=True)
        except Exception:   # not a URL SQLAlchemy reads: show nothing rather than a secret
            out["metadata_url"] = "(set)"
    return out
