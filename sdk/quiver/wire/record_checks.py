"""The broker's checks of stored records: are these bytes the records they claim to be.

`check_run` is the pull path's check of every record it serves (RocketMQ's checkCRC and
more), `settled_run` recovery's pass over records it need not dispatch again, `check_frame`
the replication stream's check of a record's framing (its bounds, not its CRCs) and
`salvage_head` what can still be read from a damaged record. They read the layout of
record.py (its AT positions, magics and sizes) and raise or report its BadRecord;
`check_run` and `settled_run` are references of compiled twins (quiver.wire.speedups).
"""

import struct
import zlib
from typing import NamedTuple

from quiver.wire.record import (AT, FIXED_SIZE, MAGIC_V1, MAGIC_V2, MIN_RECORD, SYSFLAG_PROP_CRC, TX_COMMIT,
                                TX_MASK, TX_NOT, BadRecord, check_head, crc, prop_crc_ok)
from quiver.wire.speedups import fast

_PREFIX = struct.Struct(">iI")
_U16 = struct.Struct(">H")

# The fields a record's framing is checked by: size, magic, PHYSICALOFFSET and BODYLEN.
_FRAME = struct.Struct(f">iI{AT['phys_offset'] - AT['body_crc']}xq{AT['body_len'] - AT['sys_flag']}xi")


def check_frame(buf, pos: int, phys: int) -> tuple[int, bool]:
    """(size, is_blank) of the record at `pos`, held whole in `buf`, whose framing is intact:
    check_head's checks, then PHYSICALOFFSET is `phys` and BODYLEN, the topic length and
    PROPLEN add up to its size exactly. Its CRCs are not checked: a record whose framing
    holds but whose body or properties do not match their CRC is still one record of
    `size` bytes (replication copies it as such). Raises BadRecord otherwise."""
    size, blank = check_head(buf, pos)
    if blank:
        return size, True
    _, magic, poff, blen = _FRAME.unpack_from(buf, pos)
    end = pos + size
    p = pos + FIXED_SIZE + blen
    if poff != phys:
        raise BadRecord(f"record claims offset {poff}, not {phys}")
    if blen < 0 or p + 3 > end:
        raise BadRecord(f"body length {blen} overruns the record's size {size}")
    p += 1 + buf[p] if magic == MAGIC_V1 else 2 + (buf[p] << 8 | buf[p + 1])
    if p + 2 > end or p + 2 + (buf[p] << 8 | buf[p + 1]) != end:
        raise BadRecord(f"topic and properties lengths do not add up to the record's size {size}")
    return size, False


# The fields a served record is checked by: size, magic, body CRC, PHYSICALOFFSET, SYSFLAG and BODYLEN.
_CHECK = struct.Struct(f">iIi{AT['phys_offset'] - AT['queue_id']}xqi{AT['body_len'] - AT['born_ts']}xi")


@fast
def check_run(buf, spans, base: int) -> list[tuple[int, str]]:
    """The records of `spans` that are not whole and intact, as (index in spans, reason).

    `spans` are (CommitLog offset, size) pairs as a ConsumeQueue gives them and
    `buf` holds the bytes read from CommitLog offset `base` on. A record passes
    when its size field is the span's size, its magic is a record's, its
    PHYSICALOFFSET is its offset, its body matches BODYCRC (RocketMQ's
    checkCRC) — or, with SYSFLAG_PROP_CRC, every byte matches its __CRC32#
    property — and topic and properties end exactly at its size. The broker's
    pull path runs this over every record it serves, so per record it is one
    struct unpack, one crc32 and a few compares; [] when all pass."""
    bad = []
    view = memoryview(buf)
    unpack, crc32, v1, v2, fixed = _CHECK.unpack_from, zlib.crc32, MAGIC_V1, MAGIC_V2, FIXED_SIZE
    whole = SYSFLAG_PROP_CRC
    n = len(buf)
    for phys, size in spans:
        pos = phys - base
        end = pos + size
        try:
            total, magic, body_crc, poff, sys_flag, blen = unpack(buf, pos)
            p = pos + fixed + blen
            if total != size or poff != phys or (magic != v1 and magic != v2) or blen < 0 or p + 3 > end \
                    or end > n or (crc32(view[p - blen:p]) & 0x7FFFFFFF != body_crc if not sys_flag & whole
                                   else not prop_crc_ok(view, pos, end)):
                raise BadRecord("bad head or body")
            p += 1 + view[p] if magic == v1 else 2 + (view[p] << 8 | view[p + 1])
            if p + 2 > end or p + 2 + (view[p] << 8 | view[p + 1]) != end:
                raise BadRecord("topic/properties lengths do not match the size")
        except (BadRecord, struct.error, IndexError, ValueError) as exc:
            bad.append((spans.index((phys, size)), _why(buf, pos, phys, size, exc)))
    return bad


