"""Replication bookkeeping without sockets: chunks, damaged bytes, group acknowledgment, lag.

Owns what both ends of master/slave replication agree on and what the master
counts; not the sockets and threads (ha_master, ha_slave) nor the files
(replica_append writes what `check_chunk` accepted)::

    HA socket (--ha-listen, ROUTER on the master, DEALER per slave), quiver.wire.protocol frames
    whose fields are the schemas quiver.wire.requests.HaReport / HaTransfer:
      slave  -> master  HA_REPORT   {"o": slave CommitLog max offset, "addr", "id", "reset"?}
      master -> slave   HA_TRANSFER {"o": start offset, "sb": segment bytes, "me": master max offset}
                                    body: CommitLog bytes [o, o + len) of ONE segment, verbatim
                                    (no body: a heartbeat)

A slave only ever sends reports (a small header, no body), so the master's
socket refuses frames over REPORT_MAX_FRAME_BYTES.

A chunk ends on a record boundary, so the slave can check and dispatch all of
it at once; a record never spans segments, and a BLANK filler ends its
segment, as in the master's CommitLog.

Damaged records on the master (a flipped byte on its disk). The slave is a
byte replica: its CommitLog offsets are the master's, always, so it copies
damage too rather than stopping or leaving a hole (RocketMQ's HA also ships
raw bytes and leaves the checks to the slave's dispatch). Two kinds:

- framing intact, a CRC wrong (body, or __CRC32# with --append-prop-crc):
  the size field is trusted because the record's own lengths add up to it
  and its PHYSICALOFFSET is right (`record_checks.check_frame`). The master streams
  it like any record; the slave copies it, counts and logs it, and gives it
  the ConsumeQueue entry the master gave it (from its salvaged header), so
  queue offsets stay the master's; served, the slave's pull path skips it by
  its CRC and counts it, like the master's;
- framing broken (size, magic, lengths or PHYSICALOFFSET): where the record
  ends is unknown. The damage is taken to run to the next intact record (its
  magic, its own PHYSICALOFFSET and its CRC: recovery.resync's rule) or to
  the end of its segment once a later segment exists. The master sends
  exactly those bytes as one chunk (`frame_prefix` never lets framing damage
  into an ordinary chunk), the slave applies the same rule inside a chunk
  (`resync_in`, then the chunk's end), so both sides cut the same span and
  every record after it is replicated intact at its own offset. Damage with
  nothing intact after it yet (the tail of the log) waits for the next put:
  the master's own recovery would cut such a tail after a restart, and a
  slave holding it would then be ahead of its master. The span gets a queue entry when its header is salvageable
  (record_checks.salvage_head), else the slave fills the queue gap it leaves when
  the queue's next record arrives (replica_append).
Nothing acknowledged behind a bad record is lost, and the bad record is
served by neither side.
"""

import bisect
import collections
import time
from typing import NamedTuple

from quiver.wire import record, record_checks

REPORT_MAX_FRAME_BYTES = 64 * 1024  # far above an HA_REPORT header (< 1 KiB)
_MAGICS = tuple(m.to_bytes(4, "big") for m in (record.MAGIC_V1, record.MAGIC_V2, record.MAGIC_BLANK))


def frame_prefix(buf, offset: int, limit: int, segment_bytes: int) -> int:
    """Bytes of `buf` (CommitLog bytes from `offset`) that are whole records with intact
    framing, at most `limit`: stops before the first record that is longer than what is
    left, or whose framing is broken (a BLANK must end its segment). Walks headers and
    lengths only; CRCs are the slave's to check."""
    pos, n = 0, min(len(buf), limit)
    view = buf if n == len(buf) else memoryview(buf)[:n]
    check = record_checks.check_frame
    while pos < n:
        try:
            size, blank = check(view, pos, offset + pos)
        except (record.BadRecord, IndexError):
            break
        if blank and (offset + pos + size) % segment_bytes:
            break
        pos += size
    return pos


class Damage(NamedTuple):
    """Replicated bytes that are not an intact record: copied as they are."""
    offset: int         # CommitLog offset of the first byte
    size: int
    head: record_checks.Salvaged | None  # what record_checks.salvage_head could read, or None
    store_ts: int       # STORETIMESTAMP if the bytes hold one (a ConsumeQueue entry's time), else 0
    props: str          # the properties if still readable (the entry's tag), else ""
    framed: bool        # True: one record whose framing holds and a CRC does not
    why: str


def check_chunk(data, offset: int, segment_bytes: int) -> list:
    """Decode and verify a replicated chunk: its records (None for a BLANK) and Damage.

    A record with intact framing and a bad CRC is one framed Damage; broken framing
    is a Damage up to the next intact record in the chunk, or the chunk's end (see
    the module docstring). Raises ValueError only for what the master never sends:
    a BLANK that does not end the chunk and its segment."""
    out = []
    pos, end = 0, len(data)
    while pos < end:
        phys = offset + pos
        try:
            size, blank = record_checks.check_frame(data, pos, phys)
        except (record.BadRecord, IndexError) as exc:
            nxt = resync_in(data, pos, offset, segment_bytes)
            nxt = end if nxt is None else nxt
            out.append(_damage(data, pos, nxt, phys, False, str(exc)))
            pos = nxt
            continue
        if blank:
            if pos + size != end or (offset + end) % segment_bytes:
                raise ValueError(f"BLANK at {phys} does not end its segment")
            out.append(None)
            pos += size
            continue
        try:
            out.append(record.decode_at(data, pos, check_crc=True))
        except record.BadRecord as exc:
            out.append(_damage(data, pos, pos + size, phys, True, str(exc)))
        pos += size
    return out


