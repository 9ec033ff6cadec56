"""MessageStore: the broker's storage façade over CommitLog, ConsumeQueues and index.

Owns the put path (disk guard, append + inline dispatch, rollback), the flush
thread and the store's lifecycle; the pull path (queue_reads) and key/time
lookups (lookups) are behind its methods. Does not own any disk format
(commit_log, consume_queue, index_file, checkpoint), restart repair
(recovery), deletion policy (retention) nor the disk-space rule (disk_space)::

    data_dir/
      commitlog/<20-digit offset>            records (commit_log.py)
      consumequeue/<topic>/<qid>/<offset>    20-byte entries (consume_queue.py)
      index/<yyyyMMddHHmmssSSS>              key hash index (index_file.py)
      checkpoint                             flushed / dispatched offsets (checkpoint.py)
      abort                                  exists while open: next open is a crash recovery

Queue directories are built by consume_queue.queue_dir only (topic name
checked, path confined under consumequeue/).

Dispatch (ConsumeQueue + index entries) runs inline in put_batch rather than on
a reput thread: it is the same Python work either way and doing it here needs
no hand-off. Recovery feeds decoded records through the same `_dispatch`.

A put is all or nothing: the disk guard refuses it before any write when the
partition is past its limit (DISK_FULL); a write that fails anyway (ENOSPC,
EIO ...) cuts back the put's ConsumeQueue entries and CommitLog bytes under the
flush lock (WRITE_FAILED), so nothing later is written after torn bytes and no
flush reports them; `max_phys_offset` (what replication streams) only counts
whole puts.

Threading: every public method but `request_flush` runs on the broker's main
thread. The flush thread shares only file descriptors: it holds `_flush_lock`
while it syncs (the CommitLog; every logic_flush_interval_ms the ConsumeQueues,
index and checkpoint, serving a SYNC flush asked meanwhile between them), and
anything that closes a descriptor (retention, delete_topic, close) takes that
lock first. With SYNC flush it reports the flushed offset (`on_flushed`) before
the ConsumeQueue/index syncs, so those never hold a reply back.
"""

import collections
import enum
import logging
import os
import shutil
import threading
import time
import zlib
from dataclasses import dataclass
from typing import Callable, Sequence

from quiver.runtime.histogram import Histogram
from quiver.wire import record
from quiver.errors import QuiverError
from quiver.wire.properties import TIMER_DELIVER_MS, tag_hash
from quiver.wire.speedups import fast
from quiver.wire.names import SCHEDULE_TOPIC, TIMER_TOPIC

from . import lookups, queue_reads, recovery, replica_append, retention, visibility
from .checkpoint import Checkpoint, CheckpointFile
from .commit_log import CommitLog
from .config import DEFAULT_DELAY_LEVELS_MS
from .consume_queue import ENTRY_SIZE, ConsumeQueue, load_queues, pack_entries, queue_dir
from .disk_space import DiskSpace
from .index_file import HASH_MASK, IndexService, prefix_crc
from .queue_reads import GetResult, GetStatus

__all__ = ["GetResult", "GetStatus", "MessageStore", "PutResult", "PutStatus"]  # the statuses callers map

log = logging.getLogger(__name__)


class PutStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    DISK_FULL = "DISK_FULL"        # refused before writing: the disk guard (disk_space.py)
    WRITE_FAILED = "WRITE_FAILED"  # a write failed (ENOSPC, EIO ...); everything of the put rolled back


@dataclass(slots=True)
class PutResult:
    status: PutStatus
    first_queue_offset: int
    phys_offsets: list[int]
    end_offset: int
    store_ts: int
    remark: str = ""   # why a put was refused (disk usage and path, or the write error)


