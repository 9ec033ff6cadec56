"""The broker process: store + metadata + the service loop + periodic jobs.

All store and metadata mutations happen on the service thread. APScheduler
(one BackgroundScheduler, jobs registered in `_jobs`) only hands work to that
thread, except offset persistence, which writes a snapshot on its own thread.
"""

import ipaddress
import logging
import os
import struct
import time
from collections import Counter

from apscheduler.schedulers.background import BackgroundScheduler

from quiver import protocol
from quiver import names, requests as rq
from quiver.errors import QuiverError, TopicNotExistError
from quiver.message import host_bytes
from quiver.service import Service
from quiver.settings import split_addrs
from quiver.transport import Transport
from quiver.validation import is_system_topic

from . import ha_master
from .clients import ClientRegistry
from .ha_slave import ReplicationSlave
from .handlers import make_handlers
from .metadata import Metadata
from .pulling import Puller
from .sending import Sender
from .store import MessageStore

log = logging.getLogger(__name__)

FRAME_HEADROOM_BYTES = 64 * 1024
_LOOPBACK_HOST = b"\x7f\x00\x00\x01\x00\x00\x00\x00"


def max_frame_bytes(config) -> int:
    """The service socket's cap on one frame (ZMQ_MAXMSGSIZE is per frame, not per request).

    The largest legal frame is a header or a batch's bodies packed in one frame
    (a batch is at most max_message_bytes of bodies); their sum plus headroom
    is above both, and bounds what one peer can make the broker buffer."""
    return config.max_message_bytes + protocol.MAX_HEADER_BYTES + FRAME_HEADROOM_BYTES


