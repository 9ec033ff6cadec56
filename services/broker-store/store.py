"""MessageStore: the broker's storage façade over CommitLog, ConsumeQueues and index.

Owns the put path (disk guard, append, rollback) and the store's lifecycle; the
pull path (queue_reads), key/time lookups (lookups) and a slave's append
(replica_append) are behind its methods. Does not own any disk format
(commit_log, consume_queue, index_file, checkpoint), the entries a record gets
(queue_entries), the flush thread (flushing), restart repair (recovery),
deletion policy (retention) nor the disk-space rule (disk_space)::

    data_dir/
      commitlog/<20-digit offset>            records (commit_log.py)
      consumequeue/<topic>/<qid>/<offset>    20-byte entries (consume_queue.py)
      index/<yyyyMMddHHmmssSSS>              key hash index (index_file.py)
      checkpoint                             flushed / dispatched offsets (checkpoint.py)
      compaction/<topic>/<qid>/compacted     compacted topics' latest records (compacted_log.py)
      abort                                  exists while open: next open is a crash recovery

Queue directories are built by consume_queue.queue_dir only (topic name
checked, path confined under consumequeue/).

Dispatch (ConsumeQueue + index entries) runs inline in put_batch rather than on
a reput thread: it is the same Python work either way and doing it here needs
no hand-off. Recovery and a slave's append feed records through the same
`dispatch`; which records get a queue entry is queue_entries'.

A put is all or nothing: the disk guard refuses it before any write when the
partition is past its limit (DISK_FULL); a write that fails anyway (ENOSPC,
EIO ...) cuts back the put's ConsumeQueue entries and CommitLog bytes under the
flush lock (`roll_back`, WRITE_FAILED), so nothing later is written after torn
bytes and no flush reports them; `max_phys_offset` (what replication streams)
only counts whole puts.

Threading: every public method but `request_flush` runs on the broker's main
thread. The flush thread (flushing.py) shares only file descriptors; anything
that closes a descriptor or cuts a file holds `exclusive()` (its lock) first.

Its own modules (recovery, replica_append, queue_reads, retention) use its internal
API (`queue`, `roll_back`, `mark_dispatched`, `count`, `exclusive`), never its privates.
"""

import collections
import enum
import logging
import os
import shutil
import threading
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from quiver.wire import record
from quiver.errors import QuiverError