def _damage(data, pos: int, end: int, phys: int, framed: bool, why: str) -> Damage:
    raw = bytes(data[pos:end])
    store_ts = record.store_ts_of(raw) if len(raw) >= record.STORE_TS_AT + 8 else 0
    props = ""
    if framed:
        try:
            props = record.decode_at(raw).props  # the CRC is what failed, not the fields
        except record.BadRecord:
            pass
    return Damage(phys, end - pos, record_checks.salvage_head(raw, phys), store_ts, props, framed, why)


def resync_in(data, pos: int, offset: int, segment_bytes: int) -> int | None:
    """recovery.resync's rule inside a chunk: the position of the first intact record after
    damage at `pos` (its magic, its own PHYSICALOFFSET, its CRC), or of a BLANK ending its
    segment, lying whole in `data`; None if there is none."""
    best = None
    for magic in _MAGICS:
        i = data.find(magic, pos + 5)  # the magic sits 4 bytes into a record
        while i >= 0 and (best is None or i - 4 < best):
            if _intact_in(data, i - 4, offset, segment_bytes):
                best = i - 4
                break
            i = data.find(magic, i + 1)
    return best


def _intact_in(data, pos: int, offset: int, segment_bytes: int) -> bool:
    try:
        size, blank = record.check_head(data, pos)
        if blank:
            return (offset + pos + size) % segment_bytes == 0 and pos + size == len(data)
        rec = record.decode_at(data, pos, check_crc=True)
    except record.BadRecord:
        return False
    return rec.phys_offset == offset + pos and rec.size == size


def groups(items: list) -> list:
    """check_chunk's items in order: lists of consecutive records of one put (same topic,
    queue, tx kind, store time), and each Damage on its own; BLANKs left out."""
    out: list = []
    key = None
    for item in items:
        if item is None:
            continue
        if isinstance(item, Damage):
            out.append(item)
            key = None
            continue
        k = (item.topic, item.queue_id, item.sys_flag & record.TX_MASK, item.store_ts)
        if k != key:
            out.append([])
            key = k
        out[-1].append(item)
    return out


class SlaveWait(NamedTuple):
    end: int            # CommitLog offset a slave must ack
    deadline: float     # time.monotonic()
    req: object         # quiver.runtime.service.Request
    reply_ext: dict


class GroupAck:
    """SYNC_MASTER's waiting replies (SlaveWait), in offset order.

    One list for the whole broker, like the SYNC flush list: a slave's ack of
    offset A completes every entry ending at or before A at once."""

    def __init__(self, timeout_s: float):
        self.timeout_s = timeout_s
        self.waiting: collections.deque = collections.deque()

    def add(self, end: int, req, out: dict, now: float | None = None) -> None:
        self.waiting.append(SlaveWait(end, (now or time.monotonic()) + self.timeout_s, req, out))

    def acked(self, offset: int) -> list[SlaveWait]:
        """Entries now acknowledged (removed)."""
        done, w = [], self.waiting
        while w and w[0].end <= offset:
            done.append(w.popleft())
        return done

    def expired(self, now: float) -> list[SlaveWait]:
        """Entries past their deadline (removed); deadlines grow with offsets."""
        done, w = [], self.waiting
        while w and w[0].deadline <= now:
            done.append(w.popleft())
        return done

    def __len__(self) -> int:
        return len(self.waiting)


class LagTracker:
    """When each CommitLog end was written, to turn a slave's ack into seconds of lag.

    `note(end, t)` per put (the service thread appends to a deque; the HA thread
    drains it); `lag_ms(acked, now)` is the age of the oldest byte the slave
    lacks; `acked(prev, new, now)` records one latency sample per put covered."""

    def __init__(self, keep: int = 20_000):
        self.ends: list[int] = []
        self.times: list[float] = []
        self.samples: collections.deque = collections.deque(maxlen=keep)

    def note(self, end: int, t: float) -> None:
        if self.ends and end <= self.ends[-1]:
            return
        self.ends.append(end)
        self.times.append(t)

    def lag_ms(self, acked: int, now: float) -> float:
        i = bisect.bisect_right(self.ends, acked)
        return (now - self.times[i]) * 1000 if i < len(self.ends) else 0.0

    def acked(self, prev: int, new: int, now: float) -> None:
        i = bisect.bisect_right(self.ends, prev)
        j = bisect.bisect_right(self.ends, new)
        self.samples.extend((now - t) * 1000 for t in self.times[i:j])

    def trim(self, below: int) -> None:
        """Forget ends every slave has (keep the newest)."""
        i = min(bisect.bisect_right(self.ends, below), len(self.ends) - 1)
        if i > 0:
            del self.ends[:i]
            del self.times[:i]

    def percentiles(self) -> dict:
        s = sorted(self.samples)
        if not s:
            return {"n": 0}
        pick = lambda q: round(s[min(len(s) - 1, int(q * len(s)))], 2)  # noqa: E731
        return {"n": len(s), "p50_ms": pick(0.5), "p99_ms": pick(0.99), "max_ms": round(s[-1], 2)}
