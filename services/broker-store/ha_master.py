"""Master side of replication: the HA socket, a stream per slave, SYNC_MASTER waits.

Owns the HA thread (a ROUTER bound at --ha-listen), each connected slave's
link (acked / sent offsets, liveness), the group-ack list of SYNC_MASTER
replies and the master's half of the metadata sync; not the frame rules
(ha_stream) nor the slave (ha_slave).

    service thread                     HA thread (this module)                slave
    put -> note_put(end) --deque+wake--> stream [acked .. end) in whole-record  --HA_TRANSFER-->
                                         chunks, at most window bytes ahead    <--HA_REPORT (ack)--
    on_acks(best, connected) <--post---- best acked offset of the live slaves

The HA thread reads the CommitLog with pread under the CommitLog lock (so a
segment cannot be closed under it), never past the end of the whole puts
(store.max_phys_offset: a put still being written may yet be rolled back), and
never writes the store. A chunk is whole records with intact framing
(ha_stream.frame_prefix); bytes whose framing is broken by damage on this
master's disk go alone, verbatim, as one chunk up to the next intact record
(recovery.resync) or the segment's end: offsets stay equal on both sides and
replication never stops at a bad record (ha_stream's docstring has the rule).
Such damage at the very tail of the log waits for the next put (`_damaged`).

SYNC_MASTER answers: SEND_OK only once a slave acked the put's end offset;
FLUSH_SLAVE_TIMEOUT when none did within --slave-timeout-ms (a slave that
cannot write, e.g. its disk is full, acks nothing); SLAVE_NOT_AVAILABLE at
once when no slave is connected or the best one is more than
--ha-max-gap-bytes behind (RocketMQ's isSlaveOK). The data is stored on the
master whatever the answer. Replies wait on the service thread in one
GroupAck list, completed when the best acked offset passes their end
(RocketMQ 4.x GroupTransferService).

--auto-failover (`terms` given: replicas.Replicas): links start with a
handshake (the slave asks, the master answers its epoch list and end, the
slave cuts its log to the shared history and reports again with reset);
every chunk carries the epoch its bytes were written in and never spans two
(epochs.epoch_at caps it), and every frame the epoch this master leads;
a SYNC write is acknowledged once every other SyncStateSet member acked it
(`terms.required`, kept on the service thread) and only while the master's
controller lease holds; a report naming a newer epoch tells `terms` this
master was deposed.

Metadata: a slave calls HA_SYNC_METADATA every --ha-sync-interval-ms with the
consumer offsets it advanced itself while it served reads; the master keeps
max(master, slave) per (group, topic, queue) and answers its topics, groups
and offsets. A master that starts asks its registered slaves the same
(HA_SLAVE_OFFSETS) before it serves, so offsets committed on a slave while
the master was down are not lost.
"""

import collections
import logging
import os
import threading
import time

import zmq

from quiver.wire import protocol, record
from quiver.wire import requests as rq
from quiver.wire.codes import RequestCode, ResponseCode
from quiver.errors import ProtocolError, QuiverError
from quiver.wire.transport import next_request_id

from . import epochs, recovery
from .ha_stream import REPORT_MAX_FRAME_BYTES, GroupAck, LagTracker, frame_prefix

DAMAGE_LOGGED_MAX = 10_000  # damaged spans logged (and their ends remembered), up to this many

log = logging.getLogger(__name__)


class _Link:
    __slots__ = ("identity", "addr", "broker_id", "acked", "sent", "seen", "sent_at", "diverged", "since",
                 "handshake", "caught_at", "caught_target", "confirm_sent")

    def __init__(self, identity: bytes, addr: str, broker_id: int, offset: int, now: float):
        self.identity, self.addr, self.broker_id = identity, addr, broker_id
        self.acked = self.sent = offset
        self.seen = self.sent_at = self.since = now
        self.diverged = False
        self.handshake = False      # --auto-failover: epoch lists not compared yet, nothing streamed
        self.caught_at = 0.0        # when it last acked what was this master's end at its previous report
        self.caught_target = 0
        self.confirm_sent = -1      # --auto-failover: the confirm offset the last frame carried


