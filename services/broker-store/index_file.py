"""IndexFiles: a hash index from message key to CommitLog offset (RocketMQ's layout).

Owns the `index/` files and their format; not the keys' meaning (store decides
which keys a record has) nor the records (callers recheck the key on the record,
because different keys share hashes)::

    index/<yyyyMMddHHmmssSSS>           one sparse file, mmapped
      header 40:  beginTimestamp 8 | endTimestamp 8 | beginPhyOffset 8 | endPhyOffset 8
                  | hashSlotCount 4 | indexCount 4
      slots:      slot_count x 4     latest entry number in that bucket, 0 = empty
      entries:    entry_count x 20   keyHash 4 | phyOffset 8 | timeDiff 4 | prevEntry 4

Entry numbers start at 1 (0 means "none", so the chain ends there); timeDiff is
seconds since beginTimestamp. A full file is left as is and a new one started.

The file is sparse, but nothing is stored through the mapping before its disk
space is allocated (`reserve`: posix_fallocate of the header and slots when the
file is made, of entries 1 MiB ahead): a store into a hole the disk cannot fill
is a SIGBUS that kills the broker, an allocation that fails is an OSError the
put answers before writing. A file without a whole header (killed while it was
made) opens empty.

Key hash: zlib.crc32 of the UTF-8 key, masked to 31 bits — not Java's
String.hashCode as in RocketMQ, because crc32 is one C call where hashCode is a
Python loop per character, and the file is ours alone. `key_hash(prefix_crc, k)`
chains crc32 so "topic#" is hashed once per batch.

Resident memory: pages written or read through the mapping count in the broker's
RSS (file-backed) until they are unmapped, up to the whole file (420 MB at the
defaults). Each flush pass drops the entry pages from this process
(`madvise(MADV_DONTNEED)`; for a shared file mapping the data stays in the page
cache and on disk, and a query faults a page back), and a full file its whole
mapping: what stays resident is the header and slots of the file being written
and what was read or written since the last pass.

Threading: the main thread puts and queries; the flush thread calls `flush()`,
and files are closed only under the store's flush lock.
"""

import logging
import mmap
import os
import struct
import time
import zlib

from quiver.wire import speedups
from quiver.wire.speedups import fast

log = logging.getLogger(__name__)

HEADER = struct.Struct(">qqqqii")
HEADER_SIZE = HEADER.size  # 40
SLOT = struct.Struct(">i")
ENTRY_LAYOUT = (("key_hash", "i"), ("phys_offset", "q"), ("time_diff", "i"), ("prev_entry", "i"))
ENTRY = struct.Struct(">" + "".join(fmt for _, fmt in ENTRY_LAYOUT))
ENTRY_SIZE = ENTRY.size  # 20
INT_MAX = 2**31 - 1
HASH_MASK = 0x7FFFFFFF
RESERVE_BYTES = 1 << 20  # entries allocated ahead at a time (about 52 000)
speedups.layout("index_file", ENTRY_LAYOUT, header_size=HEADER_SIZE, slot_size=SLOT.size)


def prefix_crc(topic: str) -> int:
    return zlib.crc32(topic.encode() + b"#")


def key_hash(prefix: int, key: str) -> int:
    """Hash of topic#key given prefix_crc(topic): crc32 continues over the key."""
    return zlib.crc32(key.encode(), prefix) & HASH_MASK


@fast
def put_entries(mm, items: list[tuple[int, int]], n: int, slots: int, entries_at: int,
                diff: int) -> tuple[int, int]:
    """Store (keyHash, phyOffset) items as entries n, n+1 ... of the mapping `mm`, each
    chained to its slot's previous entry: (next entry number, slots newly used).
    One loop over locals, per key of every message put (compiled twin: quiver.wire.speedups)."""
    slot_unpack, slot_pack, entry_pack = SLOT.unpack_from, SLOT.pack_into, ENTRY.pack_into
    used = 0
    for h, phys in items:
        slot_pos = HEADER_SIZE + (h % slots) * 4
        (prev,) = slot_unpack(mm, slot_pos)
        if prev <= 0 or prev >= n:
            prev = 0
            used += 1
        entry_pack(mm, entries_at + n * ENTRY_SIZE, h, phys, diff, prev)
        slot_pack(mm, slot_pos, n)
        n += 1
    return n, used


