"""The store checkpoint: how far the CommitLog and its ConsumeQueues/index are on disk.

Owns the `checkpoint` file; recovery (store) decides what the numbers mean::

    checkpoint (44 bytes, big-endian)
      0 physicMsgTimestamp 8 | 8 logicsMsgTimestamp 8 | 16 indexMsgTimestamp 8
     24 flushedOffset 8      (CommitLog bytes fdatasynced)
     32 logicsOffset 8       (CommitLog bytes whose ConsumeQueue + index entries are synced)
     40 crc32 4              (of bytes 0..39; a torn or foreign file reads as "none")

The first five fields keep RocketMQ's order (theirs ends with masterFlushedOffset
and confirmPhyOffset); the CRC is ours. The file is rewritten in place with one
pwrite of 44 bytes (one sector) and fdatasync.
"""

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
    """An open checkpoint file, written by the flush thread only."""

    def __init__(self, path: str):
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)

    def write(self, cp: Checkpoint) -> None:
        os.pwrite(self.fd, cp.encode(), 0)
        os.fdatasync(self.fd)

    def close(self) -> None:
        os.close(self.fd)
