"""The store checkpoint: how far the CommitLog and its ConsumeQueues/index are on disk.

Owns the `checkpoint` file; recovery (store) decides what the numbers mean::

    checkpoint (44 bytes, big-endian)
      0 physicMsgTimestamp 8 | 8 logicsMsgTimestamp 8 | 16 indexMsgTimestamp 8
     24 flushedOffset 8      (CommitLog bytes fdatasynced)
     32 logicsOffset 8       (CommitLog bytes whose ConsumeQueue + index entries are synced)
     40 crc32 4              (of bytes 0..39; a torn or foreign file reads as "none")

The first five fields keep RocketMQ's order (theirs ends with masterFlushedOffset
and confirmPhyOffset); the CRC is ours. A new checkpoint is written whole to
`checkpoint.tmp`, fsynced, renamed over `checkpoint` and the directory fsynced:
a crash at any point leaves the old checkpoint or the new one, never a torn one
(a torn file would read as "none" and cost a scan of the whole log). A write
that fails (ENOSPC ...) leaves the old one in place; the old one stays true,
only more conservative.
"""

import errno
import os
import struct
import zlib
from dataclasses import dataclass

_FMT = struct.Struct(">qqqqq")
_CRC = struct.Struct(">I")
SIZE = _FMT.size + _CRC.size


@dataclass(slots=True)
class Checkpoint:
    physic_ts: int = 0
    logics_ts: int = 0
    index_ts: int = 0
    flushed_offset: int = 0
    logics_offset: int = 0

    def encode(self) -> bytes:
        raw = _FMT.pack(self.physic_ts, self.logics_ts, self.index_ts, self.flushed_offset,
                        self.logics_offset)
        return raw + _CRC.pack(zlib.crc32(raw))


def read(path: str) -> Checkpoint | None:
    try:
        with open(path, "rb") as f:
            raw = f.read(SIZE)
    except FileNotFoundError:
        return None
    if len(raw) < SIZE or _CRC.unpack_from(raw, _FMT.size)[0] != zlib.crc32(raw[:_FMT.size]):
        return None
    return Checkpoint(*_FMT.unpack_from(raw))


class CheckpointFile:
    """The checkpoint file, written by the flush thread only."""

    def __init__(self, path: str):
        self.path = path
        self.tmp = path + ".tmp"
        if os.path.exists(self.tmp):
            os.unlink(self.tmp)  # a write cut short by a crash; `checkpoint` is whole
        self.dir_fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)

    def write(self, cp: Checkpoint) -> None:
        """Replace the checkpoint atomically; raises OSError with the old one intact."""
        data = cp.encode()
        fd = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            if os.write(fd, data) != len(data):
                raise OSError(errno.ENOSPC, "short write of the checkpoint")
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(self.tmp, self.path)
        os.fsync(self.dir_fd)

    def close(self) -> None:
        os.close(self.dir_fd)
