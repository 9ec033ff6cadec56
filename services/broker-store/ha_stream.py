"""Replication bookkeeping without sockets: chunks, group acknowledgment, lag.

Owns what both ends of master/slave replication agree on and what the master
counts; not the sockets and threads (ha_master, ha_slave) nor the files
(store.append_replicated writes what `check_chunk` accepted)::

    HA socket (--ha-listen, ROUTER on the master, DEALER per slave), quiver.wire.protocol frames
    whose fields are the schemas quiver.wire.requests.HaReport / HaTransfer:
      slave  -> master  HA_REPORT   {"o": slave CommitLog max offset, "addr", "id", "reset"?}
      master -> slave   HA_TRANSFER {"o": start offset, "sb": segment bytes, "me": master max offset}
                                    body: whole CommitLog records [o, o + len) of ONE segment
                                    (no body: a heartbeat)

A slave only ever sends reports (a small header, no body), so the master's
socket refuses frames over REPORT_MAX_FRAME_BYTES.

A chunk is always whole records (`aligned_prefix`), so the slave can CRC-check
and dispatch every record of it at once; a record never spans segments, and a
BLANK filler ends its segment, as in the master's CommitLog.
"""

import bisect
import collections
import time
from typing import NamedTuple

from quiver.wire import record

REPORT_MAX_FRAME_BYTES = 64 * 1024  # far above an HA_REPORT header (< 1 KiB)


def aligned_prefix(buf, limit: int) -> int:
    """Bytes of `buf` that are whole records (0 when the first record is longer than buf).

    Walks the 8-byte headers only; `limit` caps the answer (a chunk size)."""
    pos, n = 0, min(len(buf), limit)
    peek = record.peek
    while pos + 8 <= n:
        size, _ = peek(buf, pos)
        if size < 8 or pos + size > n:
            break
        pos += size
    return pos


def first_record_size(buf) -> int:
    return record.peek(buf, 0)[0] if len(buf) >= 8 else 0


def check_chunk(data, offset: int, segment_bytes: int) -> list:
    """Decode and verify a replicated chunk; returns its records (None for a BLANK).

    Raises ValueError on anything but whole, intact records at their own
    PHYSICALOFFSET, with a BLANK only as the last record and reaching the end of
    its segment."""
    out = []
    pos, end = 0, len(data)
    while pos < end:
        if end - pos < 8:
            raise ValueError(f"torn record header at {offset + pos}")
        try:
            size, blank = record.check_head(data, pos)
        except record.BadRecord as exc:
            raise ValueError(f"bad record at {offset + pos}: {exc}") from None
        if blank:
            if pos + size != end or (offset + end) % segment_bytes:
                raise ValueError(f"BLANK at {offset + pos} does not end its segment")
            out.append(None)
            pos += size
            continue
        try:
            rec = record.decode_at(data, pos, check_crc=True)
        except record.BadRecord as exc:
            raise ValueError(f"bad record at {offset + pos}: {exc}") from None
        if rec.phys_offset != offset + pos:
            raise ValueError(f"record at {offset + pos} claims offset {rec.phys_offset}")
        out.append(rec)
        pos += rec.size
    return out


def runs(recs: list) -> list[list]:
    """Consecutive records of one put (same topic, queue, tx kind, store time), in order."""
    out: list[list] = []
    key = None
    for rec in recs:
        if rec is None:
            continue
        k = (rec.topic, rec.queue_id, rec.sys_flag & record.TX_MASK, rec.store_ts)
        if k != key:
            out.append([])
            key = k
        out[-1].append(rec)
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
