"""Tiered storage: sealed CommitLog segments copied to an object store, local copies then dropped.

Owns what is uploaded, the record of it and both retentions of a broker started
with `--tiered-store`; the object calls are tiered_store's, serving a remote
range is tiered_reads'::

    data_dir/tiered/<20-digit offset>.json   one manifest per uploaded + verified segment
    store:  commitlog/<20-digit offset>       the segment's bytes
            commitlog/<20-digit offset>.json  the same manifest

A manifest (size, md5, sha256, a CRC32 per CHUNK bytes) is written locally, atomically,
only after the object was verified (HEAD size + md5), so it is the broker's record
of "safely uploaded": a segment without one is uploaded again (after a crash, a
store outage), and local retention deletes only segments that have one.

The uploader runs on its own thread, oldest segment first, one at a time, and only
segments that are sealed (not the last), flushed and dispatched, so a put never waits
for it and a rolled-back put never cuts what it reads. A failing store is retried with
a doubling back-off (BACKOFF_MAX_S). Remote retention runs there too; local retention
runs on the broker's thread from retention.clean_expired (`clean_local`).
"""

from __future__ import annotations

import bisect
import hashlib
import json
import logging
import os
import threading
import time
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .commit_log import NAME_DIGITS, segment_name
from .tiered_store import StoreDown, write_atomic

if TYPE_CHECKING:
    from .store import MessageStore

log = logging.getLogger(__name__)

CHUNK = 1 << 20          # ranged-read and checksum granularity of a remote segment
BACKOFF_MAX_S = 30.0
IDLE_S = 1.0             # the uploader looks for a newly sealed segment this often