class ReplicationMaster:
    """The HA thread of a master broker, and HA_SYNC_METADATA. `post` hands work to the
    service thread (Service.call_soon_threadsafe)."""

    def __init__(self, config, store, metadata, topics, post, security=None, acl=None, terms=None):
        c = self.config = config
        self.terms = terms  # --auto-failover: epoch, epoch list, SyncStateSet and lease (replicas.Replicas)
        self.link_acks: dict[str, tuple[int, float]] = {}  # service thread: addr -> (acked, caught up at)
        self.acl = acl  # AclStore: its snapshot goes to the slaves with the metadata
        self.security = security  # auth on: CURVE on the HA socket, and only replicas may report
        self.refused_reports = 0
        self.store = store
        self.metadata = metadata
        self.topics = topics
        self.post = post
        self.chunk = c.ha_transfer_bytes
        self.window = c.ha_window_bytes
        self.max_gap = c.ha_max_gap_bytes
        self.hb_s = c.ha_heartbeat_interval_ms / 1000
        self.expiry_s = c.ha_housekeeping_ms / 1000
        self.bind_addr = c.ha_bind
        self.explicit = bool(c.ha_listen)
        self.links: dict[bytes, _Link] = {}
        self.lag = LagTracker()
        self._puts: collections.deque = collections.deque()
        self._wake_fd = os.eventfd(0, os.EFD_NONBLOCK)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._sock = None
        self._posted = (-1, -1)
        self.snapshot: list[dict] = []       # per-slave status, replaced by the HA thread
        self.damage: dict[int, int] = {}     # start -> end of damaged CommitLog spans found (HA thread)
        self.held: set[int] = set()          # damage at the log's tail, waiting for a record after it
        # service-thread state
        self.pending = GroupAck(c.slave_timeout_ms / 1000)
        self.best_acked = 0
        self.connected = 0

    # ---- lifecycle --------------------------------------------------------------

    def start(self) -> None:
        n = clamp_offsets(self.metadata, self.store)
        if n:
            log.warning("%d consumer offsets were past their queue's end (a cut log): moved back to it", n)
        sock = zmq.Context.instance().socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, 10_000)
        sock.setsockopt(zmq.ROUTER_HANDOVER, 1)
        sock.setsockopt(zmq.MAXMSGSIZE, REPORT_MAX_FRAME_BYTES)  # slaves only send small reports
        if self.security is not None:
            self.security.start(zmq.Context.instance())
            self.security.secure(sock)
        host, port = self.bind_addr.rsplit(":", 1)
        try:
            sock.bind(f"tcp://{'*' if host in ('0.0.0.0', '') else host}:{port}")
        except zmq.ZMQError as exc:
            sock.close(0)
            if self.explicit:
                raise
            log.error("HA socket not bound on %s (%s): slaves cannot replicate; set --ha-listen",
                      self.bind_addr, exc)
            return
        self._sock = sock
        self._thread = threading.Thread(target=self._run, name="ha-master", daemon=True)
        self._thread.start()
        log.info("%s: HA socket on %s", self.config.ha_role, self.bind_addr)

    def stop(self) -> None:
        self._stop.set()
        self.wake()
        if self._thread is not None:
            self._thread.join(5)
        os.close(self._wake_fd)

    def wake(self) -> None:
        try:
            os.eventfd_write(self._wake_fd, 1)
        except OSError:
            pass

    # ---- service thread -------------------------------------------------------------

    def note_put(self, end: int) -> None:
        """A put made the CommitLog end at `end` (service thread)."""
        if self._sock is not None:
            self._puts.append((end, time.monotonic()))
            if self.links:
                self.wake()

    def check_slave(self, end: int) -> ResponseCode | None:
        """SYNC_MASTER, before waiting: SLAVE_NOT_AVAILABLE when no slave is connected and in sync."""
        if self.terms is not None:
            return None  # the SyncStateSet decides; replicas.Replicas refused the write if it is too small
        if self.connected == 0 or end - self.best_acked > self.max_gap:
            return ResponseCode.SLAVE_NOT_AVAILABLE
        return None

    def wait_for_slave(self, end: int, req, out: dict) -> None:
        """Answer `req` once a slave acked `end` (or FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE)."""
        refused = self.check_slave(end)
        if refused is not None:
            req.reply(refused, "stored on the master; no slave is connected and in sync", out)
        elif self.terms is not None:
            self.pending.add(end, req, out)
            self.recheck()
        elif self.best_acked >= end:
            req.reply(ResponseCode.SUCCESS, "", out)
        else:
            self.pending.add(end, req, out)

    def _may_ack(self) -> bool:
        return self.terms is None or self.terms.lease_valid()

    def on_link_acks(self, acks: dict) -> None:
        """--auto-failover, posted by the HA thread: addr -> (acked, caught up at) of the handshaken links."""
        self.link_acks = acks
        self.recheck()

    def recheck(self) -> None:
        """The SyncStateSet, the acks or the lease changed: answer what every member now has."""
        if self.terms is None:
            return
        required = self.terms.required
        acks = self.link_acks
        best = min((acks[a][0] if a in acks else 0 for a in required), default=self.store.max_phys_offset)
        self.best_acked, self.connected = best, len(acks)
        self.terms.update_confirm(best if required else None)
        if self._may_ack():
            for w in self.pending.acked(best):
                w.req.reply(ResponseCode.SUCCESS, "", w.reply_ext)

    def fail_pending(self, why: str) -> None:
        """Deposed: what waits for replicas is stored here but not acknowledged."""
        for w in self.pending.expired(float("inf")):
            w.req.reply(ResponseCode.FLUSH_SLAVE_TIMEOUT, why, w.reply_ext)

    def on_acks(self, best: int, connected: int) -> None:
        """Posted by the HA thread (service thread)."""
        if self.terms is not None:
            return  # on_link_acks: acks per member
        self.best_acked, self.connected = best, connected
        for w in self.pending.acked(best):
            w.req.reply(ResponseCode.SUCCESS, "", w.reply_ext)

    def expire_step(self) -> None:
        ms = self.config.slave_timeout_ms
        for w in self.pending.expired(time.monotonic()):
            w.req.reply(ResponseCode.FLUSH_SLAVE_TIMEOUT, f"stored on the master; no slave acked within {ms} ms",
                        w.reply_ext)

    def handlers(self) -> dict:
        return {RequestCode.HA_SYNC_METADATA: self.sync_metadata, RequestCode.HA_SLAVE_OFFSETS: _not_a_slave}

    def sync_metadata(self, req) -> None:
        """A slave's offsets in (max of both kept); topics, groups and offsets out."""
        meta = self.metadata
        merge_offsets(meta, req.args.offsets, self.store)
        offsets = [(g, t, q, o) for (g, t, q), o in list(meta.offsets.items())]
        req.reply(ResponseCode.SUCCESS, "", rq.HaSyncMetadataReply(
            topics={name: rq.TopicConfig(**row) for name, row in list(self.topics.rows.items())},
            groups={name: rq.GroupConfig(**g) for name, g in list(meta.groups.items())}, offsets=offsets,
            max_offset=self.store.max_phys_offset,
            acl=rq.AclData(**self.acl.acl.snapshot()) if self.acl is not None else None))

    def status(self) -> dict:
        return {"ha_listen": self.bind_addr if self._sock is not None else "", "slaves": self.snapshot,
                "waiting_replies": len(self.pending), "max_offset": self.store.max_phys_offset,
                "damaged_spans_streamed": len(self.damage), "refused_reports": self.refused_reports}

    # ---- HA thread --------------------------------------------------------------------

    def _run(self) -> None:
        poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLIN)
        poller.register(self._wake_fd, zmq.POLLIN)
        last_status = 0.0
        try:
            while not self._stop.is_set():
                for s, _ in poller.poll(50):
                    if s is self._sock:
                        self._drain()
                    else:
                        try:
                            os.eventfd_read(self._wake_fd)
                        except BlockingIOError:
                            pass
                now = time.monotonic()
                self.step(now)
                if now - last_status >= 0.2:
                    last_status = now
                    self._publish(now)
        except Exception:
            log.exception("HA master thread failed")
        finally:
            self._sock.close(0)

    def step(self, now: float) -> None:
        puts = self._puts
        while puts:
            self.lag.note(*puts.popleft())
        end = self.store.max_phys_offset
        for link in list(self.links.values()):
            if now - link.seen > self.expiry_s:
                log.warning("slave %s silent for %.0f s: dropped", link.addr, now - link.seen)
                del self.links[link.identity]
                continue
            if link.handshake:
                if now - link.sent_at >= self.hb_s:
                    self._answer_handshake(link)
                continue
            if not link.diverged:
                self._pump(link, end, now)
            if now - link.sent_at >= self.hb_s or (self.terms is not None and
                                                    link.confirm_sent != self.store.confirm_offset):
                self._send(link, link.sent, b"", end)  # a heartbeat, or a new confirm offset for its reads
        # No slave: nothing to measure against; keeping every put's end grew 72 bytes a put.
        self.lag.trim(min(l.acked for l in self.links.values()) if self.links else end)
        self._post()

    def _drain(self) -> None:
        for _ in range(1000):
            try:
                frames = self._sock.recv_multipart(zmq.NOBLOCK, copy=self.security is None)
            except zmq.Again:
                return
            if self.security is not None:
                if not self._from_replica(frames[-1]):
                    continue
                frames = [f.bytes for f in frames]
            if len(frames) < 3:
                continue
            try:
                env = protocol.decode(frames[1:])
                if env.code != RequestCode.HA_REPORT:
                    raise ProtocolError(f"unexpected code {env.code} on the HA socket")
                r = rq.HaReport.decode(env.ext)
            except QuiverError as exc:
                log.warning("bad HA frame: %s", exc.remark)
                continue
            if self.terms is not None and self._auto_report(frames[0], r):
                continue
            self._report(frames[0], r.offset, r.addr, r.broker_id, r.reset)

    def _from_replica(self, frame) -> bool:
        """Auth on: only a broker's service key (role replica) may stream the CommitLog."""
        try:
            who = frame.get("User-Id")
        except zmq.ZMQError:
            who = ""
        if who == "s:broker":
            return True
        self.refused_reports += 1
        if self.refused_reports in (1, 100, 10_000):
            log.warning("HA socket: a report from %s refused (%d so far): only a replica's service key may "
                        "replicate", self.security.who(who) if who else "an unauthenticated peer", self.refused_reports)
        return False

    def _auto_report(self, identity: bytes, r) -> bool:
        """--auto-failover's part of a report; True when it is handled (no streaming on it)."""
        epoch = self.terms.epoch
        if r.epoch > epoch:
            # the replica follows a newer master: this one was deposed
            self.post(self.terms.note_newer_epoch, r.epoch)
            return True
        link = self.links.get(identity)
        now = time.monotonic()
        if link is None or r.handshake:
            if link is None:
                link = self.links[identity] = _Link(identity, r.addr, r.broker_id, r.offset, now)
                log.info("replica %s (id %d) connected at offset %d: handshake", r.addr, r.broker_id, r.offset)
            link.handshake, link.seen = True, now
            self._answer_handshake(link)
            return True
        if link.handshake:
            link.seen = now
            if not r.reset:
                return True  # a report sent before it took the answer
            link.handshake = False
            link.caught_at, link.caught_target = 0.0, self.store.max_phys_offset
        return False

    def _answer_handshake(self, link: _Link) -> None:
        end = self.store.max_phys_offset
        head = rq.HaTransfer(offset=end, segment_bytes=self.store.segment_bytes, master_end=end,
                             epoch=self.terms.epoch, epochs=list(self.terms.epoch_list()),
                             master_epoch=self.terms.epoch)
        try:
            self._sock.send_multipart([link.identity, *protocol.request(head, next_request_id())], zmq.NOBLOCK)
            link.sent_at = time.monotonic()
        except zmq.ZMQError as exc:
            log.debug("handshake answer to %s dropped: %s", link.addr, exc)

    def _report(self, identity: bytes, offset: int, addr: str, broker_id: int, reset: bool) -> None:
        now = time.monotonic()
        link = self.links.get(identity)
        end = self.store.max_phys_offset
        if link is None:
            link = self.links[identity] = _Link(identity, addr, broker_id, offset, now)
            lo = self.store.min_phys_offset
            if offset == 0 and lo > 0:
                link.acked = link.sent = lo  # a new slave starts at the oldest segment still kept
            log.info("slave %s (id %d) connected at offset %d (master at %d)", addr, broker_id, offset, end)
        link.seen = now
        if offset > end:
            if not link.diverged:
                log.error("slave %s is %d bytes AHEAD of this master (master lost data?): not replicating to it",
                          addr, offset - end)
            link.diverged = True
            return
        link.diverged = False
        if offset > link.acked:
            self.lag.acked(link.acked, offset, now)
            link.acked = offset
        if offset >= link.caught_target:
            link.caught_at, link.caught_target = now, end
        if reset:
            link.acked = link.sent = offset
        elif offset > link.sent:
            link.sent = offset
        self._pump(link, end, now)

    def _pump(self, link: _Link, end: int, now: float) -> None:
        entries = self.terms.epoch_list() if self.terms is not None else None
        epoch = start = 0
        while link.sent < end and link.sent - link.acked < self.window:
            stop = end
            if entries:  # a chunk never spans two epochs: the slave records each epoch's start
                epoch, start, stop = epochs.epoch_at(entries, link.sent, end)
            data = self._read(link.sent, stop)
            if not data:
                break
            self._send(link, link.sent, data, end, epoch, start)
            link.sent += len(data)
            link.sent_at = now

    def _read(self, offset: int, end: int) -> bytes:
        """The next chunk from `offset`, below `end` (the whole puts): whole records with intact
        framing, at most one chunk (one record if it is longer); or, where the framing is
        broken, the damaged bytes alone up to the next intact record."""
        cl = self.store.commit_log
        seg_bytes = self.store.segment_bytes
        with cl.lock:
            seg = cl.segment_for(offset)
            if seg is None:
                return b""
            stop = min(seg.end, end)  # a record never spans segments
            buf = cl.read(offset, min(self.chunk, stop - offset))
            n = frame_prefix(buf, offset, len(buf), seg_bytes)
            if n == 0 and len(buf) >= 8:
                size = record.peek(buf, 0)[0]
                if len(buf) < size <= stop - offset:  # one record longer than a chunk
                    buf = cl.read(offset, size)
                    n = frame_prefix(buf, offset, size, seg_bytes)
            if n == 0 and buf:
                return self._damaged(seg, offset, stop)
        return buf[:n] if n < len(buf) else buf

    def _damaged(self, seg, offset: int, stop: int) -> bytes:
        """Framing damage at `offset` (under the CommitLog lock): its bytes up to the next intact
        record within the whole puts, or to the end of a complete segment; found once, then
        remembered. b"" while neither bounds it yet: damage at the tail of the log is held
        back until a record follows it, because this master's own recovery would cut such a
        tail after a restart, and a slave holding it would then be ahead of its master."""
        nxt = self.damage.get(offset)
        if nxt is None:
            found = recovery.resync(seg, offset)
            if found is not None and found <= stop:
                nxt = found
            elif seg.end <= stop and seg is not self.store.commit_log.segments[-1]:
                nxt = seg.end  # a complete segment (a later one exists): the damage runs to its end
            else:
                if offset not in self.held and len(self.held) < DAMAGE_LOGGED_MAX:
                    self.held.add(offset)
                    log.error("CommitLog bytes from %d on this master are damaged (no intact record framing) and "
                              "nothing intact follows them yet: replication waits at %d for the next put",
                              offset, offset)
                return b""
            if len(self.damage) < DAMAGE_LOGGED_MAX:
                self.damage[offset] = nxt
                self.held.discard(offset)
                log.error("CommitLog bytes [%d, %d) on this master are damaged (no intact record framing at %d): "
                          "streamed to slaves as they are, so offsets stay equal; the records after them are "
                          "replicated intact", offset, nxt, offset)
        return self.store.commit_log.read(offset, nxt - offset)

    def _send(self, link: _Link, offset: int, data: bytes, end: int, epoch: int = 0, start: int = 0) -> None:
        master_epoch, confirm = 0, None
        if self.terms is not None:
            master_epoch = self.terms.epoch  # fencing: a replica drops frames of a deposed master
            if not data:
                epoch = master_epoch  # a heartbeat names the current epoch
            confirm = link.confirm_sent = self.store.confirm_offset
        head = rq.HaTransfer(offset=offset, segment_bytes=self.store.segment_bytes, master_end=end, epoch=epoch,
                             epoch_start=start, master_epoch=master_epoch, confirm=confirm)
        frames = protocol.request(head, next_request_id(), None, (data,) if data else ())
        try:
            self._sock.send_multipart([link.identity, *frames], zmq.NOBLOCK, copy=len(data) < 65536)
            link.sent_at = time.monotonic()
        except zmq.ZMQError as exc:
            log.debug("HA send to %s dropped: %s", link.addr, exc)
            link.sent = link.acked  # resend from the ack once it talks again

    def _post(self) -> None:
        if self.terms is not None:
            acks = {l.addr: (l.acked, l.caught_at) for l in self.links.values() if not l.diverged and not l.handshake}
            if acks != self._posted:
                self._posted = acks
                self.post(self.on_link_acks, acks)
            return
        live = [l for l in self.links.values() if not l.diverged]
        state = (max((l.acked for l in live), default=0), len(live))
        if state != self._posted:
            self._posted = state
            self.post(self.on_acks, *state)

    def _publish(self, now: float) -> None:
        end = self.store.max_phys_offset
        lat = self.lag.percentiles()
        self.snapshot = [{"addr": l.addr, "broker_id": l.broker_id, "acked_offset": l.acked, "handshake": l.handshake,
                          "lag_bytes": max(0, end - l.acked), "lag_ms": round(self.lag.lag_ms(l.acked, now), 1),
                          "diverged": l.diverged, "connected_s": round(now - l.since, 1),
                          "ack_latency": lat} for l in self.links.values()]


