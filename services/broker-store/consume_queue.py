"""A ConsumeQueue: the per-(topic, queue) index from logical offset to CommitLog record.

Owns the files of one queue and the entry format; not the records themselves
(commit_log) nor which records get an entry (store)::

    consumequeue/<topic>/<queueId>/<20-digit start byte offset>
      entry n at byte n*20:  commitLogOffset 8 | size 4 | tagsCode 8   (big-endian)

tagsCode is the tag hash (quiver.client.message.tag_hash), or the delivery time for the
scheduler topics. A file holds `entries_per_file` entries; files are appended
(pwrite at the tracked end), not preallocated, so a file's size says how many
entries it has; an append that fails is cut back whole (`append`). A file is
named by the byte offset of its first entry, normally a multiple of the file
capacity; the name is only ever used as "where this file starts", so a queue
rebuilt from a later offset can start anywhere.

Logical offsets: `max_offset` is one past the last entry; `min_offset` is the
first entry whose record still exists (the store moves it after retention).
Within a queue the CommitLog offsets only grow, which the binary searches use.

`queue_dir` is the one place a queue's directory is built from its names: the
topic must be a valid name (quiver.wire.names) and the resolved path must lie under
the consumequeue directory, so no topic or queue id can reach outside it.
"""

import bisect
import collections
import logging
import os
import shutil
import struct

from quiver.wire import names
from quiver.errors import MessageIllegalError, QuiverError
from quiver.wire import speedups
from quiver.wire.speedups import fast

from .commit_log import NAME_DIGITS

log = logging.getLogger(__name__)

ENTRY_LAYOUT = (("phys_offset", "q"), ("size", "i"), ("tags_code", "q"))  # the compiled twin's too
ENTRY = struct.Struct(">" + "".join(fmt for _, fmt in ENTRY_LAYOUT))
ENTRY_SIZE = ENTRY.size  # 20
speedups.layout("consume_queue", ENTRY_LAYOUT)


@fast
def pack_entries(phys_offsets, sizes, codes) -> bytes:
    """Entries for a run of records, ready for `append` (compiled twin: quiver.wire.speedups)."""
    return b"".join(map(ENTRY.pack, phys_offsets, sizes, codes))


def queue_dir(root: str, topic: str, queue_id: int | None = None) -> str:
    """`root/<topic>` or `root/<topic>/<queueId>`, resolved. Raises MessageIllegalError for a
    topic that is not a valid name or a queue id that is not an int >= 0, and
    names.UnsafePathError if the path would leave `root` (a symlink pointing out)."""
    names.check_topic(topic)
    if queue_id is None:
        return names.confine(root, topic)
    if type(queue_id) is not int or queue_id < 0:
        raise MessageIllegalError(f"queue id must be an integer >= 0, got {queue_id!r}")
    return names.confine(root, topic, str(queue_id))


def load_queues(root: str, entries_per_file: int) -> tuple[dict, int]:
    """({(topic, queue id): loaded ConsumeQueue} of every queue under `root`, directories
    skipped). A directory whose name is not a valid topic or canonical queue id, or that
    resolves outside `root`, is skipped with a log line, not loaded."""
    out, skipped = {}, 0
    for topic in os.listdir(root):
        try:
            tdir = queue_dir(root, topic)
        except QuiverError as exc:
            log.warning("consumequeue/%s skipped: %s", ascii(topic), exc.remark)
            skipped += 1
            continue
        if not os.path.isdir(tdir):
            continue
        for qid in os.listdir(tdir):
            if not (qid.isascii() and qid.isdigit() and qid == str(int(qid))):
                log.warning("consumequeue/%s/%s skipped: not a queue id", topic, ascii(qid))
                skipped += 1
                continue
            cq = ConsumeQueue(queue_dir(root, topic, int(qid)), topic, int(qid), entries_per_file)
            cq.load()
            out[(topic, int(qid))] = cq
    return out, skipped


class _File:
    __slots__ = ("start", "path", "fd", "size")

    def __init__(self, start: int, path: str, fd: int, size: int):
        self.start, self.path, self.fd, self.size = start, path, fd, size

    @property
    def end(self) -> int:
        return self.start + self.size


