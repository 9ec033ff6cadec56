"""Slave side of replication: follow the master's CommitLog and metadata; serve reads.

Owns the slave's HA thread (one DEALER to the master's HA socket), the hand-off
of received chunks to the service thread, the acknowledgments, the pause of a
full disk and the slave's half of the metadata sync; not the store
(replica_append appends and dispatches) nor the frame rules (ha_stream).

    HA thread: connect -> HA_REPORT {o: own max offset} -> HA_TRANSFER chunks -> post
    service thread: append_replicated(o, data) -> wake pulls held on the touched
                    queues -> ack = new end -> HA thread sends HA_REPORT
    every --ha-heartbeat-interval-ms a report even when idle; a master silent for
    --ha-housekeeping-ms is reconnected. Catch-up after a restart starts from the
    slave's own recovered max offset.

A disk that refuses the slave's writes (the disk guard, or ENOSPC / EIO on a
write, rolled back to the last whole record by replica_append) pauses
replication: chunks still in flight are dropped, nothing is acked and no
resend is asked for, so the master stops at its window and answers SYNC_MASTER
sends FLUSH_SLAVE_TIMEOUT (never SEND_OK). A retry checks the disk after
RETRY_MIN_S, doubling up to RETRY_MAX_S; once it has room the slave asks the
master to resend from its last ack (HA_REPORT reset) and goes on by itself,
no restart. One log line when it pauses, one when it resumes; STATUS shows
the state and the next retry. Damaged records from the master are copied
as they are and counted (replica_append, ha_stream's docstring).

The master's HA address comes from --ha-master or the name servers'
registration reply (which also names the master's broker address, used for
HA_SYNC_METADATA every --ha-sync-interval-ms, at once after (re)connecting and
when a replicated record names a topic the slave does not know).

--auto-failover (`terms` given: replicas.Replicas names the master): each
connection starts with a handshake. The first report asks for the master's
epoch list; its answer cuts this log to the history both share
(epochs.truncate_point, replica_append.truncate) before a byte is taken;
then a report with reset starts the stream. A chunk of a newer epoch adds
that epoch to the epoch file before its bytes are written; a frame whose
sender leads an epoch older than the controller's is a deposed master's and
is dropped, never acked, so it cannot complete a write there (the chunk's own
epoch may be older: a replica catching up takes old epochs' bytes).

Offsets while the master is away: consumers pull from the slave and commit
there. Those offsets are "slave-advanced" (above the last value synced from
the master); the slave sends them with every sync and the master keeps
max(master, slave); a restarting master also asks for them before it serves
(ha_master.pull_slave_offsets). A slave takes the master's value for every
offset it did not advance itself (so an admin reset on the master reaches it).
"""

import logging
import os
import threading
import time
import uuid

import zmq

from quiver.wire import protocol
from quiver.wire import requests as rq
from quiver.wire.codes import RequestCode, ResponseCode
from quiver.errors import ProtocolError, QuiverError
from quiver.wire.curve import process_credentials, secure_client
from quiver.wire.transport import next_request_id

from . import epochs, ha_master, replica_append

log = logging.getLogger(__name__)

RETRY_MIN_S = 0.5   # first disk check after a refused chunk
RETRY_MAX_S = 10.0  # the backoff doubles up to this