class MessageStore:
    def __init__(self, data_dir: str, *, segment_bytes: int = 1 << 30,
                 cq_entries_per_file: int = 300_000, index_slots: int = 5_000_000,
                 index_entries: int = 20_000_000, flush_sync: bool = False,
                 flush_interval_ms: int = 500, store_host: bytes = b"\x7f\0\0\x01\0\0\x2a\x8f",
                 delay_levels_ms: Sequence[int] = DEFAULT_DELAY_LEVELS_MS, file_reserved_hours: float = 72,
                 delete_when_hours=(4,), disk_max_used_ratio: float = 0.75,
                 disk_clean_forcibly_ratio: float = 0.85, disk: DiskSpace | None = None,
                 logic_flush_interval_ms: int = 1000, prop_crc: bool = False,
                 on_flushed: Callable[[int], None] | None = None):
        """`disk`: the write guard (default: 90 % of the data dir's partition, resuming below
        `disk_clean_forcibly_ratio`); `logic_flush_interval_ms`: ConsumeQueue/index fsync and
        checkpoint period (RocketMQ flushIntervalConsumeQueue); `prop_crc`: end every record
        with RocketMQ's __CRC32# property, a CRC of all its bytes (enabledAppendPropCRC)."""
        self.data_dir = data_dir
        self.segment_bytes = segment_bytes
        self.cq_entries_per_file = cq_entries_per_file
        self.flush_sync = flush_sync
        self.flush_interval_ms = flush_interval_ms
        self.store_host = store_host
        self.delay_levels_ms = list(delay_levels_ms)
        self.file_reserved_hours = file_reserved_hours
        self.delete_when_hours = tuple(delete_when_hours)
        self.disk_max_used_ratio = disk_max_used_ratio
        self.disk_clean_forcibly_ratio = disk_clean_forcibly_ratio
        self.disk = disk if disk is not None else DiskSpace(data_dir, resume_ratio=disk_clean_forcibly_ratio)
        self.logic_flush_interval_s = logic_flush_interval_ms / 1000
        self.prop_crc = prop_crc
        self.on_flushed = on_flushed
        self.commit_log = CommitLog(os.path.join(data_dir, "commitlog"), segment_bytes)
        self.index = IndexService(os.path.join(data_dir, "index"), index_slots, index_entries)
        self.cqs: dict[tuple[str, int], ConsumeQueue] = {}
        self._cq_dir = os.path.join(data_dir, "consumequeue")
        self._abort_path = os.path.join(data_dir, "abort")
        self._cp = Checkpoint()
        self._cp_file: CheckpointFile | None = None
        self._flush_lock = threading.Lock()   # held by a whole flush pass
        self._files_lock = threading.Lock()   # guards self.cqs membership
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_logic_flush = 0.0
        self._dispatched = 0   # CommitLog end whose CQ/index entries are written
        self._counts = collections.Counter()
        self.flush_seconds = Histogram()  # CommitLog fsync time, on the flush thread: /metrics
        self.bad_logged: set[int] = set()  # CommitLog offsets of corrupt records already logged
        self._logic_error = ""  # the last ConsumeQueue/index/checkpoint sync error, "" once one succeeds
        # --auto-failover: what every SyncStateSet member holds (visibility.py); None: no such bound
        self.replica_confirm: int | None = None
        self.unconfirmed: collections.deque[tuple[int, str, int]] = collections.deque()
        self.on_confirmed: Callable[[str, int], None] | None = None  # a queue's batches became visible

    # ---- lifecycle -------------------------------------------------------------

    def open(self) -> None:
        os.makedirs(self._cq_dir, exist_ok=True)
        self.commit_log.load()
        self._load_cqs()
        self.index.load()
        ckpt_path = os.path.join(self.data_dir, "checkpoint")
        recovery.recover(self, ckpt_path, abnormal=os.path.exists(self._abort_path))
        open(self._abort_path, "wb").close()
        self._cp_file = CheckpointFile(ckpt_path)
        self.flush_step(force=True)
        self._stop.clear()
        self._thread = threading.Thread(target=self._flush_loop, name="store-flush", daemon=True)
        self._thread.start()

    def close(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._wake.set()
            self._thread.join()
            self._thread = None
        if self._cp_file is None:
            return
        try:
            self.flush_step(force=True)
            clean = True
        except OSError as exc:  # a failed fsync: keep `abort`, so the next open recovers as after a crash
            log.error("final flush failed, next start recovers as after a crash: %s", exc)
            clean = False
        with self._flush_lock:
            for cq in self.cqs.values():
                cq.close()
            self.cqs.clear()
            self.index.close()
            self.commit_log.close()
            self._cp_file.close()
            self._cp_file = None
        if clean:
            os.unlink(self._abort_path)

    def _load_cqs(self) -> None:
        queues, skipped = load_queues(self._cq_dir, self.cq_entries_per_file)
        self.cqs.update(queues)
        self._counts["skipped_queue_dirs"] += skipped

    def _cq(self, topic: str, queue_id: int) -> ConsumeQueue:
        """The queue, created on first use; raises MessageIllegalError / UnsafePathError (before
        anything is written) for a name that cannot be a directory under consumequeue/."""
        cq = self.cqs.get((topic, queue_id))
        if cq is None:
            cq = ConsumeQueue(queue_dir(self._cq_dir, topic, queue_id), topic, queue_id,
                              self.cq_entries_per_file)
            with self._files_lock:
                self.cqs[(topic, queue_id)] = cq
        return cq

    # ---- put ---------------------------------------------------------------------

    def put_batch(self, topic: str, queue_id: int, bodies: list[bytes], props: list[str],
                  flags: list[int], sys_flag: int, born_ts: int, born_host: bytes,
                  reconsume: int = 0, prepared_offset: int = 0,
                  body_crcs: list[int] | None = None) -> PutResult:
        """Append one batch to one queue, all or nothing.

        The disk guard is asked first (DISK_FULL, nothing written). Then the
        records, their ConsumeQueue entries and index keys are written; if any
        write fails, everything of this put is cut back before returning
        WRITE_FAILED, so no later put builds on torn bytes or unwritten entries."""
        cl = self.commit_log
        tx = sys_flag & record.TX_MASK
        in_cq = tx == record.TX_NOT or tx == record.TX_COMMIT
        # Half and rollback records take no queue offset (RocketMQ writes 0).
        cq = self._cq(topic, queue_id) if in_cq else None
        topic_b = topic.encode()
        pbs = [p.encode() for p in props]
        sys_flag &= ~record.SYSFLAG_PROP_CRC  # the store's to set: a re-put record may carry it
        if self.prop_crc:
            pbs = [record.strip_prop_crc(p) for p in pbs]
        fixed = record.record_size(0, len(topic_b), 0, self.prop_crc)
        nbytes = fixed * len(bodies) + sum(map(len, bodies)) + sum(map(len, pbs))
        why = self.disk.refusal(nbytes + ENTRY_SIZE * len(bodies))
        if why is not None:
            return PutResult(PutStatus.DISK_FULL, -1, [], cl.write_end, 0, why)
        qoff = cq.max_offset if cq is not None else 0
        store_ts = int(time.time() * 1000)
        start = phys = cl.write_end
        try:
            if nbytes + 8 <= cl.space_left():
                # the common case: the whole batch fits the current segment, encoded list-wise
                head = record.RunHead(topic=topic_b, queue_id=queue_id, first_qoff=qoff if in_cq else None,
                                      phys=phys, sys_flag=sys_flag, born_ts=born_ts, born_host=born_host,
                                      store_ts=store_ts, store_host=self.store_host, reconsume=reconsume,
                                      prepared_offset=prepared_offset)
                data, phys_offsets, sizes = record.encode_run(head, bodies, flags, pbs, body_crcs, self.prop_crc)
                cl.append(data)
                end = phys + len(data)
            else:
                phys_offsets, sizes, end = self._append_rolling(
                    bodies, topic_b, queue_id, flags, qoff if in_cq else None, sys_flag, born_ts, born_host,
                    store_ts, reconsume, prepared_offset, pbs, body_crcs)
            self._dispatch(topic, queue_id, tx, store_ts, phys_offsets, sizes, props)
        except Exception as exc:
            failed_write = isinstance(exc, OSError)
            if not failed_write and cl.write_end == start and (cq is None or cq.max_offset == qoff):
                raise  # refused before writing (a record larger than a segment ...)
            remark = self._undo_put(start, cq, qoff, exc, f"put of {len(bodies)} to {topic}/{queue_id}")
            if not failed_write:
                raise
            return PutResult(PutStatus.WRITE_FAILED, -1, [], start, 0, remark)
        self._dispatched = end
        if in_cq and (self.flush_sync or self.replica_confirm is not None):
            visibility.note(self, cq, end, qoff)
        self._counts["put_msgs"] += len(bodies)
        self._counts["put_batches"] += 1
        return PutResult(PutStatus.PUT_OK, qoff, phys_offsets, end, store_ts)

    def _append_rolling(self, bodies, topic_b, queue_id, flags, qoff, sys_flag, born_ts, born_host, store_ts,
                        reconsume, prepared_offset, pbs, body_crcs) -> tuple[list[int], list[int], int]:
        """A batch that does not fit the current segment: a BLANK and a roll between segments.
        Every record is encoded (and checked to fit a segment) before anything is written."""
        cl = self.commit_log
        seg_bytes = self.segment_bytes
        fixed = record.record_size(0, len(topic_b), 0, self.prop_crc)
        phys = cl.write_end
        space = cl.space_left()
        chunks: list[list[bytes]] = [[]]   # one list per segment touched; a roll between each
        phys_offsets: list[int] = []
        sizes: list[int] = []
        for i, body in enumerate(bodies):
            pb = pbs[i]
            size = fixed + len(body) + len(pb)
            if size + 8 > space:
                if size + 8 > seg_bytes:
                    raise ValueError(f"record of {size} bytes does not fit a segment")
                if space:
                    chunks[-1].append(record.blank(space))
                    phys += space
                chunks.append([])
                space = seg_bytes
            chunks[-1].append(record.encode(
                body, topic=topic_b, props=pb, queue_id=queue_id, flag=flags[i],
                queue_offset=0 if qoff is None else qoff + i, phys_offset=phys, sys_flag=sys_flag, born_ts=born_ts,
                born_host=born_host, store_ts=store_ts, store_host=self.store_host, reconsume=reconsume,
                prepared_offset=prepared_offset, body_crc=body_crcs[i] if body_crcs else None, prop_crc=self.prop_crc))
            phys_offsets.append(phys)
            sizes.append(size)
            phys += size
            space -= size
        for n, parts in enumerate(chunks):
            if n:
                cl.roll()
            if parts:
                cl.append(b"".join(parts))
        return phys_offsets, sizes, phys

    def _undo_put(self, start: int, cq: ConsumeQueue | None, qoff: int, exc: Exception, what: str) -> str:
        """Cut back what a failed put wrote: its ConsumeQueue entries, then its CommitLog bytes
        (new segments removed). Under the flush lock, so no flush pass reports the cut bytes
        flushed. Index entries it left point at cut records: every key is rechecked on the
        record. Returns the refusal remark."""
        with self._flush_lock:
            if cq is not None and cq.max_offset > qoff:
                cq.truncate_to(qoff)
            self.commit_log.truncate(start)
            visibility.cut(self, start)
        self._counts["puts_rolled_back"] += 1
        log.error("%s failed and was rolled back to CommitLog offset %d: %r", what, start, exc)
        if isinstance(exc, OSError):
            return self.disk.write_failed("a put", exc)
        return f"{what} failed: {exc!r}"

    def _dispatch(self, topic: str, queue_id: int, tx: int, store_ts: int,
                  phys_offsets: list[int], sizes: list[int], props: list[str],
                  to_cq: bool = True, to_index: bool = True) -> None:
        """ConsumeQueue and index entries for records of one queue (put and recovery).

        The index is given disk for its entries first and written last: the only
        write that can fail after the ConsumeQueue append is a rare second index
        file (see IndexService.put_many)."""
        to_cq = to_cq and (tx == record.TX_NOT or tx == record.TX_COMMIT)
        to_index = to_index and tx != record.TX_ROLLBACK
        want_tags = to_cq and topic != SCHEDULE_TOPIC and topic != TIMER_TOPIC
        codes, keyed = index_run(phys_offsets, props, prefix_crc(topic), want_tags, to_index)
        if keyed:
            self.index.reserve(len(keyed))
        if to_cq:
            if topic == SCHEDULE_TOPIC:
                levels = self.delay_levels_ms
                codes = [store_ts + levels[min(max(queue_id, 0), len(levels) - 1)]] * len(sizes)
            elif topic == TIMER_TOPIC:
                codes = [_int(record.get_property(p, TIMER_DELIVER_MS)) for p in props]
            self._cq(topic, queue_id).append(pack_entries(phys_offsets, sizes, codes))
        if keyed:
            self.index.put_many(keyed, store_ts)
            self.index.sync_header()

    # ---- replication (slave) ----------------------------------------------------

    def append_replicated(self, offset: int, data) -> tuple[int, set]:
        """A slave's append of its master's CommitLog bytes (replica_append.py)."""
        return replica_append.append(self, offset, data)

    # ---- flush -------------------------------------------------------------------

    @property
    def confirm_offset(self) -> int:
        """What consumers may read up to: flushed (SYNC flush) or written, and held by the in-sync replicas."""
        cl = self.commit_log
        local = cl.flushed if self.flush_sync else cl.write_end
        rc = self.replica_confirm
        return local if rc is None or rc > local else rc

    def set_replica_confirm(self, offset: int) -> None:
        """The replication role's bound (visibility.py); held pulls and pops it uncovers are woken."""
        if self.replica_confirm is None:
            visibility.seed(self, offset)
        self.replica_confirm = offset
        visibility.wake(self)

    def wake_confirmed(self) -> None:
        """The flush moved (service thread): wake what the replica bound had already confirmed."""
        if self.replica_confirm is not None:
            visibility.wake(self)

    @property
    def flushed_offset(self) -> int:
        return self.commit_log.flushed

    @property
    def max_phys_offset(self) -> int:
        """End of the CommitLog's whole puts: what replication may stream (a put still being
        written, which a failed write may cut back, is not included)."""
        return self._dispatched

    @property
    def min_phys_offset(self) -> int:
        return self.commit_log.min_offset

    def request_flush(self, offset: int) -> None:
        if not self._wake.is_set():  # set() takes the Event's lock; once per flush pass is enough
            self._wake.set()

    def flush_step(self, force: bool = False) -> int:
        """One flush pass: CommitLog always; ConsumeQueues, index and checkpoint every
        logic_flush_interval_ms (or when forced). Returns the flushed CommitLog offset.

        A CommitLog sync error is raised (the flush loop then refuses writes until a
        restart, CommitLog.flush says why); a ConsumeQueue/index/checkpoint error is
        logged and the old checkpoint kept — it is still true, only older — and tried
        next pass."""
        flushed = self._flush_commit_log()
        self._flush_logic_if_due(force)
        return flushed

    def _flush_commit_log(self) -> int:
        with self._flush_lock:
            return self._sync_commit_log()

    def _sync_commit_log(self) -> int:
        """fdatasync the CommitLog (the caller holds the flush lock); its flush latency observed."""
        before, began = self.commit_log.flushed, time.monotonic()
        flushed = self.commit_log.flush()
        if flushed > before:  # a pass with nothing new to sync is no flush latency
            self.flush_seconds.observe(time.monotonic() - began)
        return flushed

    def _flush_logic_if_due(self, force: bool) -> None:
        now = time.monotonic()
        if not (force or now - self._last_logic_flush >= self.logic_flush_interval_s):
            return
        with self._flush_lock:
            if self._cp_file is None:
                return
            self._last_logic_flush = now
            # a failed put may have cut the log since the CommitLog sync: read both under the lock
            self._flush_logic(self.commit_log.flushed, self._dispatched)

    def _flush_logic(self, flushed: int, dispatched: int) -> None:
        with self._files_lock:
            cqs = list(self.cqs.values())
        try:
            for cq in cqs:
                cq.flush()
                self._sync_flush_between()
            self.index.flush()
            self._sync_flush_between()
            ts = int(time.time() * 1000)
            cp = Checkpoint(ts, ts, ts, flushed, min(dispatched, flushed))
            self._cp_file.write(cp)
        except OSError as exc:
            self._counts["checkpoint_errors"] += 1
            if not self._logic_error:
                log.error("ConsumeQueue/index sync or checkpoint failed, old checkpoint kept: %s", exc)
            self._logic_error = str(exc)
            return
        self._cp = cp
        if self._logic_error:
            log.warning("checkpoint written again (last error: %s)", self._logic_error)
            self._logic_error = ""

    def _sync_flush_between(self) -> None:
        """A SYNC flush asked for while the ConsumeQueues and index are synced (tens of ms
        with many queues) is served between two of their syncs, not after all of them."""
        if not self._wake.is_set() or self._stop.is_set():
            return
        self._wake.clear()
        before = self.commit_log.flushed
        try:
            flushed = self._sync_commit_log()
        except OSError:  # sticky (CommitLog.flush): the loop's own pass raises it again and stops writes
            return
        if self.on_flushed is not None and flushed > before:
            self.on_flushed(flushed)

    def _flush_loop(self) -> None:
        interval = self.flush_interval_ms / 1000
        while not self._stop.is_set():
            if self.flush_sync:
                woke = self._wake.wait(interval)
                self._wake.clear()
            else:
                woke = False
                self._stop.wait(interval)
            if self._stop.is_set():
                break
            try:
                before = self.commit_log.flushed
                flushed = self._flush_commit_log()
                if self.on_flushed is not None and (woke or flushed > before):
                    self.on_flushed(flushed)  # before the ConsumeQueue/index syncs: they must not delay replies
                self._flush_logic_if_due(False)
            except OSError as exc:  # nothing newer is acknowledged, nothing more is taken
                self._counts["flush_errors"] += 1
                self.disk.failed_for_good("a CommitLog fsync", exc)
            except Exception:  # the loop must outlive a bad pass; it is logged
                log.exception("flush pass failed")

    # ---- get ---------------------------------------------------------------------

    def visible_max(self, cq: ConsumeQueue) -> int:
        """Queue max offset consumers may see: entries whose record is confirmed."""
        return visibility.visible_max(self, cq)

    def max_offset(self, topic: str, queue_id: int) -> int:
        cq = self.cqs.get((topic, queue_id))
        return self.visible_max(cq) if cq else 0

    def queue_end(self, topic: str, queue_id: int) -> int:
        """The queue's max offset as stored, confirmed or not (max_offset is what consumers see)."""
        cq = self.cqs.get((topic, queue_id))
        return cq.max_offset if cq else 0

    def min_offset(self, topic: str, queue_id: int) -> int:
        cq = self.cqs.get((topic, queue_id))
        return min(cq.min_offset, cq.max_offset) if cq else 0

    def get_messages(self, topic: str, queue_id: int, offset: int, max_msgs: int = 32,
                     tag_hashes: set[int] | None = None, max_bytes: int = 4 << 20) -> GetResult:
        """Up to `max_msgs` records of a queue from `offset` (queue_reads.py: every one checked)."""
        return queue_reads.get_messages(self, topic, queue_id, offset, max_msgs, tag_hashes, max_bytes)

    # ---- lookups (lookups.py) ------------------------------------------------------

    def lookup(self, phys_offset: int) -> record.Record | None:
        return lookups.lookup(self.commit_log, phys_offset)

    def query_by_key(self, topic: str, key: str, max_num: int = 32, begin_ms: int = 0,
                     end_ms: int = 2**62) -> list[record.Record]:
        return lookups.query_by_key(self.commit_log, self.index, topic, key, max_num, begin_ms, end_ms)

    def search_offset_by_time(self, topic: str, queue_id: int, ts_ms: int) -> int:
        cq = self.cqs.get((topic, queue_id))
        return 0 if cq is None else lookups.search_offset_by_time(self.commit_log, cq, self.visible_max(cq), ts_ms)

    # ---- topics, retention, stats ------------------------------------------------

    def delete_topic(self, topic: str) -> None:
        """Close the topic's queues and delete consumequeue/<topic>; nothing is deleted for a
        name that is not a valid topic or whose directory resolves outside consumequeue/."""
        try:
            tdir = queue_dir(self._cq_dir, topic)
        except QuiverError as exc:
            log.warning("delete of topic %s: no directory deleted (%s)", ascii(topic), exc.remark)
            tdir = None
        with self._flush_lock, self._files_lock:
            for key in [k for k in self.cqs if k[0] == topic]:
                self.cqs.pop(key).close()
        if tdir is not None:
            shutil.rmtree(tdir, ignore_errors=True)
        # Move the checkpoint past this topic's records so recovery does not revive it.
        self.flush_step(force=True)

    def topics_on_disk(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for topic, qid in sorted(self.cqs):
            out.setdefault(topic, []).append(qid)
        return out

    def clean_expired(self, now_ms: int | None = None, force: bool = False) -> int:
        return retention.clean_expired(self, now_ms, force)

    @property
    def disk_full(self) -> bool:
        return self.disk.full

    def disk_ratio(self) -> float:
        """Used share of the data dir's partition now (retention; refreshes the disk guard)."""
        self.disk.check()
        return self.disk.ratio

    def stats(self) -> dict:
        cl = self.commit_log
        c = self._counts
        return {
            "put_msgs": c["put_msgs"], "put_batches": c["put_batches"],
            "get_calls": c["get_calls"], "get_msgs": c["get_msgs"],
            "min_phys_offset": cl.min_offset, "max_phys_offset": cl.write_end,
            "flushed_offset": cl.flushed, "confirm_offset": self.confirm_offset,
            "replica_confirm": self.replica_confirm,
            "segments": len(cl.segments), "queues": len(self.cqs),
            "index_files": len(self.index.files), **self.disk.stats(),
            "replicated_bytes": c["replicated_bytes"], "skipped_queue_dirs": c["skipped_queue_dirs"],
            "corrupt_records_skipped": c["corrupt_records_skipped"], "puts_rolled_back": c["puts_rolled_back"],
            "flush_errors": c["flush_errors"], "checkpoint_errors": c["checkpoint_errors"],
            "recovery_damaged_records": c["recovery_damaged_records"],
        }


@fast
def index_run(phys_offsets: list[int], props: list[str], prefix: int, want_tags: bool,
              to_index: bool) -> tuple[list[int], list[tuple[int, int]]]:
    """(tag codes, [(key hash, phys offset)]) of a run of records: their ConsumeQueue tag
    codes (when `want_tags`) and IndexFile keys, UNIQ_KEY then KEYS (when `to_index`).
    `prefix` is index_file.prefix_crc of the topic. Per message on the put path
    (compiled twin: quiver.wire.speedups)."""
    codes: list[int] = []
    keyed: list[tuple[int, int]] = []
    crc32, fields = zlib.crc32, record.index_fields
    for phys, p in zip(phys_offsets, props):
        tag, uniq, keys = fields(p)
        if want_tags:
            codes.append(tag_hash(tag) if tag is not None else 0)
        if to_index:
            if uniq is not None:
                keyed.append((crc32(uniq.encode(), prefix) & HASH_MASK, phys))
            keyed.extend((crc32(k.encode(), prefix) & HASH_MASK, phys) for k in keys)
    return codes, keyed


def _int(s: str | None) -> int:
    try:
        return int(s) if s else 0
    except ValueError:
        return 0