class App:
    def __init__(self, config):
        self.config = config
        os.makedirs(config.store_dir, exist_ok=True)
        self.counters = Counter()
        adv_host, adv_port = config.advertised.rsplit(":", 1)
        self.store_host = host_bytes(adv_host, int(adv_port))
        self.store = MessageStore(
            config.store_dir, segment_bytes=config.segment_bytes, cq_entries_per_file=config.cq_entries_per_file,
            index_slots=config.index_slots, index_entries=config.index_entries, flush_sync=config.flush == "sync",
            flush_interval_ms=config.flush_interval_ms, store_host=self.store_host,
            delay_levels_ms=config.delay_levels_ms, file_reserved_hours=config.file_reserved_hours,
            delete_when_hours=config.delete_when_hours, on_flushed=self._flushed_from_thread)
        url = config.metadata_url or f"sqlite:///{os.path.join(config.store_dir, 'metadata.db')}"
        self.metadata = Metadata(url)
        self.topics = self.metadata.topics
        self.clients = ClientRegistry()
        self.service = Service(config.listen, {}, "broker-store", self.status, max_frame_bytes(config))
        # replication: a master streams its CommitLog to slaves, a slave follows its master
        self.ha = ReplicationSlave(self) if config.is_slave else ha_master.ReplicationMaster(self)
        self.sender = Sender(self)
        self.puller = Puller(self)
        self.service.handlers.update(make_handlers(self))
        self.service.counters = self.counters
        self.transport = Transport("broker")
        self.namesrvs = split_addrs(config.namesrv)
        self.data_version = {"state": 0, "ts": int(time.time() * 1000), "counter": 0}
        self.scheduler = BackgroundScheduler(daemon=True)
        self.filter_servers: set[str] = set()

    # ---- topics ----------------------------------------------------------------

    def topic_config(self, topic: str, create: bool = False, system: bool = False, queues: int | None = None) -> dict:
        conf = self.topics.get(topic)
        if conf is not None:
            return conf
        if not create or (not system and (not self.config.auto_create_topics or is_system_topic(topic))):
            raise TopicNotExistError(
                f"topic {topic!r} does not exist: create it (quiver topic create) or run the broker with --auto-create-topics")
        n = queues or self.config.default_topic_queues
        log.info("auto-creating topic %s with %d queues", topic, n)
        return self.put_topic(topic, n, n, 6)

    def put_topic(self, topic, read, write, perm=6, order=False) -> dict:
        conf = self.metadata.put_topic(topic, read, write, perm, order=order)
        self.data_version["counter"] += 1
        self.register_all()
        return conf

    def delete_topic(self, topic: str) -> None:
        self.metadata.delete_topic(topic)
        self.store.delete_topic(topic)
        self.data_version["counter"] += 1
        self.register_all()

    @staticmethod
    def born_host(addr: str | None) -> bytes:
        """A request's "host:port" born host (its schema checked the form) as 8 bytes.

        Only an IPv4 literal is packed as is: a hostname would cost a DNS lookup
        on the service thread and an IPv6 host does not fit, so both read as
        127.0.0.1 with their port; no born host reads as 127.0.0.1:0."""
        if not addr:
            return _LOOPBACK_HOST
        host, _, port = addr.rpartition(":")
        try:
            ip = ipaddress.IPv4Address(host).packed
        except ValueError:
            ip = _LOOPBACK_HOST[:4]
        try:
            return ip + struct.pack(">i", int(port))
        except (ValueError, struct.error):
            return _LOOPBACK_HOST

    # ---- name servers -------------------------------------------------------------

    def register_all(self) -> None:
        c = self.config
        perm_mask = ~2 if c.is_slave else ~0  # a slave is routed only while no master is: readable, not writable
        # a topic stored before names were checked would make the whole registration refused
        topics = {t: rq.TopicConfig(read=conf["read"], write=conf["write"], perm=conf["perm"] & perm_mask,
                                    sysflag=conf.get("sysflag", 0), order=conf.get("order", False))
                  for t, conf in self.topics.items() if names.is_valid_topic(t)}
        ha_addr = c.ha_advertised if not c.is_slave and self.ha.status()["ha_listen"] else None
        req = rq.RegisterBroker(cluster=c.cluster, broker_name=c.name, broker_addr=c.advertised,
                                broker_id=c.broker_id, data_version=rq.DataVersion(**self.data_version),
                                topics=topics, filter_servers=sorted(self.filter_servers), ha_addr=ha_addr)
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
        self.service.call_soon_threadsafe(self.sender.on_flushed, offset)

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

    def _expire_clients(self) -> None:
        for group in self.clients.expire():
            self.notify_group_changed(group)

    def _sync_flush_watch(self) -> None:
        self.sender.expire_step()
        self.service.call_later(0.05, self._sync_flush_watch)

    def _sync_slave_watch(self) -> None:
        self.ha.expire_step()
        self.service.call_later(0.05, self._sync_slave_watch)

    def status(self) -> dict:
        return {"role": "broker", "broker_name": self.config.name, "addr": self.config.advertised,
                "cluster": self.config.cluster, "flush": self.config.flush, "topics": len(self.topics),
                "broker_id": self.config.broker_id, "ha_role": self.config.ha_role, "ha": self.ha.status(),
                "held_pulls": self.puller.held_count(), "store": self.store.stats()}

    # ---- lifecycle ----------------------------------------------------------------------

    def run(self) -> None:
        self.store.open()
        self.service.bind()
        if not self.config.is_slave:
            ha_master.pull_slave_offsets(self)  # before serving: offsets committed on a slave meanwhile
        self.ha.start()
        self.register_all()
        self._jobs()
        self.scheduler.start()
        if self.config.flush == "sync":
            self.service.call_later(0.05, self._sync_flush_watch)
        if self.config.ha_role == "SYNC_MASTER":
            self.service.call_later(0.05, self._sync_slave_watch)
        log.info("broker %s (id %d, %s) serving on %s (advertised %s, flush %s)", self.config.name,
                 self.config.broker_id, self.config.ha_role, self.config.listen, self.config.advertised,
                 self.config.flush)
        try:
            self.service.run()
        finally:
            self.shutdown()

    def shutdown(self) -> None:
        try:
            self.scheduler.shutdown(wait=False)
        except Exception:
            pass
        c = self.config
        req = rq.UnregisterBroker(cluster=c.cluster, broker_name=c.name, broker_addr=c.advertised,
                                  broker_id=c.broker_id)
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
