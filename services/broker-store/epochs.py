"""The epoch file of a broker with --auto-failover, and the truncation point of a new slave.

Owns `<store dir>/epochs`: one entry per master epoch this log holds bytes of,
oldest first, appended when a broker becomes master or replicates the first
chunk of a newer epoch, rewritten whole (temp file + rename) when a new slave
cuts its log::

    +-----------+----------------+-----------+
    | epoch u32 | start u64      | crc32 u32 |   16 bytes, big-endian; crc over the first 12
    +-----------+----------------+-----------+

Epoch e holds CommitLog bytes [start(e), start(next entry)); the last entry
runs to the log's end. A torn or corrupt trailing entry reads as absent (it
was being appended when the process died: its epoch has no bytes yet, or the
next chunk writes it again); entries whose start lies past the log's end are
dropped on open (the log was cut by recovery).

`truncate_point` is the handshake rule (RocketMQ 5's controller design): walk
the slave's epochs newest first; the first one the master holds with the same
start is the common history; the slave keeps min(its end of that epoch, the
master's end of it) and cuts the rest. Does not touch the CommitLog
(replica_append.truncate does).
"""

import logging
import os
import struct
import zlib

log = logging.getLogger(__name__)

ENTRY = struct.Struct(">IQI")
BODY = struct.Struct(">IQ")


def encode(epoch: int, start: int) -> bytes:
    body = BODY.pack(epoch, start)
    return body + struct.pack(">I", zlib.crc32(body))


def decode_all(data: bytes) -> list[tuple[int, int]]:
    """Whole, intact entries in order; stops at the first torn or corrupt one."""
    out = []
    for pos in range(0, len(data) - ENTRY.size + 1, ENTRY.size):
        epoch, start, crc = ENTRY.unpack_from(data, pos)
        if zlib.crc32(data[pos:pos + BODY.size]) != crc:
            break
        out.append((epoch, start))
    return out


def ranges(entries: list[tuple[int, int]], end: int) -> dict[int, tuple[int, int]]:
    """epoch -> [start, end) of its bytes in a log that ends at `end`."""
    out = {}
    for i, (epoch, start) in enumerate(entries):
        stop = entries[i + 1][1] if i + 1 < len(entries) else end
        out[epoch] = (start, stop)
    return out


def truncate_point(mine: list[tuple[int, int]], my_end: int, theirs: list[tuple[int, int]],
                   their_end: int) -> int:
    """Where a new slave cuts its log before replicating from a master (see the module docstring).

    0 when nothing is shared, so the slave starts over from the master's history; a
    slave with no entries but bytes (never a master, never replicated with epochs)
    shares nothing either."""
    master = ranges(theirs, their_end)
    for epoch, (start, stop) in reversed(list(ranges(mine, my_end).items())):
        m = master.get(epoch)
        if m is not None and m[0] == start:
            return min(stop, m[1])
    return 0


def epoch_at(entries: list[tuple[int, int]], offset: int, end: int) -> tuple[int, int, int]:
    """(epoch, its start, its end) of the bytes at `offset`; the end of the last one is `end`."""
    found = (0, 0, end)
    for i, (epoch, start) in enumerate(entries):
        if start > offset:
            break
        stop = entries[i + 1][1] if i + 1 < len(entries) else end
        found = (epoch, start, stop)
    return found


class EpochFile:
    def __init__(self, path: str):
        self.path = path
        self.entries: list[tuple[int, int]] = []

    def load(self, log_end: int) -> None:
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            data = b""
        self.entries = decode_all(data)
        if len(data) != len(self.entries) * ENTRY.size:
            log.warning("epoch file %s: %d trailing bytes not whole entries, ignored", self.path,
                        len(data) - len(self.entries) * ENTRY.size)
        kept = [e for e in self.entries if e[1] <= log_end]
        if kept != self.entries or len(data) != len(kept) * ENTRY.size:
            self.entries = kept
            self._rewrite()

    @property
    def last(self) -> tuple[int, int] | None:
        return self.entries[-1] if self.entries else None

    @property
    def epoch(self) -> int:
        return self.entries[-1][0] if self.entries else 0

    def append(self, epoch: int, start: int) -> None:
        """A new epoch starts at `start` (durable before the caller writes bytes of it)."""
        if self.entries and epoch <= self.entries[-1][0]:
            raise ValueError(f"epoch {epoch} is not after {self.entries[-1][0]}")
        if self.entries and start < self.entries[-1][1]:
            raise ValueError(f"epoch {epoch} starts at {start}, before epoch {self.entries[-1][0]}")
        if self.entries and start == self.entries[-1][1]:
            self.entries.pop()  # the previous epoch holds no bytes: the newer one replaces it
            self.entries.append((epoch, start))
            self._rewrite()
            return
        self.entries.append((epoch, start))
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, encode(epoch, start))
            os.fsync(fd)
        finally:
            os.close(fd)

    def truncate(self, end: int) -> None:
        """The log now ends at `end`: drop the epochs with no byte left (the chunks that bring
        their bytes again name them again)."""
        kept = [e for e in self.entries if e[1] < end]
        if kept != self.entries:
            self.entries = kept
            self._rewrite()

    def _rewrite(self) -> None:
        tmp = self.path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(b"".join(encode(e, s) for e, s in self.entries))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
