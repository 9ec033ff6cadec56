"""The CommitLog: every record of every topic, appended once, in segment files.

Owns the segment files and byte positions; not the record format (quiver.wire.record)
nor what the records mean (consume_queue, index_file, store)::

    commitlog/
      00000000000000000000   [rec][rec][rec]...[rec][BLANK.........]
      00000000001073741824   [rec][rec]...                  <- write_end
                             ^ a file is named by the CommitLog offset of its first byte

A record never spans two segments: when the next record plus 8 bytes does not
fit, the rest of the segment is a BLANK filler (quiver.wire.record.blank), so every
full segment is exactly `segment_bytes` long and segment starts are multiples
of it. Segments are not preallocated: we append with os.pwrite at the tracked
end and read with os.pread, so the file size is the written end (recovery then
only has to find the last intact record, never skip zeroed space). A write that
fails is cut back at once (`append`), and a put that fails after some of its
bytes landed is cut back by the store with `truncate`: nothing later is ever
written after torn bytes.

Threading: the broker's main thread appends and reads; the store's flush thread
calls `flush()`. The segment list is only mutated under `lock`; a flush takes a
snapshot under it and fdatasyncs outside it, so appends never wait for a disk.
"""

import bisect
import logging
import os
import threading
from dataclasses import dataclass

from quiver.wire import record

log = logging.getLogger(__name__)

NAME_DIGITS = 20


def segment_name(start: int) -> str:
    return f"{start:0{NAME_DIGITS}d}"


@dataclass(slots=True)
class Segment:
    start: int
    path: str
    fd: int
    size: int  # bytes written (== file size)

    @property
    def end(self) -> int:
        return self.start + self.size