# ---- metadata sync (master side) --------------------------------------------------------

def merge_offsets(meta, rows, store=None) -> int:
    """Keep max(mine, theirs) per (group, topic, queue), theirs capped at the queue's end in `store`
    (a deposed master's offsets may be past what it was cut back to); `rows` are schema-checked
    (group, topic, queue id, offset) tuples. Returns how many moved forward."""
    moved = 0
    for g, t, q, o in rows:
        cq = store.cqs.get((t, q)) if store is not None else None
        if cq is not None:
            o = min(o, cq.max_offset)
        cur = meta.get_offset(g, t, q)
        if cur is None or o > cur:
            meta.set_offset(g, t, q, o)
            moved += 1
    return moved


def clamp_offsets(meta, store) -> int:
    """Consumer offsets past their queue's end (its log was cut: a failover, a crash's lost tail) go
    back to the end, so the group reads what this broker stores there next. Returns how many moved."""
    moved = 0
    for (g, t, q), o in list(meta.offsets.items()):
        cq = store.cqs.get((t, q))
        if cq is not None and o > cq.max_offset:
            meta.set_offset(g, t, q, cq.max_offset)
            moved += 1
    return moved


def pull_slave_offsets(transport, namesrvs: list[str], broker_name: str, own_addr: str, metadata,
                       timeout_s: float = 1.0, store=None) -> None:
    """A master about to serve: fold in what its slaves stored while it was away."""
    slaves = []
    for ns in namesrvs:
        try:
            env = transport.call(ns, rq.GetClusterInfo(), timeout=timeout_s)
            info = rq.ClusterReply.decode(env.ext).cluster
        except QuiverError:
            continue
        me = info.brokers.get(broker_name)
        addrs = me.addrs if me is not None else {}
        slaves = [a for bid, a in addrs.items() if bid != 0 and a != own_addr]
        break
    for addr in slaves:
        try:
            env = transport.call(addr, rq.HaSlaveOffsets(), timeout=timeout_s)
            rows = rq.HaSlaveOffsetsReply.decode(env.ext).offsets
        except QuiverError as exc:
            log.info("slave %s not asked for offsets: %s", addr, exc)
            continue
        n = merge_offsets(metadata, rows, store)
        if n:
            log.info("took %d consumer offsets committed on slave %s while this master was away", n, addr)


def _not_a_slave(req) -> None:
    req.reply(ResponseCode.SERVICE_NOT_AVAILABLE, "this broker is not a slave")