class ReplicationSlave:
    """The HA thread of a slave broker, its metadata sync and HA_SLAVE_OFFSETS.

    `service` is the broker's loop (timers, hand-off from the HA thread); `notify(topic,
    queue_id)` wakes pulls held on a queue a chunk touched; `register_all()` asks the
    name servers again while the master is not known yet."""

    def __init__(self, config, store, metadata, topics, service, transport, counters, notify, register_all,
                 acl=None, terms=None):
        c = self.config = config
        self.terms = terms                 # --auto-failover: the epochs (replicas.Replicas)
        self.handshaken = terms is None    # --auto-failover: the log is cut to the master's history
        self.stale_frames = 0
        self.acl = acl  # AclStore: replaced by the master's with each metadata sync
        self.store = store
        self.metadata = metadata
        self.topics = topics
        self.service = service
        self.transport = transport
        self.counters = counters
        self.notify = notify
        self.register_all = register_all
        self.target = c.ha_master          # the master's HA address
        self.master_addr = ""              # the master's broker address (metadata sync)
        self.hb_s = c.ha_heartbeat_interval_ms / 1000
        self.expiry_s = c.ha_housekeeping_ms / 1000
        self.sync_s = c.ha_sync_interval_ms / 1000
        self._wake_fd = os.eventfd(0, os.EFD_NONBLOCK)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.acked = 0                     # written by the service thread, sent by the HA thread
        self._reset = False
        self.master_max = 0
        self.last_frame = 0.0
        self.state = "no master known"
        self.error = ""
        self.synced_at = 0.0
        self._sync_busy = False
        self._sync_soon = False
        self.snapshot: dict[tuple[str, str, int], int] = {}   # offsets as last synced from the master
        # service-thread state: damaged bytes copied, and the pause of a disk that refuses writes
        self.replica = replica_append.ReplicaState()
        self.paused = ""                   # why replicated bytes are not written now; "" = writing
        self.resuming = False              # a resend was asked after a pause: the next append tells
        self.paused_at = 0.0
        self.backoff_s = RETRY_MIN_S
        self.retry_at = 0.0
        self.disk_pauses = 0
        self.dropped_chunks = 0            # chunks that arrived while paused (resent later)

    # ---- lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        self.acked = self.store.max_phys_offset
        self._thread = threading.Thread(target=self._run, name="ha-slave", daemon=True)
        self._thread.start()
        self.service.call_later(0.5, self._sync_tick)
        log.info("slave of %s: replicating from offset %d (master HA %s)", self.config.name, self.acked,
                 self.target or "from name servers")

    def stop(self) -> None:
        self._stop.set()
        self._wake()
        if self._thread is not None:
            self._thread.join(5)
        os.close(self._wake_fd)

    def _wake(self) -> None:
        try:
            os.eventfd_write(self._wake_fd, 1)
        except OSError:
            pass

    def set_master(self, master_addr: str, ha_addr: str) -> None:
        """From a name server's registration reply (any thread)."""
        if master_addr:
            self.master_addr = master_addr
        if ha_addr and not self.config.ha_master and ha_addr != self.target:
            log.info("master HA address is %s", ha_addr)
            self.target = ha_addr
            self._wake()

    # ---- HA thread -------------------------------------------------------------------

    def _run(self) -> None:
        sock, connected_to = None, ""
        poller = zmq.Poller()
        poller.register(self._wake_fd, zmq.POLLIN)
        last_report, sent_ack, fresh = 0.0, -1, False
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                if sock is not None and (self.target != connected_to or now - self.last_frame > self.expiry_s):
                    if self.target == connected_to:
                        log.warning("master %s silent for %.0f s: reconnecting", connected_to, now - self.last_frame)
                    poller.unregister(sock)
                    sock.close(0)
                    sock, connected_to = None, ""
                if sock is None and self.target:
                    sock = zmq.Context.instance().socket(zmq.DEALER)
                    sock.setsockopt(zmq.LINGER, 0)
                    sock.setsockopt(zmq.IDENTITY, f"{self.config.advertised}#{uuid.uuid4().hex[:8]}".encode())
                    secure_client(sock, process_credentials())  # auth on: the broker's service key
                    sock.connect(f"tcp://{self.target}")
                    poller.register(sock, zmq.POLLIN)
                    connected_to, self.last_frame, sent_ack, fresh = self.target, now, -1, True
                    if self.terms is not None:
                        self.handshaken = False
                    self.state = f"connecting to {connected_to}"
                    self._reset = True
                for s, _ in poller.poll(100 if sock is not None else 200):
                    if s is sock:
                        if self._drain(sock) and fresh:
                            fresh = False
                            self.state = f"replicating from {connected_to}"
                            self.service.call_soon_threadsafe(self.sync_metadata)
                    else:
                        try:
                            os.eventfd_read(self._wake_fd)
                        except BlockingIOError:
                            pass
                if sock is None:
                    continue
                now = time.monotonic()
                if self.acked != sent_ack or self._reset or now - last_report >= self.hb_s:
                    sent_ack, last_report = self.acked, now
                    report = rq.HaReport(offset=sent_ack, addr=self.config.advertised,
                                         broker_id=self.config.broker_id, reset=self._reset,
                                         handshake=not self.handshaken,
                                         epoch=self.terms.epoch if self.terms is not None else 0)
                    self._reset = False
                    try:
                        sock.send_multipart(protocol.request(report, next_request_id()), zmq.NOBLOCK)
                    except zmq.Again:
                        pass  # not connected yet: the next report goes
        except Exception:
            log.exception("HA slave thread failed")
        finally:
            if sock is not None:
                sock.close(0)

    def _drain(self, sock) -> bool:
        got = False
        confirm_seen = None
        for _ in range(100):
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK, copy=True)
            except zmq.Again:
                break
            try:
                env = protocol.decode(frames)
                if env.code != RequestCode.HA_TRANSFER:
                    raise ProtocolError(f"unexpected code {env.code} on the HA socket")
                t = rq.HaTransfer.decode(env.ext)
            except QuiverError as exc:
                log.warning("bad HA frame from the master: %s", exc.remark)
                continue
            if self.terms is not None:
                # Fence on the sender's epoch, not the chunk's: a replica catching up takes bytes of
                # older epochs from the current master (dropping them kept it behind for good).
                if sender_epoch(t) < self.terms.epoch:
                    self.stale_frames += 1  # a deposed master's: nothing of it is written or acked
                    continue
                if t.epochs is not None:
                    self.service.call_soon_threadsafe(self.handshake, t.epochs, t.master_end)
                elif not self.handshaken:
                    continue
            got = True
            self.last_frame = time.monotonic()
            self.master_max = t.master_end
            if t.confirm is not None and t.confirm != confirm_seen:
                confirm_seen = t.confirm  # after the chunks before it: the service thread runs them in order
                self.service.call_soon_threadsafe(self.note_confirm, t.confirm)
            if env.bodies and env.bodies[0]:
                self.service.call_soon_threadsafe(self.apply, t.offset, env.bodies[0], t.segment_bytes, t.epoch,
                                                  t.epoch_start)
        return got

    # ---- service thread -------------------------------------------------------------

    def handshake(self, master_epochs: list, master_end: int) -> None:
        """--auto-failover: cut this log to the history it shares with the master, then stream."""
        if self._stop.is_set():
            return
        store, file = self.store, self.terms.epochs
        end = store.max_phys_offset
        point = epochs.truncate_point(file.entries, end, master_epochs, master_end)
        if point < end:
            log.warning("handshake with %s: epochs %s end %d here, %s end %d there: cutting to %d", self.target,
                        file.entries, end, master_epochs, master_end, point)
            replica_append.truncate(store, point)
            self.counters["truncated_bytes"] += end - point
            n = ha_master.clamp_offsets(self.metadata, store)
            if n:
                log.warning("%d consumer offsets were past their queue's end after the cut: moved back to it", n)
        # also when nothing is cut: an epoch this broker led without writing a byte is not the
        # master's, and the bytes that follow come labelled with the master's epochs
        file.truncate(point)
        self.acked = store.max_phys_offset
        self.handshaken = True
        self.state = f"replicating from {self.target} (epoch {self.terms.epoch})"
        self._reset = True
        self._wake()

    def apply(self, offset: int, data: bytes, segment_bytes: int, epoch: int = 0, epoch_start: int = 0) -> None:
        store = self.store
        if self._stop.is_set():
            return  # posted before a role change stopped this part: its master may be a deposed one
        if self.paused:
            self.dropped_chunks += 1  # asked again from the last ack once the disk has room
            return
        if segment_bytes != store.segment_bytes:
            self.error = (f"master segments are {segment_bytes} bytes, this slave's {store.segment_bytes}: "
                          f"start the slave with --segment-bytes {segment_bytes}")
            log.error("%s", self.error)
            return
        if offset < store.max_phys_offset:
            self._reset = True  # a resend after a reconnect: we have it already
            self._wake()
            return
        if self.terms is not None and epoch > self.terms.epochs.epoch and offset == store.max_phys_offset:
            self.terms.epochs.append(epoch, epoch_start)  # before its first byte is written here
        try:
            end, touched = replica_append.append(store, offset, data, self.replica)
        except replica_append.DiskRefused as exc:
            self._pause(offset, str(exc))
            return
        except ValueError as exc:
            # once per run of refusals: a window of chunks in flight is refused the same way
            (log.debug if self.error else log.warning)("replicated chunk at %d refused: %s", offset, exc)
            self.error = str(exc)
            # ask again from where this log really ends (an ack sent earlier may name more)
            self.acked = min(store.max_phys_offset, store.commit_log.write_end)
            self._reset = True
            self._wake()
            return
        if self.resuming:
            self.resuming = False
            log.warning("replication resumed at offset %d after %.1f s paused by the disk", offset,
                        time.monotonic() - self.paused_at)
            self.backoff_s = RETRY_MIN_S
        self.error = ""
        self.acked = end
        self._wake()
        self.counters["replicated_bytes"] += len(data)
        unknown = False
        for topic, qid in touched:
            if topic in self.topics:
                self.notify(topic, qid)
            else:
                unknown = True
        if unknown and not self._sync_soon:
            self._sync_soon = True
            self.service.call_later(0.2, self.sync_metadata)

    def note_confirm(self, confirm: int) -> None:
        """--auto-failover: the master's confirm offset; reads here go up to it (visibility.py)."""
        if not self._stop.is_set() and self.handshaken:
            self.terms.follow_confirm(confirm)

    def _pause(self, offset: int, why: str) -> None:
        """The disk refused a chunk (nothing of it kept): stop writing and asking, retry with backoff."""
        now = time.monotonic()
        if self.resuming:  # the retry found no room after all: the same pause, a longer wait
            self.backoff_s = min(self.backoff_s * 2, RETRY_MAX_S)
            log.debug("replicated bytes at %d still refused: %s", offset, why)
        else:
            self.disk_pauses += 1
            self.paused_at = now
            self.backoff_s = RETRY_MIN_S
            log.warning("replication paused at offset %d: %s; nothing more is acked or asked for; the disk is "
                        "checked again after %.1f s, backing off to %.0f s", offset, why, self.backoff_s, RETRY_MAX_S)
        self.paused, self.resuming, self.error = why, False, why
        self.retry_at = now + self.backoff_s
        self.service.call_later(self.backoff_s, self._retry)

    def _retry(self) -> None:
        """A paused slave's disk check: room -> ask the master to resend from the last ack."""
        if not self.paused or self._stop.is_set():
            return
        disk = self.store.disk
        disk.check()
        if disk.full:
            self.paused = self.error = f"replicated bytes not stored: {disk.remark}"
            self.backoff_s = min(self.backoff_s * 2, RETRY_MAX_S)
            self.retry_at = time.monotonic() + self.backoff_s
            self.service.call_later(self.backoff_s, self._retry)
            return
        self.paused, self.resuming = "", True
        self._reset = True  # resend from self.acked: the chunks dropped meanwhile come again
        self._wake()

    def _sync_tick(self) -> None:
        if self._stop.is_set():
            return
        if not self.target or not self.master_addr:
            self.register_all()  # the replies name the master once it registered
        elif time.monotonic() - self.synced_at >= self.sync_s:
            self.sync_metadata()
        self.service.call_later(min(1.0, self.sync_s), self._sync_tick)

    def local_offsets(self) -> list[tuple]:
        """Offsets this slave advanced past the master's last known value: (group, topic, queue, offset)."""
        snap = self.snapshot
        return [(g, t, q, o) for (g, t, q), o in list(self.metadata.offsets.items())
                if o > snap.get((g, t, q), -1)]

    def sync_metadata(self) -> None:
        self._sync_soon = False
        if self._sync_busy or not self.master_addr:
            return
        self._sync_busy = True
        self.synced_at = time.monotonic()
        soon = self.service.call_soon_threadsafe
        try:
            self.transport.send(self.master_addr, rq.HaSyncMetadata(offsets=self.local_offsets()), None,
                                (), lambda r: soon(self._synced, r), timeout=5.0)
        except QuiverError as exc:
            self._sync_busy = False
            log.debug("metadata sync not sent: %s", exc)

    def _synced(self, result) -> None:
        self._sync_busy = False
        if isinstance(result, Exception) or result.code != ResponseCode.SUCCESS:
            log.debug("metadata sync with %s failed: %s", self.master_addr,
                      result if isinstance(result, Exception) else result.remark)
            return
        try:
            reply = rq.HaSyncMetadataReply.decode(result.ext)
        except QuiverError as exc:
            log.warning("metadata sync reply from %s ignored: %s", self.master_addr, exc.remark)
            return
        meta = self.metadata
        changed = self.topics.mirror(reply.topics)  # re-registers when it changed
        for name, g in reply.groups.items():
            mine = meta.groups.get(name)
            if mine is None or mine.get("retry_max_times") != g.retry_max_times:
                meta.put_group(name, g.retry_max_times)
        snap = {}
        for g, t, q, o in reply.offsets:
            key = (g, t, q)
            snap[key] = o
            mine = meta.get_offset(g, t, q)
            if mine is None or mine == self.snapshot.get(key) or mine < o:
                if mine != o:
                    meta.set_offset(g, t, q, o)
        self.snapshot = snap
        if reply.acl is not None and self.acl is not None:
            self.acl.replace({"users": reply.acl.users, "rules": reply.acl.rules})
        if changed:
            for (topic, qid) in list(self.store.cqs):
                self.notify(topic, qid)

    # ---- requests ---------------------------------------------------------------------

    def handlers(self) -> dict:
        return {RequestCode.HA_SLAVE_OFFSETS: self.slave_offsets, RequestCode.HA_SYNC_METADATA: _is_a_slave}

    def slave_offsets(self, req) -> None:
        req.reply(ResponseCode.SUCCESS, "", rq.HaSlaveOffsetsReply(offsets=[tuple(row) for row in self.local_offsets()]))

    def status(self) -> dict:
        end = self.store.max_phys_offset
        now = time.monotonic()
        state = self.state
        if self.paused:
            state = (f"paused (disk) for {now - self.paused_at:.1f} s, "
                     f"next check in {max(0.0, self.retry_at - now):.1f} s")
        elif self.resuming:
            state = "resuming: resend asked from the last ack"
        return {"master_ha": self.target, "master_addr": self.master_addr, "state": state, "error": self.error,
                "paused": bool(self.paused), "disk_pauses": self.disk_pauses, "dropped_chunks": self.dropped_chunks,
                "retry_backoff_s": self.backoff_s if self.paused else 0.0,
                "max_offset": end, "master_max_offset": self.master_max, "stale_frames": self.stale_frames,
                "lag_bytes": max(0, self.master_max - end),
                "last_frame_ms_ago": round((now - self.last_frame) * 1000) if self.last_frame else None,
                **self.replica.stats()}


def sender_epoch(t) -> int:
    """The epoch the master that sent HaTransfer `t` leads (a master of before "mep": the frame's)."""
    return t.master_epoch or t.epoch


def _is_a_slave(req) -> None:
    req.reply(ResponseCode.SERVICE_NOT_AVAILABLE, "this broker is a slave; sync from the master")