@fast
def settled_run(buf, rel: int, pos: int, end: int, last_start: int, queue_next: dict) -> int:
    """Bytes of the records at `buf[rel:]` (CommitLog offset `pos`) that a recovery can pass
    over without dispatching them: each one whole and intact by `check_run`'s checks, ending
    by `end`, starting at or before `last_start`, and — a normal or committed one whose
    queue is in `queue_next` ({(topic bytes, queue id): the queue's next offset}) — below
    its queue's next offset. Stops before the first record that is not (or a BLANK)."""
    n, p, at, base = len(buf), rel, pos, pos - rel
    while p + 8 <= n and at <= last_start:
        size, magic = _PREFIX.unpack_from(buf, p)
        if (magic != MAGIC_V1 and magic != MAGIC_V2) or size < MIN_RECORD or size > n - p or at + size > end:
            break
        if check_run(buf, [(at, size)], base):
            break
        _, _, _, queue_id, _, qoff, _, sys_flag, blen = _SETTLED.unpack_from(buf, p)
        if (sys_flag & TX_MASK) in (TX_NOT, TX_COMMIT):
            t = p + FIXED_SIZE + blen
            topic = bytes(buf[t + 1:t + 1 + buf[t]]) if magic == MAGIC_V1 else \
                bytes(buf[t + 2:t + 2 + (buf[t] << 8 | buf[t + 1])])
            nxt = queue_next.get((topic, queue_id))
            if nxt is not None and qoff >= nxt:
                break
        p += size
        at += size
    return at - pos


# size, magic, body CRC, QUEUEID, FLAG, QUEUEOFFSET, PHYSICALOFFSET, SYSFLAG and BODYLEN.
_SETTLED = struct.Struct(f">iIiiiqqi{AT['body_len'] - AT['born_ts']}xi")


def _why(buf, pos: int, phys: int, size: int, exc: Exception) -> str:
    """What is wrong with the record check_run refused (the rare path: worth the detail)."""
    if pos < 0 or pos + size > len(buf) or size < MIN_RECORD:
        return f"{size} bytes at {phys} not readable ({len(buf) - max(pos, 0)} there)"
    total, magic, body_crc, poff, sys_flag, blen = _CHECK.unpack_from(buf, pos)
    if magic != MAGIC_V1 and magic != MAGIC_V2:
        return f"bad magic {magic:#x}"
    if total != size:
        return f"size field {total}, the ConsumeQueue says {size}"
    if poff != phys:
        return f"PHYSICALOFFSET {poff}, read at {phys}"
    if not 0 <= blen <= size - MIN_RECORD:
        return f"body length {blen} overruns the record"
    if crc(memoryview(buf)[pos + FIXED_SIZE:pos + FIXED_SIZE + blen]) != body_crc:
        return "body CRC mismatch"
    if sys_flag & SYSFLAG_PROP_CRC and not prop_crc_ok(memoryview(buf), pos, pos + size):
        return "record CRC (__CRC32#) mismatch"
    return str(exc)


class Salvaged(NamedTuple):
    """What `salvage_head` reads of a damaged record: enough to keep its queue continuous."""
    topic: str
    queue_id: int
    queue_offset: int
    sys_flag: int


def salvage_head(buf, phys: int) -> Salvaged | None:
    """The topic, queue id, queue offset and sysflag of a damaged record that fills `buf`, read from
    its fixed fields and topic without trusting its size or CRC; None unless its magic and
    PHYSICALOFFSET (== `phys`) are intact and its topic is readable. Recovery uses it to keep
    a queue continuous past a record it cannot serve."""
    if len(buf) < MIN_RECORD:
        return None
    _, magic, _, queue_id, _, qoff, poff, sys_flag, blen = _SETTLED.unpack_from(buf, 0)
    if (magic != MAGIC_V1 and magic != MAGIC_V2) or poff != phys or not 0 <= blen <= len(buf) - MIN_RECORD:
        return None
    p = FIXED_SIZE + blen
    try:
        if magic == MAGIC_V1:
            tlen, p = buf[p], p + 1
        else:
            tlen, p = _U16.unpack_from(buf, p)[0], p + 2
        if p + tlen > len(buf):
            return None
        return Salvaged(bytes(buf[p:p + tlen]).decode(), queue_id, qoff, sys_flag)
    except (struct.error, IndexError, UnicodeDecodeError):
        return None