from . import appending, lookups, queue_reads, recovery, replica_append, retention, visibility
from .commit_log import CommitLog
from .compaction import Compactor
from .config import DEFAULT_DELAY_LEVELS_MS
from .consume_queue import ENTRY_SIZE, ConsumeQueue, load_queues, queue_dir
from .disk_space import DiskSpace
from .flushing import Flusher
from .index_file import IndexService
from .queue_entries import dispatch, takes_queue_offset
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
                 delete_when_hours: Sequence[int] = (4,), disk_max_used_ratio: float = 0.75,
                 disk_clean_forcibly_ratio: float = 0.85, disk: DiskSpace | None = None,
                 logic_flush_interval_ms: int = 1000, prop_crc: bool = False,
                 on_flushed: Callable[[int], None] | None = None, delete_retention_ms: int = 86_400_000,
                 compaction_bytes_per_s: int = 0):
        """`disk`: the write guard (default: 90 % of the data dir's partition, resuming below
        `disk_clean_forcibly_ratio`); `logic_flush_interval_ms`: ConsumeQueue/index fsync and
        checkpoint period (RocketMQ flushIntervalConsumeQueue); `prop_crc`: end every record
        with RocketMQ's __CRC32# property, a CRC of all its bytes (enabledAppendPropCRC)."""
        self.data_dir = data_dir
        self.segment_bytes = segment_bytes
        self.cq_entries_per_file = cq_entries_per_file
        self.flush_sync = flush_sync
        self.store_host = store_host
        self.delay_levels_ms = list(delay_levels_ms)
        self.file_reserved_hours = file_reserved_hours
        self.delete_when_hours = tuple(delete_when_hours)
        self.disk_max_used_ratio = disk_max_used_ratio
        self.disk_clean_forcibly_ratio = disk_clean_forcibly_ratio
        self.disk: DiskSpace = disk if disk is not None else DiskSpace(data_dir,
                                                                      resume_ratio=disk_clean_forcibly_ratio)
        self.prop_crc = prop_crc
        self.commit_log: CommitLog = CommitLog(os.path.join(data_dir, "commitlog"), segment_bytes)
        self.index: IndexService = IndexService(os.path.join(data_dir, "index"), index_slots, index_entries)
        self.cqs: dict[tuple[str, int], ConsumeQueue] = {}
        self._cq_dir = os.path.join(data_dir, "consumequeue")
        self._abort_path = os.path.join(data_dir, "abort")
        self._files_lock = threading.Lock()   # guards self.cqs membership
        self._dispatched = 0   # CommitLog end whose CQ/index entries are written
        self._counts: collections.Counter = collections.Counter()
        self.flusher: Flusher = Flusher(
            self.commit_log, self.index, self._queues, lambda: self._dispatched, self.disk, self._counts,
            flush_sync=flush_sync, interval_ms=flush_interval_ms, logic_interval_ms=logic_flush_interval_ms,
            on_flushed=on_flushed)
        self.bad_logged: set[int] = set()  # CommitLog offsets of corrupt records already logged
        # --auto-failover: what every SyncStateSet member holds (visibility.py); None: no such bound
        self.replica_confirm: int | None = None
        self.unconfirmed: collections.deque[tuple[int, str, int]] = collections.deque()
        self.on_confirmed: Callable[[str, int], None] | None = None  # a queue's batches became visible
        self.tiered = None            # --tiered-store (tiered.py), set by attach_tiered before open
        self.reads = self.commit_log  # what reads go through: the CommitLog, or it and the tiered store
        self.compaction = Compactor(self, os.path.join(data_dir, "compaction"), delete_retention_ms,
                                    compaction_bytes_per_s)

    # ---- lifecycle -------------------------------------------------------------

    def open(self) -> None:
        os.makedirs(self._cq_dir, exist_ok=True)
        self.commit_log.load()
        queues, skipped = load_queues(self._cq_dir, self.cq_entries_per_file)
        self.cqs.update(queues)
        self._counts["skipped_queue_dirs"] += skipped
        self.index.load()
        ckpt_path = os.path.join(self.data_dir, "checkpoint")
        recovery.recover(self, ckpt_path, abnormal=os.path.exists(self._abort_path))
        self.compaction.load()
        open(self._abort_path, "wb").close()
        self.flusher.start(ckpt_path)
        if self.tiered is not None:
            self.tiered.start(self)

    def attach_tiered(self, tiered) -> None:
        """Copy sealed segments to an object store and read them back from it (tiered.py)."""
        from .tiered_reads import TieredLog
        tiered.load()
        self.tiered = tiered
        self.reads = TieredLog(self.commit_log, tiered)

    def close(self) -> None:
        if self.tiered is not None:
            self.tiered.stop()
        self.flusher.stop()
        if not self.flusher.is_open:
            return
        try:
            self.flush_step(force=True)
            clean = True
        except OSError as exc:  # a failed fsync: keep `abort`, so the next open recovers as after a crash
            log.error("final flush failed, next start recovers as after a crash: %s", exc)
            clean = False
        with self.flusher.lock:
            for cq in self.cqs.values():
                cq.close()
            self.cqs.clear()
            self.index.close()
            self.compaction.close()
            self.commit_log.close()
            self.flusher.close_checkpoint()
        if clean:
            os.unlink(self._abort_path)

    # ---- internal API: for recovery, replica_append, queue_reads and retention ----

    def queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        """The queue, created on first use; raises MessageIllegalError / UnsafePathError (before
        anything is written) for a name that cannot be a directory under consumequeue/."""
        cq = self.cqs.get((topic, queue_id))
        if cq is None:
            cq = ConsumeQueue(queue_dir(self._cq_dir, topic, queue_id), topic, queue_id,
                              self.cq_entries_per_file)
            with self._files_lock:
                self.cqs[(topic, queue_id)] = cq
        return cq

    def _queues(self) -> list[ConsumeQueue]:
        with self._files_lock:
            return list(self.cqs.values())

    def exclusive(self) -> threading.Lock:
        """Held (`with store.exclusive():`) while closing a descriptor or cutting a file: no flush
        pass syncs meanwhile, nor reports bytes about to be cut as flushed."""
        return self.flusher.lock

    def count(self, name: str, n: int = 1) -> None:
        """Add to one of the counters `stats` reports."""
        self._counts[name] += n

    def mark_dispatched(self, end: int) -> None:
        """Every record below CommitLog `end` has its queue and index entries (and nothing past it)."""
        self._dispatched = end

    def roll_back(self, start: int, marks: dict[tuple[str, int], int], exc: Exception, what: str) -> None:
        """Cut back what a failed write from CommitLog `start` left (a put, a replicated chunk):
        the ConsumeQueue entries past `marks` ({(topic, queue): max offset before it}), then the
        CommitLog bytes (new segments removed). Under the flush lock, so no flush pass reports
        the cut bytes flushed. Index entries it left point at cut records: every key is
        rechecked on the record."""
        with self.flusher.lock:
            for key, mark in marks.items():
                cq = self.cqs.get(key)
                if cq is not None and cq.max_offset > mark:
                    cq.truncate_to(mark)
            self.commit_log.truncate(start)
            visibility.cut(self, start)
        self._counts["puts_rolled_back"] += 1
        log.error("%s failed and was rolled back to CommitLog offset %d: %r", what, start, exc)

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
        in_cq = takes_queue_offset(sys_flag)
        cq = self.queue(topic, queue_id) if in_cq else None
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
        fitted = False
        try:
            if nbytes + 8 <= cl.space_left():
                # the common case: the whole batch fits the current segment, encoded list-wise
                head = record.RunHead(topic=topic_b, queue_id=queue_id, first_qoff=qoff if in_cq else None,
                                      phys=phys, sys_flag=sys_flag, born_ts=born_ts, born_host=born_host,
                                      store_ts=store_ts, store_host=self.store_host, reconsume=reconsume,
                                      prepared_offset=prepared_offset)
                if appending.fits(cq, topic, len(bodies)):   # records, entries and keys in one step
                    phys_offsets, sizes, end = appending.put_fitting(self, cq, head, bodies, flags, pbs, props,
                                                                     body_crcs)
                    fitted = True
                else:
                    data, phys_offsets, sizes = record.encode_run(head, bodies, flags, pbs, body_crcs,
                                                                  self.prop_crc)
                    cl.append(data)
                    end = phys + len(data)
            else:
                phys_offsets, sizes, end = self._append_rolling(
                    bodies, topic_b, queue_id, flags, qoff if in_cq else None, sys_flag, born_ts, born_host,
                    store_ts, reconsume, prepared_offset, pbs, body_crcs)
            if not fitted:
                dispatch(self, topic, queue_id, sys_flag, store_ts, phys_offsets, sizes, props)
        except Exception as exc:
            failed_write = isinstance(exc, OSError)
            if not failed_write and cl.write_end == start and (cq is None or cq.max_offset == qoff):
                raise  # refused before writing (a record larger than a segment ...)
            self.roll_back(start, {(topic, queue_id): qoff} if cq is not None else {}, exc,
                           f"put of {len(bodies)} to {topic}/{queue_id}")
            if not failed_write:
                raise
            return PutResult(PutStatus.WRITE_FAILED, -1, [], start, 0, self.disk.write_failed("a put", exc))
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

    @property
    def flush_seconds(self):
        """CommitLog fsync time, observed on the flush thread: /metrics."""
        return self.flusher.flush_seconds

    def request_flush(self, offset: int) -> None:
        self.flusher.request()

    def flush_step(self, force: bool = False) -> int:
        """One flush pass now (flushing.Flusher.step); returns the flushed CommitLog offset."""
        return self.flusher.step(force)

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
        return self.compaction.low(topic, queue_id, min(cq.min_offset, cq.max_offset)) if cq else 0

    def get_messages(self, topic: str, queue_id: int, offset: int, max_msgs: int = 32,
                     tag_hashes: set[int] | None = None, max_bytes: int = 4 << 20) -> GetResult:
        """Up to `max_msgs` records of a queue from `offset` (queue_reads.py: every one checked)."""
        return queue_reads.get_messages(self, topic, queue_id, offset, max_msgs, tag_hashes, max_bytes)

    # ---- lookups (lookups.py) ------------------------------------------------------

    def lookup(self, phys_offset: int) -> record.Record | None:
        return lookups.lookup(self.reads, phys_offset)

    def query_by_key(self, topic: str, key: str, max_num: int = 32, begin_ms: int = 0,
                     end_ms: int = 2**62) -> list[record.Record]:
        return lookups.query_by_key(self.reads, self.index, topic, key, max_num, begin_ms, end_ms)

    def search_offset_by_time(self, topic: str, queue_id: int, ts_ms: int) -> int:
        cq = self.cqs.get((topic, queue_id))
        return 0 if cq is None else lookups.search_offset_by_time(self.reads, cq, self.visible_max(cq), ts_ms)

    # ---- topics, retention, stats ------------------------------------------------

    def delete_topic(self, topic: str) -> None:
        """Close the topic's queues and delete consumequeue/<topic>; nothing is deleted for a
        name that is not a valid topic or whose directory resolves outside consumequeue/."""
        try:
            tdir = queue_dir(self._cq_dir, topic)
        except QuiverError as exc:
            log.warning("delete of topic %s: no directory deleted (%s)", ascii(topic), exc.remark)
            tdir = None
        with self.flusher.lock, self._files_lock:
            for key in [k for k in self.cqs if k[0] == topic]:
                self.cqs.pop(key).close()
        if tdir is not None:
            shutil.rmtree(tdir, ignore_errors=True)
        self.compaction.drop_topic(topic)
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
            **({"tiered": {**self.tiered.stats(), **self.reads.cache.stats()}} if self.tiered is not None else {}),
            "recovery_damaged_records": c["recovery_damaged_records"], **self.compaction.stats(),
        }