class IndexFile:
    def __init__(self, path: str, slots: int, entries: int):
        self.path = path
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        head = os.pread(self.fd, HEADER_SIZE, 0)
        # A file cut short or never given its header (killed while it was created) starts empty.
        exists = len(head) == HEADER_SIZE and HEADER.unpack(head)[5] >= 1
        if exists:
            (self.begin_ts, self.end_ts, self.begin_phy, self.end_phy, self.used_slots,
             self.count) = HEADER.unpack(head)
        else:
            self.begin_ts = self.end_ts = self.begin_phy = self.end_phy = 0
            self.used_slots, self.count = 0, 1
        self.slots, self.max_entries = slots, entries
        size = HEADER_SIZE + slots * 4 + entries * ENTRY_SIZE
        self.count = min(self.count, entries)
        if os.fstat(self.fd).st_size < size:
            os.ftruncate(self.fd, size)  # sparse: only touched pages take disk
        self.mm = mmap.mmap(self.fd, size)
        self._entries_at = HEADER_SIZE + slots * 4
        self._size = size
        # `release` drops entry pages from here: the first page holding entries only (not slots)
        self._first_entry_page = -(-self._entries_at // mmap.PAGESIZE) * mmap.PAGESIZE
        # Bytes from the file start known to be allocated (`reserve`): a store through the
        # mapping into a hole the disk cannot fill is a SIGBUS, not an exception.
        self._allocated = 0
        self.dirty = not exists
        if not exists:
            try:
                self.reserve(0)     # header and slots allocated before the header is written
            except OSError:
                self.mm.close()
                os.close(self.fd)
                os.unlink(path)     # it holds nothing yet
                raise
            self.sync_header()  # count=1 on disk before any entry

    def reserve(self, n: int) -> None:
        """Allocate disk for the header, the slots and the next `n` entries (in RESERVE_BYTES
        steps), so that writing them through the mapping cannot fault. Raises OSError
        (ENOSPC ...) before anything is written."""
        need = min(self._entries_at + (self.count + n) * ENTRY_SIZE, self._size)
        if need <= self._allocated:
            return
        end = min(max(need, self._allocated + RESERVE_BYTES), self._size)
        os.posix_fallocate(self.fd, self._allocated, end - self._allocated)
        self._allocated = end

    @property
    def full(self) -> bool:
        return self.count >= self.max_entries

    def put_many(self, items: list[tuple[int, int]], ts: int, start: int = 0) -> int:
        """Add (keyHash, phyOffset) items from `start` with one store time; returns how
        many it took (fewer when the file fills). The header is written by sync_header."""
        n = self.count
        room = self.max_entries - n
        if room <= 0:
            return 0
        todo = items[start:start + room]
        if not todo:
            return 0
        self.reserve(len(todo))  # OSError here, before the mapping is touched
        if n == 1:
            self.begin_ts, self.begin_phy = ts, todo[0][1]
        diff = (ts - self.begin_ts) // 1000
        diff = 0 if diff < 0 else INT_MAX if diff > INT_MAX else diff
        n, used = put_entries(self.mm, todo, n, self.slots, self._entries_at, diff)
        self.count = n
        self.used_slots += used
        if ts > self.end_ts:
            self.end_ts = ts
        last_phys = todo[-1][1]
        if last_phys > self.end_phy:
            self.end_phy = last_phys
        self.dirty = True
        return len(todo)

    def sync_header(self) -> None:
        HEADER.pack_into(self.mm, 0, self.begin_ts, self.end_ts, self.begin_phy, self.end_phy,
                         self.used_slots, self.count)

    def candidates(self, h: int, begin_ms: int, end_ms: int):
        """CommitLog offsets of entries with hash `h` in the time range, newest first.

        timeDiff has second resolution, so the range is widened by a second; the
        caller rechecks the exact store time on the record.
        """
        mm = self.mm
        (n,) = SLOT.unpack_from(mm, HEADER_SIZE + (h % self.slots) * 4)
        steps = 0
        while 0 < n < self.count and steps < self.max_entries:
            eh, phys, diff, prev = ENTRY.unpack_from(mm, self._entries_at + n * ENTRY_SIZE)
            ts = self.begin_ts + diff * 1000
            if eh == h and begin_ms - 1000 <= ts <= end_ms + 1000:
                yield phys
            if prev >= n:  # chains only point backwards; anything else is damage
                break
            n = prev
            steps += 1

    def flush(self) -> None:
        """Sync what was written (if anything), then drop the synced pages from RSS (`release`)."""
        # No sync_header here: the flush thread would write a half-batch header.
        count = self.count  # entries below it are whole and never written again
        if self.dirty:
            self.dirty = False
            # fdatasync writes the same dirty pages of the shared mapping, but releases the
            # GIL; mmap.flush (msync) held it for the whole write and stalled the broker loop
            try:
                os.fdatasync(self.fd)
            except OSError:
                self.dirty = True
                raise
        self.release(count)

    def release(self, count: int) -> None:
        """Drop pages from this process's RSS: every whole page of entries below `count` (also
        those a query read back since), or the whole mapping once the file is full. Only RSS
        changes: a shared file mapping's pages stay in the page cache and on disk, and a read
        faults them back (a page written meanwhile keeps its data: zapping carries its dirty
        bit to the page cache). One madvise; the kernel skips what is not resident."""
        if count >= self.max_entries:
            self.mm.madvise(mmap.MADV_DONTNEED)
            return
        end = (self._entries_at + count * ENTRY_SIZE) // mmap.PAGESIZE * mmap.PAGESIZE
        if end > self._first_entry_page:
            self.mm.madvise(mmap.MADV_DONTNEED, self._first_entry_page, end - self._first_entry_page)

    def close(self) -> None:
        self.sync_header()
        self.mm.close()
        os.close(self.fd)


class IndexService:
    """All index files, oldest first; puts go to the last one."""

    def __init__(self, directory: str, slots: int, entries: int):
        self.dir = directory
        self.slots, self.entries = slots, entries
        self.files: list[IndexFile] = []

    def load(self) -> None:
        os.makedirs(self.dir, exist_ok=True)
        for name in sorted(os.listdir(self.dir)):
            if name.isdigit():
                self.files.append(IndexFile(os.path.join(self.dir, name), self.slots,
                                            self.entries))

    def close(self) -> None:
        for f in self.files:
            f.close()
        self.files.clear()

    @property
    def end_phy(self) -> int:
        """Offset of the newest indexed record (-1 if none): rebuilds skip up to it.

        The header is written once per batch, after all its keys, so a record at
        or below end_phy has all its keys in the index.
        """
        for f in reversed(self.files):
            if f.count > 1:
                return f.end_phy
        return -1

    def _roll(self) -> IndexFile:
        name = time.strftime("%Y%m%d%H%M%S") + f"{int(time.time() * 1000) % 1000:03d}"
        while any(os.path.basename(f.path) >= name for f in self.files):
            name = str(int(name) + 1)  # two files in one ms: keep names unique and sorted
        f = IndexFile(os.path.join(self.dir, name), self.slots, self.entries)
        self.files.append(f)
        return f

    def reserve(self, n: int) -> None:
        """Allocate disk for the next `n` entries of the current file (a new one when it is full)
        before anything is written; raises OSError (ENOSPC ...) with every entry as it was.
        A batch that spills into a further file reserves that file's part when it rolls."""
        f = self.files[-1] if self.files and not self.files[-1].full else self._roll()
        f.reserve(min(n, f.max_entries - f.count))

    def put_many(self, items: list[tuple[int, int]], ts: int) -> None:
        """Index (keyHash, phyOffset) pairs in order, rolling to a new file when full.

        Each file reserves its part before writing it. Should a roll fail half-way
        (ENOSPC), the entries already written stay: they point at records the
        store then cuts, and every reader rechecks the key on the record."""
        f = self.files[-1] if self.files else self._roll()
        done = f.put_many(items, ts)
        while done < len(items):
            f.sync_header()
            f = self._roll()
            done += f.put_many(items, ts, done)

    def sync_header(self) -> None:
        if self.files:
            self.files[-1].sync_header()

    def put_keys(self, items: list[tuple[int, int]], ts: int) -> None:
        """reserve, put_many and sync_header of one put's keys; when the current file has room
        for them all (nearly every put) in one step: its put_many reserves before it writes."""
        f = self.files[-1] if self.files else None
        if f is None or f.count + len(items) > f.max_entries:
            self.reserve(len(items))
            self.put_many(items, ts)
            self.sync_header()
            return
        f.put_many(items, ts)
        f.sync_header()

    def query(self, h: int, begin_ms: int, end_ms: int):
        """Candidate offsets, newest file first (duplicates possible after a rebuild)."""
        for f in reversed(self.files):
            if f.count <= 1 or f.begin_ts > end_ms + 1000 or f.end_ts < begin_ms - 1000:
                continue
            yield from f.candidates(h, begin_ms, end_ms)

    def flush(self) -> None:
        for f in list(self.files):
            f.flush()

    def clamp_end(self, end_phy: int) -> None:
        """After the CommitLog was cut at `end_phy`: newer records must be indexed again."""
        for f in self.files:
            if f.end_phy >= end_phy:
                f.end_phy = end_phy - 1
                f.sync_header()

    def delete_below(self, min_phy: int) -> int:
        """Delete files (not the newest) whose entries all point below `min_phy`."""
        n = 0
        while len(self.files) > 1 and self.files[0].end_phy < min_phy:
            f = self.files.pop(0)
            f.close()
            os.unlink(f.path)
            n += 1
        return n
