"""MessageStore: the broker's storage façade over CommitLog, ConsumeQueues and index.

Owns the put path (append + inline dispatch), the pull path, key/time lookups,
the flush thread and the store's lifecycle. Does not own any disk format
(commit_log, consume_queue, index_file, checkpoint), restart repair
(recovery) nor deletion policy (retention)::

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

Threading: every public method but `request_flush` runs on the broker's main
thread. The flush thread shares only file descriptors: it holds `_flush_lock`
for a whole pass, and anything that closes a descriptor (retention,
delete_topic, close) takes that lock first.
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

from quiver import names, record
from quiver.errors import QuiverError
from quiver.message import TIMER_DELIVER_MS, tag_hash
from quiver.names import SCHEDULE_TOPIC, TIMER_TOPIC

from . import ha_stream, lookups, recovery, retention
from .checkpoint import Checkpoint, CheckpointFile
from .commit_log import CommitLog
from .config import DEFAULT_DELAY_LEVELS_MS
from .consume_queue import ENTRY, ENTRY_SIZE, ConsumeQueue, load_queues, queue_dir
from .index_file import HASH_MASK, IndexService, prefix_crc

log = logging.getLogger(__name__)

FILTER_SCAN_ENTRIES = 800   # ConsumeQueue entries one filtered pull may skip (16 000 bytes)
READ_GAP_BYTES = 16 << 10   # records closer than this are fetched with one pread
LOGIC_FLUSH_INTERVAL_S = 1.0  # ConsumeQueue/index fsync + checkpoint cadence


class GetStatus(enum.Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"


class PutStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    DISK_FULL = "DISK_FULL"


@dataclass(slots=True)
class PutResult:
    status: PutStatus
    first_queue_offset: int
    phys_offsets: list[int]
    end_offset: int
    store_ts: int


@dataclass(slots=True)
class GetResult:
    status: GetStatus
    next_offset: int
    min_offset: int
    max_offset: int
    data: bytes
    count: int


class MessageStore:
    def __init__(self, data_dir: str, *, segment_bytes: int = 1 << 30,
                 cq_entries_per_file: int = 300_000, index_slots: int = 5_000_000,
                 index_entries: int = 20_000_000, flush_sync: bool = False,
                 flush_interval_ms: int = 500, store_host: bytes = b"\x7f\0\0\x01\0\0\x2a\x8f",
                 delay_levels_ms: Sequence[int] = DEFAULT_DELAY_LEVELS_MS, file_reserved_hours: float = 72,
                 delete_when_hours=(4,), disk_max_used_ratio: float = 0.75,
                 disk_clean_forcibly_ratio: float = 0.85, disk_warning_ratio: float = 0.90,
                 on_flushed: Callable[[int], None] | None = None):
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
        self.disk_warning_ratio = disk_warning_ratio
        self.on_flushed = on_flushed
        self.disk_ratio_fn: Callable[[], float] = self._disk_ratio  # tests replace it
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
        self._disk_full = False
        self._counts = collections.Counter()

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
        self.flush_step(force=True)
        with self._flush_lock:
            for cq in self.cqs.values():
                cq.close()
            self.cqs.clear()
            self.index.close()
            self.commit_log.close()
            self._cp_file.close()
            self._cp_file = None
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
        cl = self.commit_log
        if self._disk_full:
            return PutResult(PutStatus.DISK_FULL, -1, [], cl.write_end, 0)
        tx = sys_flag & record.TX_MASK
        in_cq = tx == record.TX_NOT or tx == record.TX_COMMIT
        # Half and rollback records take no queue offset (RocketMQ writes 0).
        qoff = self._cq(topic, queue_id).max_offset if in_cq else 0
        topic_b = topic.encode()
        store_ts = int(time.time() * 1000)
        pbs = [p.encode() for p in props]
        phys = cl.write_end
        fixed = record.record_size(0, len(topic_b), 0)
        if fixed * len(bodies) + sum(map(len, bodies)) + sum(map(len, pbs)) + 8 <= cl.space_left():
            # the common case: the whole batch fits the current segment, encoded list-wise
            data, phys_offsets, sizes = record.encode_run(
                bodies, topic_b, queue_id, flags, qoff if in_cq else None, phys, sys_flag, born_ts,
                born_host, store_ts, self.store_host, reconsume, prepared_offset, pbs, body_crcs)
            cl.append(data)
            return self._after_put(topic, queue_id, tx, in_cq, qoff, store_ts, phys_offsets, sizes, props,
                                   phys + len(data), len(bodies))
        seg_bytes = self.segment_bytes
        store_host = self.store_host
        encode = record.encode
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
            chunks[-1].append(encode(body, topic_b, queue_id, flags[i], qoff + i if in_cq else 0,
                                     phys, sys_flag, born_ts, born_host, store_ts, store_host,
                                     reconsume, prepared_offset, pb,
                                     body_crcs[i] if body_crcs else None))
            phys_offsets.append(phys)
            sizes.append(size)
            phys += size
            space -= size
        for n, parts in enumerate(chunks):  # nothing is written until every record fit
            if n:
                cl.roll()
            if parts:
                cl.append(b"".join(parts))
        return self._after_put(topic, queue_id, tx, in_cq, qoff, store_ts, phys_offsets, sizes, props, phys,
                               len(bodies))

    def _after_put(self, topic, queue_id, tx, in_cq, qoff, store_ts, phys_offsets, sizes, props, end, n):
        self._dispatch(topic, queue_id, tx, store_ts, phys_offsets, sizes, props)
        self._dispatched = end
        if in_cq and self.flush_sync:
            self.cqs[(topic, queue_id)].pending.append((end, qoff))
        self._counts["put_msgs"] += n
        self._counts["put_batches"] += 1
        return PutResult(PutStatus.PUT_OK, qoff, phys_offsets, end, store_ts)

    def _dispatch(self, topic: str, queue_id: int, tx: int, store_ts: int,
                  phys_offsets: list[int], sizes: list[int], props: list[str],
                  to_cq: bool = True, to_index: bool = True) -> None:
        """ConsumeQueue and index entries for records of one queue (put and recovery)."""
        to_cq = to_cq and (tx == record.TX_NOT or tx == record.TX_COMMIT)
        to_index = to_index and tx != record.TX_ROLLBACK
        want_tags = to_cq and topic != SCHEDULE_TOPIC and topic != TIMER_TOPIC
        codes: list[int] = []
        keyed: list[tuple[int, int]] = []
        pre = prefix_crc(topic)
        crc32 = zlib.crc32
        fields = record.index_fields
        for phys, p in zip(phys_offsets, props):
            tag, uniq, keys = fields(p)
            if want_tags:
                codes.append(tag_hash(tag) if tag is not None else 0)
            if to_index:
                if uniq is not None:
                    keyed.append((crc32(uniq.encode(), pre) & HASH_MASK, phys))
                keyed.extend((crc32(k.encode(), pre) & HASH_MASK, phys) for k in keys)
        if to_cq:
            if topic == SCHEDULE_TOPIC:
                levels = self.delay_levels_ms
                codes = [store_ts + levels[min(max(queue_id, 0), len(levels) - 1)]] * len(sizes)
            elif topic == TIMER_TOPIC:
                codes = [_int(record.get_property(p, TIMER_DELIVER_MS)) for p in props]
            self._cq(topic, queue_id).append(b"".join(map(ENTRY.pack, phys_offsets, sizes,
                                                           codes)))
        if keyed:
            self.index.put_many(keyed, store_ts)
            self.index.sync_header()

    # ---- replication (slave) ----------------------------------------------------

    def append_replicated(self, offset: int, data) -> tuple[int, set]:
        """A slave's append: its master's CommitLog bytes, verbatim, at the same offset.

        `data` is whole records of one master segment; each is CRC-checked
        before anything is written. Dispatch is `_dispatch` with recovery's rule
        (a record enters its queue only at the queue's next offset), so a queue
        that starts mid-log (a new slave of a master whose oldest segments
        expired) begins at its first record's offset. Returns (new end,
        touched (topic, queue) pairs). Raises ValueError on bad bytes."""
        cl = self.commit_log
        if offset != cl.write_end:
            if cl.segments or offset % self.segment_bytes:
                raise ValueError(f"replicated bytes start at {offset}; this log ends at {cl.write_end}")
            cl.truncate(offset)  # an empty log starts at the master's oldest segment
        recs = ha_stream.check_chunk(data, offset, self.segment_bytes)
        if not cl.segments or cl.space_left() == 0:
            cl.roll()
        if len(data) > cl.space_left():
            raise ValueError(f"{len(data)} replicated bytes at {offset} overrun the segment")
        cl.append(data)
        touched = set()
        for run in ha_stream.runs(recs):
            first = run[0]
            key = (first.topic, first.queue_id)
            tx = first.sys_flag & record.TX_MASK
            queued = run if tx == record.TX_NOT or tx == record.TX_COMMIT else []
            if queued and (not names.is_valid_topic(first.topic) or first.queue_id < 0):
                log.warning("replicated records of %s/%d: not a valid topic or queue; not queued",
                            ascii(first.topic), first.queue_id)
                queued = []
            if queued:
                cq = self._cq(*key)
                if cq.max_offset == 0 and not cq.files:
                    cq.start_at(first.queue_offset)
                nxt = cq.max_offset
                queued = [r for r in run if r.queue_offset >= nxt]
                if queued and queued[0].queue_offset != nxt:
                    log.warning("%s/%d: replicated queue offset %d, expected %d; not queued", key[0], key[1],
                                queued[0].queue_offset, nxt)
                    queued = []
                if queued:
                    touched.add(key)
            args = (first.topic, first.queue_id, tx, first.store_ts)
            if len(queued) == len(run):
                self._dispatch(*args, [r.phys_offset for r in run], [r.size for r in run],
                               [r.props for r in run])
            else:
                self._dispatch(*args, [r.phys_offset for r in run], [r.size for r in run],
                               [r.props for r in run], to_cq=False)
                if queued:
                    self._dispatch(*args, [r.phys_offset for r in queued], [r.size for r in queued],
                                   [r.props for r in queued], to_index=False)
        self._dispatched = cl.write_end
        self._counts["replicated_bytes"] += len(data)
        return cl.write_end, touched

    # ---- flush -------------------------------------------------------------------

    @property
    def confirm_offset(self) -> int:
        cl = self.commit_log
        return cl.flushed if self.flush_sync else cl.write_end

    @property
    def flushed_offset(self) -> int:
        return self.commit_log.flushed

    @property
    def max_phys_offset(self) -> int:
        return self.commit_log.write_end

    @property
    def min_phys_offset(self) -> int:
        return self.commit_log.min_offset

    def request_flush(self, offset: int) -> None:
        self._wake.set()

    def flush_step(self, force: bool = False) -> int:
        """One flush pass: CommitLog always; ConsumeQueues, index and checkpoint every
        LOGIC_FLUSH_INTERVAL_S (or when forced). Returns the flushed CommitLog offset."""
        with self._flush_lock:
            dispatched = self._dispatched  # before the CommitLog sync: its entries exist
            flushed = self.commit_log.flush()
            now = time.monotonic()
            if (force or now - self._last_logic_flush >= LOGIC_FLUSH_INTERVAL_S) \
                    and self._cp_file is not None:
                self._last_logic_flush = now
                with self._files_lock:
                    cqs = list(self.cqs.values())
                for cq in cqs:
                    cq.flush()
                self.index.flush()
                ts = int(time.time() * 1000)
                self._cp = Checkpoint(ts, ts, ts, flushed, min(dispatched, flushed))
                self._cp_file.write(self._cp)
        return flushed

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
                flushed = self.flush_step()
                if self.on_flushed is not None and (woke or flushed > before):
                    self.on_flushed(flushed)
            except Exception:  # the loop must outlive a bad pass; it is logged
                log.exception("flush pass failed")

    # ---- get ---------------------------------------------------------------------

    def visible_max(self, cq: ConsumeQueue) -> int:
        """Queue max offset consumers may see: entries whose record is confirmed."""
        pend = cq.pending
        if not pend:
            return cq.max_offset
        confirm = self.confirm_offset
        while pend and pend[0][0] <= confirm:
            pend.popleft()
        return pend[0][1] if pend else cq.max_offset

    def max_offset(self, topic: str, queue_id: int) -> int:
        cq = self.cqs.get((topic, queue_id))
        return self.visible_max(cq) if cq else 0

    def min_offset(self, topic: str, queue_id: int) -> int:
        cq = self.cqs.get((topic, queue_id))
        return min(cq.min_offset, cq.max_offset) if cq else 0

    def get_messages(self, topic: str, queue_id: int, offset: int, max_msgs: int = 32,
                     tag_hashes: set[int] | None = None, max_bytes: int = 4 << 20) -> GetResult:
        cq = self.cqs.get((topic, queue_id))
        hi = self.visible_max(cq) if cq else 0
        lo = min(cq.min_offset, hi) if cq else 0
        if hi == 0:
            return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, lo, hi, b"", 0)
        if offset < lo:
            return GetResult(GetStatus.OFFSET_TOO_SMALL, lo, lo, hi, b"", 0)
        if offset == hi:
            return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, lo, hi, b"", 0)
        if offset > hi:
            return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, hi, lo, hi, b"", 0)
        max_msgs = max(1, max_msgs)
        scan = max_msgs if tag_hashes is None else max(max_msgs, FILTER_SCAN_ENTRIES)
        left = min(scan, hi - offset)
        min_phys = self.commit_log.min_offset
        picked: list[tuple[int, int]] = []
        total = 0
        nxt = offset
        full = False
        while left > 0 and not full:
            raw = cq.read(nxt, left)  # one pread; a second only at a CQ file boundary
            if not raw:
                break
            left -= len(raw) // ENTRY_SIZE
            for phys, size, code in ENTRY.iter_unpack(raw):
                if (tag_hashes is not None and code not in tag_hashes) or size <= 0 \
                        or phys < min_phys:
                    nxt += 1
                    continue
                if picked and total + size > max_bytes:
                    full = True
                    break
                picked.append((phys, size))
                total += size
                nxt += 1
                if len(picked) >= max_msgs:
                    full = True
                    break
        self._counts["get_calls"] += 1
        if not picked:
            return GetResult(GetStatus.NO_MATCHED_MESSAGE, nxt, lo, hi, b"", 0)
        data = self._read_records(picked)
        self._counts["get_msgs"] += len(picked)
        return GetResult(GetStatus.FOUND, nxt, lo, hi, data, len(picked))

    def _read_records(self, picked: list[tuple[int, int]]) -> bytes:
        """The records, with one pread per run of nearby records in one segment."""
        cl = self.commit_log
        out: list[bytes] = []
        i, n = 0, len(picked)
        while i < n:
            start, size = picked[i]
            seg = cl.segment_for(start)
            if seg is None:
                i += 1
                continue
            end = start + size
            j = i + 1
            gaps = False
            while j < n:
                p, s = picked[j]
                if not (0 <= p - end <= READ_GAP_BYTES and p + s <= seg.end):
                    break
                gaps |= p != end
                end = p + s
                j += 1
            buf = cl.read(start, end - start)
            if not gaps:
                out.append(buf)
            else:
                view = memoryview(buf)
                out.extend(view[p - start:p - start + s] for p, s in picked[i:j])
            i = j
        return b"".join(out)

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
        return self._disk_full

    def _disk_ratio(self) -> float:
        usage = shutil.disk_usage(self.data_dir)
        return usage.used / usage.total if usage.total else 0.0

    def stats(self) -> dict:
        cl = self.commit_log
        return {
            "put_msgs": self._counts["put_msgs"], "put_batches": self._counts["put_batches"],
            "get_calls": self._counts["get_calls"], "get_msgs": self._counts["get_msgs"],
            "min_phys_offset": cl.min_offset, "max_phys_offset": cl.write_end,
            "flushed_offset": cl.flushed, "confirm_offset": self.confirm_offset,
            "segments": len(cl.segments), "queues": len(self.cqs),
            "index_files": len(self.index.files), "disk_ratio": self.disk_ratio_fn(),
            "disk_full": self._disk_full, "replicated_bytes": self._counts["replicated_bytes"],
            "skipped_queue_dirs": self._counts["skipped_queue_dirs"],
        }




def _int(s: str | None) -> int:
    try:
        return int(s) if s else 0
    except ValueError:
        return 0
