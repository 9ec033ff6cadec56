"""A compacted log: the latest record of every key of one queue, below its watermark.

Owns the file format, its atomic replacement and reads from it; not which
records are kept (compaction.py) nor when reads come here (queue_reads)::

    compaction/<topic>/<queueId>/compacted
      head   magic 4 | count 4 | watermark 8 | data_bytes 8 | index_crc 4 | head_crc 4   (32 bytes)
      index  count x [queueOffset 8 | commitLogOffset 8 | pos 8 | size 4 | tagsCode 8]  (36 bytes each)
      data   the kept records, byte for byte as stored in the CommitLog, `pos` from here

Records keep their original queue offset and CommitLog offset fields, so a pull
serves them unchanged and a consumer reading from 0 sees ascending offsets with
gaps. `watermark` is the queue offset the log covers up to (exclusive): reads
below it come from here, reads at or past it from the ConsumeQueue.

A new log is written to `compacted.tmp`, fsynced, renamed over `compacted` and
the directory fsynced (`write`): a crash anywhere leaves the old file or the
new one, never a mix. A leftover `.tmp` is removed on load. The index has its
CRC; every served record is checked like a CommitLog record (record_checks).
"""

from __future__ import annotations

import bisect
import logging
import os
import struct
import zlib
from typing import Callable, Iterable

from quiver.wire import names, record_checks

log = logging.getLogger(__name__)

MAGIC = 0x51564C43   # "QVLC"
HEAD = struct.Struct(">IIqqII")
HEAD_SIZE = HEAD.size  # 32
ENTRY = struct.Struct(">qqqiq")
ENTRY_SIZE = ENTRY.size  # 36
FILE_NAME = "compacted"
TMP_NAME = FILE_NAME + ".tmp"


class CorruptLog(Exception):
    """A compacted file whose head or index fails its checks."""


def log_dir(root: str, topic: str, queue_id: int) -> str:
    """`root/<topic>/<queueId>`, the topic name checked and the path confined under `root`."""
    names.check_topic(topic)
    return names.confine(root, topic, str(int(queue_id)))


class CompactedLog:
    """One queue's compacted file, open for reads (main thread)."""

    def __init__(self, path: str, fd: int, watermark: int, entries: list[tuple[int, int, int, int, int]],
                 data_start: int):
        self.path = path
        self.fd = fd
        self.watermark = watermark
        self.entries = entries            # (queue offset, CommitLog offset, pos, size, tags code)
        self.offsets = [e[0] for e in entries]
        self.data_start = data_start

    @property
    def low(self) -> int:
        """The first queue offset it holds (its watermark when empty)."""
        return self.offsets[0] if self.offsets else self.watermark

    @property
    def data_bytes(self) -> int:
        return sum(e[3] for e in self.entries)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def record(self, i: int) -> bytes:
        e = self.entries[i]
        return os.pread(self.fd, e[3], self.data_start + e[2])

    def read(self, offset: int, max_msgs: int, tag_hashes: set[int] | None,
             max_bytes: int) -> tuple[list[bytes], int, list[tuple[int, str]]]:
        """(records, next queue offset, [(queue offset, why) of records failing their check])
        from `offset` on, below the watermark: at least one, then at most `max_bytes`."""
        i = bisect.bisect_left(self.offsets, offset)
        out: list[bytes] = []
        bad: list[tuple[int, str]] = []
        total = 0
        nxt = offset
        while i < len(self.entries) and len(out) < max_msgs:
            qoff, phys, pos, size, code = self.entries[i]
            if tag_hashes is not None and code not in tag_hashes:
                nxt, i = qoff + 1, i + 1
                continue
            if out and total + size > max_bytes:
                break
            buf = os.pread(self.fd, size, self.data_start + pos)
            failed = record_checks.check_run(buf, [(phys, size)], phys)
            if failed:
                bad.append((qoff, failed[0][1]))
            else:
                out.append(buf)
                total += size
            nxt, i = qoff + 1, i + 1
        if i >= len(self.entries):
            nxt = max(nxt, self.watermark)   # past the last kept record: on to the ConsumeQueue
        return out, nxt, bad


def load(directory: str) -> CompactedLog | None:
    """The compacted log in `directory` (None if there is none); a leftover temp file is removed.
    Raises CorruptLog for a file that fails its checks."""
    tmp = os.path.join(directory, TMP_NAME)
    if os.path.exists(tmp):
        os.unlink(tmp)
    path = os.path.join(directory, FILE_NAME)
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        return opened(path, fd)
    except BaseException:
        os.close(fd)
        raise


def opened(path: str, fd: int) -> CompactedLog:
    """The compacted log open at `fd` (a pass in a child process reads the broker's open file).
    Raises CorruptLog for a file that fails its checks."""
    head = os.pread(fd, HEAD_SIZE, 0)
    if len(head) != HEAD_SIZE:
        raise CorruptLog(f"{path}: torn head")
    magic, count, watermark, data_bytes, index_crc, head_crc = HEAD.unpack(head)
    if magic != MAGIC or zlib.crc32(head[:-4]) != head_crc:
        raise CorruptLog(f"{path}: bad head")
    raw = os.pread(fd, count * ENTRY_SIZE, HEAD_SIZE)
    data_start = HEAD_SIZE + count * ENTRY_SIZE
    if len(raw) != count * ENTRY_SIZE or zlib.crc32(raw) != index_crc \
            or os.fstat(fd).st_size != data_start + data_bytes:
        raise CorruptLog(f"{path}: index or size does not match its head")
    return CompactedLog(path, fd, watermark, list(ENTRY.iter_unpack(raw)), data_start)


def write(directory: str, watermark: int, kept: list[tuple[int, int, int, int]], records: Iterable[bytes],
          step: Callable[[str], None] = lambda point: None) -> CompactedLog:
    """Write a new compacted log and put it in place atomically; returns it opened. `kept`:
    (queue offset, CommitLog offset, size, tags code) ascending by queue offset; `records`: their
    bytes in the same order. `step(point)` runs between stages (where the
    crash-point test kills a pass)."""
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, TMP_NAME)
    entries, pos = [], 0
    for qoff, phys, size, code in kept:
        entries.append((qoff, phys, pos, size, code))
        pos += size
    index = b"".join(ENTRY.pack(*e) for e in entries)
    head = HEAD.pack(MAGIC, len(entries), watermark, pos, zlib.crc32(index), 0)[:-4]
    head += struct.pack(">I", zlib.crc32(head))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, head + index)
        step("index written")
        n = 0
        for (_, _, _, size, _), rec in zip(entries, records):
            if len(rec) != size:
                raise ValueError(f"record of queue offset {entries[n][0]}: {len(rec)} bytes, its entry says {size}")
            os.write(fd, rec)
            n += 1
            step("record")
        if n != len(entries):
            raise ValueError(f"{n} records for {len(entries)} entries")
        os.fsync(fd)
        step("fsynced")
    finally:
        os.close(fd)
    os.rename(tmp, os.path.join(directory, FILE_NAME))
    step("renamed")
    dfd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    step("directory fsynced")
    out = load(directory)
    if out is None:
        raise CorruptLog(f"{directory}: the file just renamed into place is gone")
    return out