@dataclass(slots=True)
class Manifest:
    start: int
    size: int
    md5: str
    sha256: str
    chunk: int
    crcs: list[int]
    sealed_ms: int       # the segment file's mtime when uploaded (its last write)
    uploaded_ms: int

    @property
    def end(self) -> int:
        return self.start + self.size

    @property
    def key(self) -> str:
        return f"commitlog/{segment_name(self.start)}"

    def to_json(self) -> bytes:
        return json.dumps({"start": self.start, "size": self.size, "md5": self.md5, "sha256": self.sha256,
                           "chunk": self.chunk, "crcs": self.crcs, "sealed_ms": self.sealed_ms,
                           "uploaded_ms": self.uploaded_ms}).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> Manifest:
        d = json.loads(raw)
        m = cls(int(d["start"]), int(d["size"]), str(d["md5"]), str(d["sha256"]), int(d["chunk"]),
                [int(c) for c in d["crcs"]], int(d["sealed_ms"]), int(d["uploaded_ms"]))
        if m.size < 0 or m.chunk <= 0 or len(m.crcs) != -(-m.size // m.chunk):
            raise ValueError("manifest sizes do not agree")
        return m


def checksums(path: str, size: int, chunk: int = CHUNK) -> tuple[str, str, list[int]]:
    """(md5, sha256, CRC32 of each chunk) of the first `size` bytes of a file."""
    md5, sha = hashlib.md5(usedforsecurity=False), hashlib.sha256()
    crcs = []
    with open(path, "rb") as f:
        left = size
        while left > 0:
            buf = f.read(min(chunk, left))
            if not buf:
                raise OSError(f"{path} is shorter than {size} bytes")
            md5.update(buf)
            sha.update(buf)
            crcs.append(zlib.crc32(buf))
            left -= len(buf)
    return md5.hexdigest(), sha.hexdigest(), crcs


class Tiered:
    """`objects`: the object store (tiered_store.open_store); retentions: hours/bytes < 0 and
    days <= 0 mean no such limit."""

    def __init__(self, objects, data_dir: str, *, local_retention_hours: float = 72,
                 local_retention_bytes: int = -1, remote_retention_days: float = 0,
                 cache_bytes: int = 256 << 20, chunk: int = CHUNK, background: bool = True):
        self.objects = objects
        self.dir = os.path.join(data_dir, "tiered")
        self.local_retention_hours = local_retention_hours
        self.local_retention_bytes = local_retention_bytes
        self.remote_retention_days = remote_retention_days
        self.cache_bytes = cache_bytes
        self.chunk = chunk
        self.background = background   # False: the caller runs `step` (tests)
        self.lock = threading.Lock()   # guards `manifests` (uploader thread vs broker thread)
        self.manifests: dict[int, Manifest] = {}
        self.starts: tuple[int, ...] = ()   # sorted keys of `manifests`, replaced whole on a change
        self.counts = {"uploaded_segments": 0, "uploaded_bytes": 0, "upload_errors": 0,
                       "verify_failures": 0, "remote_deleted_segments": 0, "local_deleted_segments": 0}
        self.last_error = ""
        self.store: MessageStore | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._followed_min = -1
        self.on_stop: list = []   # the read cache's fetch threads (tiered_reads)

    # ---- lifecycle ----------------------------------------------------------------

    def load(self) -> None:
        """Read the local manifests (a damaged one is set aside: that segment uploads again)."""
        os.makedirs(self.dir, exist_ok=True)
        for name in sorted(os.listdir(self.dir)):
            stem, dot, ext = name.partition(".")
            if not (stem.isdigit() and len(stem) == NAME_DIGITS and dot and ext == "json"):
                continue
            path = os.path.join(self.dir, name)
            try:
                with open(path, "rb") as f:
                    m = Manifest.from_json(f.read())
                if m.start != int(stem):
                    raise ValueError("start differs from its name")
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.error("tiered manifest %s unreadable (%s): set aside, the segment uploads again", path, exc)
                os.replace(path, path + ".bad")
                continue
            self.manifests[m.start] = m
        self.starts = tuple(sorted(self.manifests))

    def start(self, store: MessageStore) -> None:
        self.store = store
        if not self.background:
            return
        self._thread = threading.Thread(target=self._run, name="tiered-upload", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        for fn in self.on_stop:
            fn()
        if self._thread is not None:
            self._thread.join(timeout=5)   # an upload cut short is redone at the next start

    # ---- what is remote -------------------------------------------------------------

    def uploaded(self, start: int) -> bool:
        return start in self.manifests

    def remote_min(self) -> int | None:
        starts = self.starts
        return starts[0] if starts else None

    def remote_segment(self, offset: int) -> Manifest | None:
        """The uploaded segment holding CommitLog `offset`, if any."""
        starts = self.starts
        i = bisect.bisect_right(starts, offset) - 1
        m = self.manifests.get(starts[i]) if i >= 0 else None
        return m if m is not None and offset < m.end else None

    def sorted_manifests(self) -> list[Manifest]:
        with self.lock:
            return sorted(self.manifests.values(), key=lambda m: m.start)

    # ---- uploader thread ------------------------------------------------------------

    def _run(self) -> None:
        backoff = 0.0
        while not self._stop.is_set():
            try:
                busy = self.step()
                backoff = 0.0
            except (StoreDown, OSError) as exc:
                self.counts["upload_errors"] += 1
                self.last_error = str(exc)[:300]
                backoff = min(BACKOFF_MAX_S, max(0.25, backoff * 2))
                log.warning("tiered store: %s (retry in %.1f s)", exc, backoff)
                busy = False
            except Exception:  # the thread never dies: a bug is logged and retried later
                log.exception("tiered upload step failed")
                backoff = BACKOFF_MAX_S
                busy = False
            self._stop.wait(backoff or (0 if busy else IDLE_S))

    def step(self) -> bool:
        """Upload the oldest sealed segment not yet uploaded, else apply remote retention.
        True when it did something (the caller looks again at once)."""
        seg = self._next_sealed()
        if seg is not None:
            self.upload(*seg)
            return True
        return self.remote_retention_step()

    def _next_sealed(self) -> tuple[int, str, int] | None:
        store = self.store
        cl = store.commit_log
        bound = min(cl.flushed, store.max_phys_offset)
        with cl.lock:
            sealed = [(s.start, s.path, s.size) for s in cl.segments[:-1]]
        for start, path, size in sealed:
            if start not in self.manifests and start + size <= bound:
                return start, path, size
        return None

    def upload(self, start: int, path: str, size: int) -> Manifest:
        """Copy one segment, verify the copy (size + md5), then record it (local manifest last)."""
        sealed_ms = int(os.stat(path).st_mtime * 1000)
        md5, sha, crcs = checksums(path, size, self.chunk)
        m = Manifest(start, size, md5, sha, self.chunk, crcs, sealed_ms, int(time.time() * 1000))
        self.objects.put_file(m.key, path, size)
        self._verify(m)
        self.objects.put_bytes(m.key + ".json", m.to_json())
        write_atomic(os.path.join(self.dir, segment_name(start) + ".json"), m.to_json())
        with self.lock:
            self.manifests[start] = m
            self.starts = tuple(sorted(self.manifests))
        self.counts["uploaded_segments"] += 1
        self.counts["uploaded_bytes"] += size
        log.info("segment %d (%d bytes) uploaded to %s and verified", start, size, self.objects.url)
        return m

    def _verify(self, m: Manifest) -> None:
        head = self.objects.head(m.key)
        etag = head[1] if head else ""
        ok = head is not None and head[0] == m.size
        if ok and not (len(etag) == 32 and etag == m.md5):
            # not a single-part md5 ETag (an encrypted bucket ...): read it back
            data = self.objects.get_range(m.key, 0, m.size)
            ok = hashlib.sha256(data).hexdigest() == m.sha256
        if not ok:
            self.counts["verify_failures"] += 1
            raise StoreDown(f"{m.key}: the uploaded copy does not match (head {head}, size {m.size}, md5 {m.md5})")

    def remote_retention_step(self) -> bool:
        """Delete the oldest remote segment past --remote-retention-days that is no longer local."""
        if self.remote_retention_days <= 0:
            return False
        cl = self.store.commit_log
        oldest = self.sorted_manifests()[:1]
        if not oldest:
            return False
        m = oldest[0]
        expired = m.sealed_ms + self.remote_retention_days * 86_400_000 <= time.time() * 1000
        if not expired or m.start >= cl.min_offset:
            return False
        with self.lock:   # the record first: no read is served from an object being deleted
            self.manifests.pop(m.start, None)
            self.starts = tuple(sorted(self.manifests))
        os.unlink(os.path.join(self.dir, segment_name(m.start) + ".json"))
        self.objects.delete(m.key)
        self.objects.delete(m.key + ".json")
        self.counts["remote_deleted_segments"] += 1
        log.info("remote segment %d deleted (older than %s days)", m.start, self.remote_retention_days)
        return True

    # ---- local retention (broker thread) ----------------------------------------------

    def clean_local(self, store: MessageStore, now_ms: int, forcibly: bool, keep_from: int | None = None) -> int:
        """Delete the oldest local segments that are uploaded and past local retention (age,
        bytes, the remote retention, or disk pressure when `forcibly`); never the last one, one
        not uploaded, nor one ending past `keep_from` (compaction still reads it locally). The
        caller holds the store's flush lock."""
        cl = store.commit_log
        deleted = 0
        hours_ms = self.local_retention_hours * 3_600_000 if self.local_retention_hours >= 0 else None
        days_ms = self.remote_retention_days * 86_400_000 if self.remote_retention_days > 0 else None
        while len(cl.segments) > 1:
            seg = cl.segments[0]
            m = self.manifests.get(seg.start)
            if m is None or m.size != seg.size or (keep_from is not None and seg.end > keep_from):
                break   # not uploaded as it is now, or compaction still reads it
            sealed_bytes = sum(s.size for s in cl.segments[:-1])
            age_ms = now_ms - os.stat(seg.path).st_mtime * 1000
            due = forcibly or (hours_ms is not None and age_ms >= hours_ms) \
                or (days_ms is not None and age_ms >= days_ms) \
                or (self.local_retention_bytes >= 0 and sealed_bytes > self.local_retention_bytes)
            if not due:
                break
            cl.delete_oldest()
            deleted += 1
            self.counts["local_deleted_segments"] += 1
        return deleted

    def min_moved(self, min_offset: int) -> bool:
        """True once per rise of the readable minimum (the queues' minimums follow it)."""
        if min_offset == self._followed_min:
            return False
        self._followed_min = min_offset
        return True

    def stats(self) -> dict:
        ms = self.sorted_manifests()
        cl = self.store.commit_log if self.store else None
        pending = 0
        if cl is not None:
            with cl.lock:
                pending = sum(1 for s in cl.segments[:-1] if s.start not in self.manifests)
        return {"store": self.objects.url, **self.counts, "pending_segments": pending,
                "remote_segments": len(ms), "remote_bytes": sum(m.size for m in ms),
                "remote_min_offset": ms[0].start if ms else None,
                "remote_max_offset": ms[-1].end if ms else None, "last_error": self.last_error}



GAUGES = (  # (metric, STATUS key, help) of a broker with a tiered store
    ("quiver_tiered_cache_bytes", "cache_bytes", "verified remote chunks held in the read cache"),
    ("quiver_tiered_cache_capacity_bytes", "cache_capacity_bytes", "the read cache's bound (--tiered-cache-bytes)"),
    ("quiver_tiered_remote_bytes", "remote_bytes", "CommitLog bytes held in the tiered store"),
    ("quiver_tiered_remote_segments", "remote_segments", "CommitLog segments held in the tiered store"),
    ("quiver_tiered_pending_segments", "pending_segments", "sealed segments not yet uploaded"),
    ("quiver_tiered_uploaded_bytes", "uploaded_bytes", "bytes uploaded and verified since the broker started"),
    ("quiver_tiered_upload_errors", "upload_errors", "failed upload attempts since the broker started"),
    ("quiver_tiered_damaged_chunks", "damaged_chunks", "remote reads refused: the object failed its checksum"),
)


def tiered_gauges(stats: dict | None) -> list[tuple[str, str, float]]:
    """(metric, help, value) rows for /metrics from the store's STATUS `tiered` map (none when off)."""
    return [] if not stats else [(metric, doc, stats.get(key) or 0) for metric, key, doc in GAUGES]
