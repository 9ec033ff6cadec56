"""Reads of CommitLog offsets that live only in the tiered store.

`TieredLog` has the CommitLog's read interface (min_offset, segment_for, read,
read_record, store_ts_at): the store hands it to the pull path and the lookups
in place of the CommitLog when `--tiered-store` is on. An offset in a local
segment is read locally; one below them from its uploaded segment, by ranged
GETs of whole chunks through a bounded LRU cache (`ChunkCache`). Within
`in_background` (a pull, a lookup by key or msgId) a miss does not wait: the
chunk is fetched on a read thread and NeedsFetch tells the caller to run the
request again when it is cached (pulling.py; `answer_when_cached` for lookups).

Every chunk is checked against its manifest's CRC32 before it is cached or
served: a store that lost or corrupted an object answers the read with
RemoteDamaged (SYSTEM_ERROR and a remark naming the object), never with its
bytes; a store that cannot be reached answers SYSTEM_BUSY (retry later).
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import logging
import threading
import time
import zlib
from dataclasses import dataclass

from quiver.errors import QuiverError
from quiver.wire import record
from quiver.wire.codes import ResponseCode

from .tiered_store import StoreDown

log = logging.getLogger(__name__)

READAHEAD_CHUNKS = 4   # chunks a cache miss fetches in one ranged GET (fewer, larger requests)
FETCH_THREADS = 2      # background fetches of chunks pulls wait for
DOWN_HOLD_S = 5.0      # after a failed GET, reads answer SYSTEM_BUSY this long without trying the store
LOOKUP_FETCHES = 16    # chunks one lookup waits for off the service thread; past them it reads in place


class RemoteDamaged(QuiverError):
    code = ResponseCode.SYSTEM_ERROR


class RemoteUnavailable(QuiverError):
    code = ResponseCode.SYSTEM_BUSY


class NeedsFetch(Exception):
    """A pull needs a remote chunk not cached yet: it is being fetched on another thread, `future`
    completes when it is cached (or failed); the pull is then run again (pulling.py)."""

    def __init__(self, future: concurrent.futures.Future):
        super().__init__("remote chunk being fetched")
        self.future = future


@contextlib.contextmanager
def in_background(store, on: bool = True):
    """Within: a read that misses the tiered cache raises NeedsFetch instead of waiting for the store."""
    cache = getattr(getattr(store, "reads", None), "cache", None)   # none: not tiered (or a test's fake)
    if cache is None or not on:
        yield
        return
    cache.nonblocking = True
    try:
        yield
    finally:
        cache.nonblocking = False


def answer_when_cached(store, service, req, handle, fetches: int = LOOKUP_FETCHES) -> None:
    """Run `handle(req)` (a lookup); if it needs a remote chunk not cached, the chunk is fetched on a
    read thread and `handle` runs again on the service thread once it is there, as a pull does, so
    the service thread never waits for the object store. A lookup touching more chunks than
    `fetches` (or than the cache holds) reads the rest in place. `service` None: run in place."""
    try:
        with in_background(store, service is not None and fetches > 0):
            handle(req)
    except NeedsFetch as miss:
        miss.future.add_done_callback(lambda _: service.call_soon_threadsafe(
            _run_again, store, service, req, handle, fetches - 1))


def _run_again(store, service, req, handle, fetches: int) -> None:
    if req.answered:
        return
    try:   # outside the service's own request loop: answer its errors here
        answer_when_cached(store, service, req, handle, fetches)
    except QuiverError as exc:   # a damaged chunk, the store unreachable, no such message
        req.reply(exc.code, exc.remark)
    except Exception as exc:
        log.exception("a lookup run again after a tiered fetch failed")
        req.reply(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")


@dataclass(slots=True)
class RemoteSegment:
    start: int
    size: int

    @property
    def end(self) -> int:
        return self.start + self.size


class ChunkCache:
    """Verified chunks of remote segments, least recently used dropped past `capacity` bytes."""

    def __init__(self, tiered, capacity: int):
        self.tiered = tiered
        self.capacity = capacity
        self.chunks: collections.OrderedDict[tuple[int, int], bytes] = collections.OrderedDict()
        self.bytes = 0
        self.lock = threading.Lock()
        self.counts = {"cache_hits": 0, "cache_misses": 0, "damaged_chunks": 0, "remote_read_errors": 0,
                       "background_fetches": 0}
        self.damaged_logged: set[tuple[int, int]] = set()
        self.down_until = 0.0   # monotonic time; reads run on the broker's thread: a dead store must not hold it
        self.clock = time.monotonic
        self.nonblocking = False   # set around a pull (in_background): a miss raises NeedsFetch
        self.inflight: dict[tuple[int, int], concurrent.futures.Future] = {}
        self.failed: dict[tuple[int, int], QuiverError] = {}   # what a background fetch raised, raised once
        self.pool: concurrent.futures.ThreadPoolExecutor | None = None

    def chunk(self, start: int, idx: int) -> bytes:
        key = (start, idx)
        with self.lock:
            data = self.chunks.get(key)
            if data is not None:
                self.chunks.move_to_end(key)
                self.counts["cache_hits"] += 1
                return data
            failed = self.failed.pop(key, None)
        if failed is not None:
            raise failed
        if self.nonblocking:
            raise NeedsFetch(self._fetch_later(start, idx))
        return self.fetch(start, idx)

    def _fetch_later(self, start: int, idx: int) -> concurrent.futures.Future:
        key = (start, idx)
        with self.lock:
            fut = self.inflight.get(key)
            if fut is None:
                if self.pool is None:
                    self.pool = concurrent.futures.ThreadPoolExecutor(FETCH_THREADS, thread_name_prefix="tiered-read")
                fut = self.inflight[key] = self.pool.submit(self._fetch_in_background, start, idx)
                self.counts["background_fetches"] += 1
        return fut

    def _fetch_in_background(self, start: int, idx: int) -> None:
        try:
            self.fetch(start, idx)
        except QuiverError as exc:   # the retried read raises it on the broker's thread
            with self.lock:
                if len(self.failed) > 1000:
                    self.failed.clear()
                self.failed[(start, idx)] = exc
        finally:
            with self.lock:
                self.inflight.pop((start, idx), None)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)

    def fetch(self, start: int, idx: int) -> bytes:
        """Get a chunk (and the ones after it) from the store, check it, cache it."""
        self.counts["cache_misses"] += 1
        if self.clock() < self.down_until:
            raise RemoteUnavailable(f"tiered store {self.tiered.objects.url} failed a read a moment ago: retry later")
        m = self.tiered.manifests.get(start)
        if m is None:
            raise RemoteUnavailable(f"CommitLog segment {start} is no longer in the tiered store (remote retention)")
        # read ahead: the chunks after it in the same GET (a store's cost is mostly per request),
        # no more than a quarter of the cache and only while they are not cached already
        ahead = max(1, min(READAHEAD_CHUNKS, self.capacity // (4 * m.chunk)))
        last = min(idx + ahead, len(m.crcs))
        with self.lock:
            for j in range(idx + 1, last):
                if (start, j) in self.chunks:
                    last = j
                    break
        lo = idx * m.chunk
        try:
            span = self.tiered.objects.get_range(m.key, lo, min(last * m.chunk, m.size))
        except (StoreDown, FileNotFoundError) as exc:
            self.counts["remote_read_errors"] += 1
            if isinstance(exc, FileNotFoundError):
                self._damaged(m, idx, "the object is missing")
            self.down_until = self.clock() + DOWN_HOLD_S
            raise RemoteUnavailable(f"tiered store {self.tiered.objects.url} unreachable ({exc}): "
                                    "retry later") from None
        pieces = [span[(j - idx) * m.chunk:(j - idx + 1) * m.chunk] for j in range(idx, last)]
        data = pieces[0]
        want = min(lo + m.chunk, m.size) - lo
        if len(data) != want or zlib.crc32(data) != m.crcs[idx]:
            self._damaged(m, idx, f"{len(data)} bytes, CRC32 {zlib.crc32(data)} (manifest: {want} bytes, "
                                  f"CRC32 {m.crcs[idx]})")
        # a read-ahead chunk that fails its check is not kept: read on its own, it is reported then
        good = [(j, p) for j, p in enumerate(pieces, idx) if p and zlib.crc32(p) == m.crcs[j]]
        with self.lock:
            for j, piece in reversed(good):   # the asked-for chunk last: most recently used
                if (start, j) not in self.chunks:
                    self.chunks[(start, j)] = piece
                    self.bytes += len(piece)
                self.chunks.move_to_end((start, j))
            while self.bytes > self.capacity and len(self.chunks) > 1:
                _, old = self.chunks.popitem(last=False)
                self.bytes -= len(old)
        return data

    def _damaged(self, m, idx: int, what: str):
        self.counts["damaged_chunks"] += 1
        if (m.start, idx) not in self.damaged_logged and len(self.damaged_logged) < 10_000:
            self.damaged_logged.add((m.start, idx))
            log.error("tiered object %s in %s damaged at bytes %d..: %s; not served", m.key,
                      self.tiered.objects.url, idx * m.chunk, what)
        raise RemoteDamaged(f"tiered object {m.key} (CommitLog {m.start + idx * m.chunk}) failed its checksum "
                            f"({what}): restore it in {self.tiered.objects.url} from a backup; not served")

    def read(self, seg: RemoteSegment, offset: int, size: int) -> bytes:
        chunk = self.tiered.chunk
        pos, end = offset - seg.start, min(offset + size, seg.end) - seg.start
        out = []
        while pos < end:
            idx = pos // chunk
            data = self.chunk(seg.start, idx)
            lo = pos - idx * chunk
            piece = data[lo:lo + (end - pos)]
            if not piece:
                break
            out.append(piece)
            pos += len(piece)
        return out[0] if len(out) == 1 else b"".join(out)

    def stats(self) -> dict:
        return {"cache_bytes": self.bytes, "cache_capacity_bytes": self.capacity,
                "cache_chunks": len(self.chunks), **self.counts}


class TieredLog:
    """The CommitLog's read side over local segments and, below them, remote ones."""

    def __init__(self, commit_log, tiered):
        self.local = commit_log
        self.tiered = tiered
        self.cache = ChunkCache(tiered, tiered.cache_bytes)
        tiered.on_stop.append(self.cache.close)

    @property
    def min_offset(self) -> int:
        local = self.local.min_offset
        rmin = self.tiered.remote_min()
        return local if rmin is None else min(rmin, local)

    def _remote(self, offset: int) -> RemoteSegment | None:
        m = self.tiered.remote_segment(offset)
        return None if m is None else RemoteSegment(m.start, m.size)

    def segment_for(self, offset: int):
        return self.local.segment_for(offset) or self._remote(offset)

    def read(self, offset: int, size: int) -> bytes:
        if self.local.segment_for(offset) is not None:
            return self.local.read(offset, size)
        seg = self._remote(offset)
        return b"" if seg is None else self.cache.read(seg, offset, size)

    def read_record(self, offset: int) -> bytes | None:
        if self.local.segment_for(offset) is not None:
            return self.local.read_record(offset)
        seg = self._remote(offset)
        if seg is None:
            return None
        try:
            size, blank = record.check_head(self.cache.read(seg, offset, 8), 0, seg.end - offset)
        except record.BadRecord:
            return None
        return None if blank else self.cache.read(seg, offset, size)

    def store_ts_at(self, offset: int) -> int | None:
        if self.local.segment_for(offset) is not None:
            return self.local.store_ts_at(offset)
        seg = self._remote(offset)
        if seg is None:
            return None
        head = self.cache.read(seg, offset, record.STORE_TS_AT + 8)
        return record.store_ts_of(head) if len(head) == record.STORE_TS_AT + 8 else None


def local_min_offset(store, topic: str, queue_id: int) -> int:
    """The queue's first offset whose record is on the local disk (its min offset when not tiered)."""
    lo = store.min_offset(topic, queue_id)
    cq = store.cqs.get((topic, queue_id))
    if store.tiered is None or cq is None:
        return lo
    local = store.commit_log.min_offset
    return max(lo, cq.first_offset_where(lambda e: e[0] >= local, lo=cq.min_offset))