class CommitLog:
    def __init__(self, directory: str, segment_bytes: int):
        self.dir = directory
        self.segment_bytes = segment_bytes
        self.segments: list[Segment] = []
        self._starts: list[int] = []
        self.lock = threading.Lock()
        self.flushed = 0
        self._base = 0  # write_end when there is no segment (all cut by recovery)
        self.sync_error: OSError | None = None  # a failed fdatasync: nothing is flushed after it

    # ---- lifecycle -----------------------------------------------------------

    def load(self) -> None:
        """Open the existing segments (recovery decides where the data ends)."""
        os.makedirs(self.dir, exist_ok=True)
        names = sorted(n for n in os.listdir(self.dir) if n.isdigit() and len(n) == NAME_DIGITS)
        for name in names:
            path = os.path.join(self.dir, name)
            fd = os.open(path, os.O_RDWR)
            size = os.fstat(fd).st_size
            os.lseek(fd, size, os.SEEK_SET)
            self.segments.append(Segment(int(name), path, fd, size))
        self._starts = [s.start for s in self.segments]
        self.flushed = self.write_end

    def close(self) -> None:
        with self.lock:
            for seg in self.segments:
                os.close(seg.fd)
            self.segments.clear()
            self._starts.clear()

    # ---- positions -----------------------------------------------------------

    @property
    def write_end(self) -> int:
        segs = self.segments
        return segs[-1].end if segs else self._base

    @property
    def min_offset(self) -> int:
        segs = self.segments
        return segs[0].start if segs else self._base

    def space_left(self) -> int:
        """Bytes still free in the current segment (0 when there is none yet)."""
        segs = self.segments
        return self.segment_bytes - segs[-1].size if segs else 0

    # ---- writing -------------------------------------------------------------

    def append(self, data: bytes) -> None:
        """Write bytes at the end of the current segment; the caller checked the fit.

        pwrite at the tracked end, never at the file position: a write that
        failed (ENOSPC, EIO ...) leaves `size` where it was and its torn bytes
        are cut (or, if even that fails, overwritten by the next append)."""
        seg = self.segments[-1]
        view = memoryview(data)
        pos = seg.size
        try:
            while view:  # regular files take it all at once; loop for the odd short write
                n = os.pwrite(seg.fd, view, pos)
                pos += n
                view = view[n:]
        except OSError:
            if pos > seg.size:
                _cut(seg.fd, seg.size)
            raise
        seg.size = pos

    def roll(self) -> None:
        """Start a new segment at the current end (the caller filled the old one)."""
        start = self.write_end
        if self.segments and start % self.segment_bytes:
            # Only possible after a config change of segment_bytes; keep names = offsets.
            log.warning("segment rolled at %d, not a multiple of %d", start, self.segment_bytes)
        path = os.path.join(self.dir, segment_name(start))
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        with self.lock:
            self.segments.append(Segment(start, path, fd, 0))
            self._starts.append(start)

    def truncate(self, end: int) -> None:
        """Cut the log at `end`: shorten its segment, delete every later one.

        Also the rollback of a put that failed half-way (the caller holds the
        store's flush lock): the in-memory ends move first, so a file that cannot
        be cut or removed (EIO) is still never read or built on past `end`."""
        with self.lock:
            while self.segments and self.segments[-1].start >= end and self.segments[-1].end > end:
                seg = self.segments.pop()
                self._starts.pop()
                os.close(seg.fd)
                try:
                    os.unlink(seg.path)
                except OSError as exc:
                    log.error("segment %s past the log end %d not removed: %s", seg.path, end, exc)
            if self.segments:
                seg = self.segments[-1]
                if seg.end > end:
                    seg.size = end - seg.start
                    _cut(seg.fd, seg.size)
            else:
                self._base = end
        self.flushed = min(self.flushed, end)

    def delete_oldest(self) -> Segment:
        """Remove the first segment (retention; the caller holds the flush lock)."""
        with self.lock:
            seg = self.segments.pop(0)
            self._starts.pop(0)
        os.close(seg.fd)
        os.unlink(seg.path)
        return seg

    # ---- flushing ------------------------------------------------------------

    def flush(self) -> int:
        """fdatasync every segment holding unflushed bytes; returns the new flushed end.

        A failed fdatasync is final for this process: the kernel may have dropped the
        dirty pages and a retry could "succeed" without them (fsyncgate), so `flushed`
        never moves again and every later call raises the same error; a restart's
        recovery reads what really reached the disk."""
        if self.sync_error is not None:
            raise self.sync_error
        with self.lock:
            end = self.write_end
            todo = [s.fd for s in self.segments if s.end > self.flushed]
        try:
            for fd in todo:
                os.fdatasync(fd)
        except OSError as exc:
            self.sync_error = exc
            raise
        if end > self.flushed:
            self.flushed = end
        return self.flushed

    # ---- reading -------------------------------------------------------------

    def segment_for(self, offset: int) -> Segment | None:
        i = bisect.bisect_right(self._starts, offset) - 1
        if i < 0:
            return None
        seg = self.segments[i]
        return seg if offset < seg.end else None

    def read(self, offset: int, size: int) -> bytes:
        """Bytes [offset, offset+size) of one segment (b"" if absent, short at its end)."""
        seg = self.segment_for(offset)
        if seg is None:
            return b""
        return os.pread(seg.fd, min(size, seg.end - offset), offset - seg.start)

    def read_record(self, offset: int) -> bytes | None:
        """The raw record at `offset`, or None when nothing plausible is there."""
        seg = self.segment_for(offset)
        if seg is None:
            return None
        pos = offset - seg.start
        try:
            size, blank = record.check_head(os.pread(seg.fd, 8, pos), 0, seg.size - pos)
        except record.BadRecord:
            return None
        return None if blank else os.pread(seg.fd, size, pos)

    def store_ts_at(self, offset: int) -> int | None:
        """STORETIMESTAMP of the record at `offset` (8 bytes read, no decode)."""
        seg = self.segment_for(offset)
        if seg is None:
            return None
        head = os.pread(seg.fd, record.STORE_TS_AT + 8, offset - seg.start)
        return record.store_ts_of(head) if len(head) == record.STORE_TS_AT + 8 else None


def _cut(fd: int, size: int) -> None:
    """ftruncate + fsync to `size`, logged (not raised) when the disk refuses even that."""
    try:
        os.ftruncate(fd, size)
        os.fsync(fd)
    except OSError as exc:
        log.error("could not cut a CommitLog segment back to %d bytes: %s", size, exc)