class ConsumeQueue:
    def __init__(self, directory: str, topic: str, queue_id: int, entries_per_file: int):
        self.dir = directory
        self.topic = topic
        self.queue_id = queue_id
        self.file_bytes = entries_per_file * ENTRY_SIZE
        self.files: list[_File] = []
        self._starts: list[int] = []
        self.min_offset = 0
        self._base = 0  # max_offset of a queue with no files
        self.dirty = False
        # SYNC flush: (commitlog end, first queue offset) of batches not yet fsynced,
        # so readers can stop at what is durable (see MessageStore.visible_max).
        self.pending: collections.deque[tuple[int, int]] = collections.deque()

    # ---- lifecycle -----------------------------------------------------------

    def load(self) -> None:
        """Open the files; drop a torn trailing entry and zeroed (never written) tail."""
        names = sorted(n for n in os.listdir(self.dir) if n.isdigit() and len(n) == NAME_DIGITS)
        for name in names:
            path = os.path.join(self.dir, name)
            fd = os.open(path, os.O_RDWR)
            self.files.append(_File(int(name), path, fd, os.fstat(fd).st_size))
        self._starts = [f.start for f in self.files]
        if self.files:
            last = self.files[-1]
            whole = last.size - last.size % ENTRY_SIZE
            # A crash can leave zeroed entries when the file grew but the data did not land.
            while whole > 0:
                _, size, _ = ENTRY.unpack(os.pread(last.fd, ENTRY_SIZE, whole - ENTRY_SIZE))
                if size > 0:
                    break
                whole -= ENTRY_SIZE
            if whole != last.size:
                log.warning("%s/%d: dropping %d torn bytes", self.topic, self.queue_id,
                            last.size - whole)
                os.ftruncate(last.fd, whole)
                last.size = whole
            os.lseek(last.fd, last.size, os.SEEK_SET)
            self.min_offset = self.files[0].start // ENTRY_SIZE

    def close(self) -> None:
        for f in self.files:
            os.close(f.fd)
        self.files.clear()
        self._starts.clear()

    def destroy(self) -> None:
        self.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # ---- offsets -------------------------------------------------------------

    @property
    def max_offset(self) -> int:
        return self.files[-1].end // ENTRY_SIZE if self.files else self._base

    def start_at(self, offset: int) -> None:
        """An empty queue (e.g. rebuilt after retention) continues at `offset`."""
        if not self.files:
            self._base = self.min_offset = offset

    # ---- writing -------------------------------------------------------------

    def append(self, entries: bytes) -> None:
        """Append packed entries (multiple of 20 bytes), rolling files as they fill.

        All or nothing: on a write error (ENOSPC, EIO ...) the queue is cut back
        to where it was (files created for it removed) and the error re-raised,
        so `max_offset` never counts an entry that is not whole on disk."""
        mark = self.max_offset
        view = memoryview(entries)
        try:
            while view:
                if not self.files or self.files[-1].size >= self.file_bytes:
                    self._new_file()
                f = self.files[-1]
                chunk = view[:self.file_bytes - f.size]
                n = os.pwrite(f.fd, chunk, f.size)  # at the tracked end, not the file position
                f.size += n
                view = view[n:]
        except OSError:
            self.truncate_to(mark)
            raise
        self.dirty = True

    def _new_file(self) -> None:
        if self.files:
            # The flush thread only syncs the last file: settle the full one now (rare).
            os.fdatasync(self.files[-1].fd)
            start = self.files[-1].end
        else:
            start = self._base * ENTRY_SIZE
        os.makedirs(self.dir, exist_ok=True)
        path = os.path.join(self.dir, f"{start:0{NAME_DIGITS}d}")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        self.files.append(_File(start, path, fd, 0))
        self._starts.append(start)

    def flush(self) -> None:
        if self.dirty and self.files:
            self.dirty = False  # before the sync: an append meanwhile marks it again
            try:
                os.fdatasync(self.files[-1].fd)
            except OSError:
                self.dirty = True
                raise

    def truncate_to(self, offset: int) -> None:
        """Keep entries below logical `offset` only (recovery, and a failed append's rollback).
        The in-memory sizes move first: a file the disk will not cut is still never read past."""
        pos = offset * ENTRY_SIZE
        while self.files and self.files[-1].start >= pos and (self.files[-1].size or self.files[-1].start > pos):
            f = self.files.pop()
            self._starts.pop()
            os.close(f.fd)
            try:
                os.unlink(f.path)
            except OSError as exc:
                log.error("%s/%d: file %s not removed: %s", self.topic, self.queue_id, f.path, exc)
        if self.files and self.files[-1].end > pos:
            f = self.files[-1]
            f.size = pos - f.start
            try:
                os.ftruncate(f.fd, f.size)
            except OSError as exc:
                log.error("%s/%d: could not cut %s to %d bytes: %s", self.topic, self.queue_id, f.path,
                          f.size, exc)
            os.lseek(f.fd, f.size, os.SEEK_SET)
        if not self.files:
            self._base = offset
        self.min_offset = min(self.min_offset, self.max_offset)

    def delete_files_below(self, offset: int) -> int:
        """Delete whole files whose entries are all below `offset`; keeps the last file."""
        n = 0
        while len(self.files) > 1 and self.files[0].end <= offset * ENTRY_SIZE:
            f = self.files.pop(0)
            self._starts.pop(0)
            os.close(f.fd)
            os.unlink(f.path)
            n += 1
        return n

    # ---- reading -------------------------------------------------------------

    def read(self, offset: int, count: int) -> bytes:
        """Up to `count` packed entries from `offset`, from one file (one pread)."""
        pos = offset * ENTRY_SIZE
        i = bisect.bisect_right(self._starts, pos) - 1
        if i < 0:
            return b""
        f = self.files[i]
        if pos >= f.end:
            return b""
        n = min(count * ENTRY_SIZE, f.end - pos)
        return os.pread(f.fd, n, pos - f.start)

    def entry(self, offset: int) -> tuple[int, int, int] | None:
        raw = self.read(offset, 1)
        return ENTRY.unpack(raw) if len(raw) == ENTRY_SIZE else None

    def first_offset_where(self, pred, lo: int | None = None) -> int:
        """Smallest logical offset whose entry satisfies the monotonic `pred(entry)`.

        Returns max_offset when none does. Entries outside the files count as False.
        """
        lo = self.files[0].start // ENTRY_SIZE if lo is None and self.files else (lo or 0)
        hi = self.max_offset
        while lo < hi:
            mid = (lo + hi) // 2
            e = self.entry(mid)
            if e is not None and pred(e):
                hi = mid
            else:
                lo = mid + 1
        return lo
