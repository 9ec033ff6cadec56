"""The CommitLog record: RocketMQ's field order, one struct drives encode and decode.

The broker writes these records to disk and a pull reply carries them verbatim,
so the SDK decodes exactly what the broker stored::

     0 TOTALSIZE  4 | 4 MAGICCODE 4 | 8 BODYCRC 4 | 12 QUEUEID 4 | 16 FLAG 4
    20 QUEUEOFFSET 8 | 28 PHYSICALOFFSET 8 | 36 SYSFLAG 4 | 40 BORNTIMESTAMP 8
    48 BORNHOST 8 (ipv4 4 + port 4) | 56 STORETIMESTAMP 8 | 64 STOREHOST 8
    72 RECONSUMETIMES 4 | 76 PREPARED_TX_OFFSET 8 | 84 BODYLEN 4 | body
    | TOPICLEN 1 (v1) or 2 (v2, topic > 127 bytes) | topic | PROPLEN 2 | properties

BODYCRC = crc32(body) & 0x7FFFFFFF. A BLANK record (magic 0xCBD43194, 8 bytes
minimum) pads the end of a segment. Properties are "name\\x01value\\x02" repeated
(property_string.py owns that format).
Optionally (RocketMQ's enabledAppendPropCRC, marked by SYSFLAG_PROP_CRC) the
properties end with __CRC32#, a CRC of every byte of the record before it.
Clients never see __CRC32# (`client_properties`, RocketMQ's MessageDecoder drops
PROPERTY_CRC32 too). The broker's checks of stored runs (check_run, settled_run,
check_frame, salvage_head) are record_checks.py's. This module owns bytes only: no
file I/O. `encode_run` and `decode_fields` are the per-message hot path: each is the
reference of a compiled twin (quiver.wire.speedups), which returns the same or leaves
the input to it.
"""

import struct
import zlib
from dataclasses import dataclass
from typing import NamedTuple

from quiver.wire import speedups
from quiver.wire.property_string import NAME_SEP, PROP_SEP, format_properties, parse_properties
from quiver.wire.speedups import fast

MAGIC_V1 = 0xDAA320A7
MAGIC_V2 = 0xDAA320AB
MAGIC_BLANK = 0xCBD43194

# The fixed fields in order: the struct, every named position and the compiled twins' positions
# (handed over below) come from this one table.
_LAYOUT = (("size", "i"), ("magic", "I"), ("body_crc", "i"), ("queue_id", "i"), ("flag", "i"),
           ("queue_offset", "q"), ("phys_offset", "q"), ("sys_flag", "i"), ("born_ts", "q"),
           ("born_host", "8s"), ("store_ts", "q"), ("store_host", "8s"), ("reconsume", "i"),
           ("prepared_offset", "q"), ("body_len", "i"))
_FIXED = struct.Struct(">" + "".join(fmt for _, fmt in _LAYOUT))
FIXED_SIZE = _FIXED.size  # 88: fixed fields through BODYLEN
AT = {name: struct.calcsize(">" + "".join(fmt for _, fmt in _LAYOUT[:i])) for i, (name, _) in enumerate(_LAYOUT)}
QUEUE_OFFSET_AT = AT["queue_offset"]
STORE_TS_AT = AT["store_ts"]
BODY_LEN_AT = AT["body_len"]
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_PREFIX = struct.Struct(">iI")
_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
MIN_RECORD = FIXED_SIZE + 1 + 2
MAX_PROPERTIES_BYTES = 32767


class RunHead(NamedTuple):
    """What every record of a run (`encode_run`) shares. `phys` is the first record's CommitLog
    offset, `first_qoff` its queue offset (None: every record gets 0, half and rollback
    records); `born_host`/`store_host` are 8 bytes (ipv4 + port)."""
    topic: bytes
    queue_id: int
    first_qoff: int | None
    phys: int
    sys_flag: int
    born_ts: int
    born_host: bytes
    store_ts: int
    store_host: bytes
    reconsume: int = 0
    prepared_offset: int = 0


class Fields(NamedTuple):
    """One record as `decode_fields` gives it: what consumers read, no Record object."""
    topic: str
    body: bytes
    props: str
    queue_id: int
    flag: int
    queue_offset: int
    phys_offset: int
    sys_flag: int
    born_ts: int
    store_ts: int
    store_host: bytes
    reconsume: int
    body_crc: int


# sysFlag bits (RocketMQ MessageSysFlag)
SYSFLAG_COMPRESSED = 0x1
TX_NOT = 0x0
TX_PREPARED = 0x4
TX_COMMIT = 0x8
TX_ROLLBACK = 0xC
TX_MASK = 0xC

# RocketMQ's enabledAppendPropCRC: the record ends with the property __CRC32# whose value is the
# CRC of every byte before it, as ten digits least significant first (MessageDecoder.createCrc32).
# Quiver marks such a record with a sysflag bit of its own, so a reader knows to check it.
PROP_CRC = "__CRC32#"
SYSFLAG_PROP_CRC = 1 << 20
_CRC_HEAD_S = PROP_CRC + NAME_SEP
_CRC_HEAD = _CRC_HEAD_S.encode()
CRC_PROP_BYTES = len(_CRC_HEAD) + 10 + len(PROP_SEP)  # 20, RocketMQ's CRC32_RESERVED_LEN


def crc(body) -> int:
    return zlib.crc32(body) & 0x7FFFFFFF


_CRC_PROP = format_properties(((PROP_CRC, "%s"),)).encode()  # a template: per record stored


def _crc_prop(c: int) -> bytes:
    return _CRC_PROP % str(c)[::-1].ljust(10, "0").encode()


def strip_prop_crc(props):
    """Properties (bytes or str) without a trailing __CRC32# property: a record re-put from a
    stored one, and what a client shows. It is always the last property, so one compare."""
    head = _CRC_HEAD_S if isinstance(props, str) else _CRC_HEAD
    if props[-CRC_PROP_BYTES:-11] == head and len(props) >= CRC_PROP_BYTES:
        return props[:-CRC_PROP_BYTES]
    return props


def client_properties(s: str) -> dict[str, str]:
    """The properties map a client shows: `parse_properties` without the store's __CRC32#
    (a record whose sysflag lost the mark, re-put by a broker with --append-prop-crc off,
    can still carry one, so it goes by the name, not the flag)."""
    if s[-CRC_PROP_BYTES:-11] == _CRC_HEAD_S:
        s = s[:-CRC_PROP_BYTES]
    return parse_properties(s)


def prop_crc_ok(buf, pos: int, end: int) -> bool:
    """The __CRC32# property ending the record [pos, end) matches the bytes before it."""
    if end - pos < MIN_RECORD + CRC_PROP_BYTES or buf[end - CRC_PROP_BYTES:end - 11] != _CRC_HEAD:
        return False
    digits = bytes(buf[end - 11:end - 1])
    return digits.isdigit() and int(digits[::-1]) == zlib.crc32(buf[pos:end - CRC_PROP_BYTES]) & 0x7FFFFFFF


def encode_record(rec: "Record") -> bytes:
    """A decoded record as bytes again (its own CRC and offsets)."""
    return encode(rec.body, topic=rec.topic.encode(), props=rec.props.encode(), queue_id=rec.queue_id, flag=rec.flag,
                  queue_offset=rec.queue_offset, phys_offset=rec.phys_offset, sys_flag=rec.sys_flag,
                  born_ts=rec.born_ts, born_host=rec.born_host, store_ts=rec.store_ts, store_host=rec.store_host,
                  reconsume=rec.reconsume, prepared_offset=rec.prepared_offset, body_crc=rec.body_crc)


NO_HOST = bytes(8)


def encode(body: bytes, *, topic: bytes, props: bytes = b"", queue_id: int = 0, flag: int = 0,
           queue_offset: int = 0, phys_offset: int = 0, sys_flag: int = 0, born_ts: int = 0,
           born_host: bytes = NO_HOST, store_ts: int = 0, store_host: bytes = NO_HOST, reconsume: int = 0,
           prepared_offset: int = 0, body_crc: int | None = None, prop_crc: bool = False) -> bytes:
    """One record as bytes; the fields by name, as `Record` names them. `born_host`/`store_host`
    are 8 bytes (ipv4 + port), `body_crc` None: computed. `prop_crc`: end it with the __CRC32#
    property (and set SYSFLAG_PROP_CRC). A put of many records is `encode_run`."""
    tlen = len(topic)
    thead = _U8.pack(tlen) if tlen <= 127 else _U16.pack(tlen)
    plen = len(props) + (CRC_PROP_BYTES if prop_crc else 0)
    total = FIXED_SIZE + len(body) + len(thead) + tlen + 2 + plen
    head = _FIXED.pack(total, MAGIC_V1 if tlen <= 127 else MAGIC_V2,
                       crc(body) if body_crc is None else body_crc, queue_id, flag,
                       queue_offset, phys_offset, sys_flag | SYSFLAG_PROP_CRC if prop_crc else sys_flag, born_ts,
                       born_host, store_ts, store_host, reconsume, prepared_offset, len(body))
    out = b"".join((head, body, thead, topic, _U16.pack(plen), props))
    return out + _crc_prop(zlib.crc32(out) & 0x7FFFFFFF) if prop_crc else out


@fast
def encode_run(head: RunHead, bodies, flags, props: list[bytes], body_crcs=None,
               prop_crc: bool = False) -> tuple[bytes, list[int], list[int]]:
    """Consecutive records as one bytes object: (data, phys offsets, sizes).

    The batch form of `encode` for the put path: what the records share is `head`,
    `bodies`, `flags`, `props` (and `body_crcs`, None: computed) hold one item per
    record. Sizes, CRCs and offsets are computed list-wise and everything is joined once.
    """
    (topic, queue_id, first_qoff, phys, sys_flag, born_ts, born_host, store_ts, store_host, reconsume,
     prepared_offset) = head
    tlen = len(topic)
    tpart = (_U8.pack(tlen) if tlen <= 127 else _U16.pack(tlen)) + topic
    magic = MAGIC_V1 if tlen <= 127 else MAGIC_V2
    extra = CRC_PROP_BYTES if prop_crc else 0   # each record ends with its own __CRC32# property
    if prop_crc:
        sys_flag |= SYSFLAG_PROP_CRC
    fixed = FIXED_SIZE + len(tpart) + 2 + extra
    sizes = [fixed + len(b) + len(p) for b, p in zip(bodies, props)]
    if body_crcs is None:
        body_crcs = [c & 0x7FFFFFFF for c in map(zlib.crc32, bodies)]
    pack, u16, crc32 = _FIXED.pack, _U16.pack, zlib.crc32
    parts, offsets = [], []
    append, extend = offsets.append, parts.extend
    qoff = first_qoff
    for body, pb, size, c, flag in zip(bodies, props, sizes, body_crcs, flags):
        append(phys)
        extend((pack(size, magic, c, queue_id, flag, 0 if qoff is None else qoff, phys, sys_flag, born_ts,
                     born_host, store_ts, store_host, reconsume, prepared_offset, len(body)),
                body, tpart, u16(len(pb) + extra), pb))
        phys += size
        if qoff is not None:
            qoff += 1
    if extra:  # five parts a record; each gets its __CRC32# of every byte before it
        recs = [b"".join(parts[i:i + 5]) for i in range(0, len(parts), 5)]
        parts = [part for rec in recs for part in (rec, _crc_prop(crc32(rec) & 0x7FFFFFFF))]
    return b"".join(parts), offsets, sizes


def record_size(body_len: int, topic_len: int, props_len: int, prop_crc: bool = False) -> int:
    return FIXED_SIZE + body_len + (1 if topic_len <= 127 else 2) + topic_len + 2 + props_len + \
        (CRC_PROP_BYTES if prop_crc else 0)


def blank(size: int) -> bytes:
    """Filler for the rest of a segment (at least 8 bytes)."""
    return _PREFIX.pack(size, MAGIC_BLANK) + bytes(size - 8)


@dataclass(slots=True)
class Record:
    size: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    phys_offset: int
    sys_flag: int
    born_ts: int
    born_host: bytes
    store_ts: int
    store_host: bytes
    reconsume: int
    prepared_offset: int
    body: bytes
    topic: str
    props: str
    stored: bytes | None = None  # the bytes it was decoded from, when the reader kept them (lookups)

    def properties(self) -> dict[str, str]:
        return parse_properties(self.props)


class BadRecord(Exception):
    """Raised by `decode_at` for bytes that are not a whole, intact record."""


def peek(buf, pos: int) -> tuple[int, int]:
    """(total size, magic) of the record starting at pos."""
    return _PREFIX.unpack_from(buf, pos)


def check_head(buf, pos: int = 0, room: int | None = None) -> tuple[int, bool]:
    """(size, is_blank) of the record starting at `pos`, after the one head check every
    reader uses: a known magic, at least the minimum size (8 for a BLANK filler) and
    at most `room` bytes (default: the rest of `buf`). Raises BadRecord otherwise."""
    if len(buf) - pos < 8:
        raise BadRecord(f"torn record head at {pos}")
    size, magic = _PREFIX.unpack_from(buf, pos)
    room = len(buf) - pos if room is None else room
    if magic == MAGIC_BLANK:
        if size < 8 or size > room:
            raise BadRecord(f"BLANK of {size} bytes at {pos} does not fit its {room}")
        return size, True
    if magic != MAGIC_V1 and magic != MAGIC_V2:
        raise BadRecord(f"bad magic {magic:#x} at {pos}")
    if size < MIN_RECORD or size > room:
        raise BadRecord(f"record size {size} at {pos} out of range (room {room})")
    return size, False


def queue_offset_at(buf, pos: int) -> int:
    return _I64.unpack_from(buf, pos + QUEUE_OFFSET_AT)[0]


def store_ts_of(head) -> int:
    """STORETIMESTAMP from the first STORE_TS_AT + 8 bytes of a record."""
    return _I64.unpack_from(head, STORE_TS_AT)[0]


def raw_properties_at(buf, pos: int, end: int) -> tuple[int, bytes]:
    """(body length, properties bytes) of the whole, checked record at buf[pos:end], without
    parsing them (a compaction pass looks up one name in each of a million records)."""
    blen = _I32.unpack_from(buf, pos + BODY_LEN_AT)[0]
    p = pos + FIXED_SIZE + blen
    p += (1 + buf[p]) if _PREFIX.unpack_from(buf, pos)[1] == MAGIC_V1 else (2 + _U16.unpack_from(buf, p)[0])
    return blen, bytes(buf[p + 2:end])


def properties_at(buf, pos: int) -> tuple[int, dict[str, str]]:
    """(size, properties) of the record at `pos` without copying its body; BadRecord on garbage."""
    total, blank = check_head(buf, pos)
    if blank:
        raise BadRecord(f"BLANK at {pos} has no properties")
    p = pos + FIXED_SIZE + _I32.unpack_from(buf, pos + BODY_LEN_AT)[0]
    try:
        p += (1 + buf[p]) if _PREFIX.unpack_from(buf, pos)[1] == MAGIC_V1 else (2 + _U16.unpack_from(buf, p)[0])
        (plen,) = _U16.unpack_from(buf, p)
    except (struct.error, IndexError):
        raise BadRecord(f"record at {pos}: fields overrun the buffer") from None
    p += 2
    if p + plen != pos + total:
        raise BadRecord(f"record at {pos}: length mismatch")
    try:
        return total, parse_properties(bytes(buf[p:p + plen]).decode())
    except UnicodeDecodeError as exc:
        raise BadRecord(f"record at {pos}: properties not UTF-8: {exc}") from None


def decode_at(buf, pos: int = 0, check_crc: bool = False) -> Record:
    """Decode the record at `pos` of `buf` (bytes or memoryview)."""
    if len(buf) - pos < MIN_RECORD:
        raise BadRecord("truncated record header")
    total, blank = check_head(buf, pos)
    if blank:
        raise BadRecord(f"BLANK filler at {pos}")
    try:
        return _decode_at(buf, pos, total, check_crc)
    except (struct.error, IndexError) as exc:  # a length field points past the buffer
        raise BadRecord(f"record at {pos}: fields overrun the buffer ({exc})") from None


def _decode_at(buf, pos: int, total: int, check_crc: bool) -> Record:
    (_, magic, body_crc, queue_id, flag, qoff, poff, sys_flag, born_ts, born_host,
     store_ts, store_host, reconsume, prep, blen) = _FIXED.unpack_from(buf, pos)
    if blen < 0 or blen > total - MIN_RECORD:
        raise BadRecord("body length out of range")
    p = pos + FIXED_SIZE
    body = bytes(buf[p:p + blen])
    p += blen
    if magic == MAGIC_V1:
        tlen = buf[p]
        p += 1
    else:
        (tlen,) = _U16.unpack_from(buf, p)
        p += 2
    topic = bytes(buf[p:p + tlen])
    p += tlen
    if p + 2 > pos + total:
        raise BadRecord("record fields overrun its size")
    (plen,) = _U16.unpack_from(buf, p)
    p += 2
    if p + plen != pos + total:
        raise BadRecord("record length mismatch")
    props = bytes(buf[p:p + plen])
    if check_crc and crc(body) != body_crc:
        raise BadRecord("body CRC mismatch")
    if check_crc and sys_flag & SYSFLAG_PROP_CRC and not prop_crc_ok(buf, pos, pos + total):
        raise BadRecord("record CRC (__CRC32#) mismatch")
    try:
        return Record(total, body_crc, queue_id, flag, qoff, poff, sys_flag, born_ts,
                      bytes(born_host), store_ts, bytes(store_host), reconsume, prep, body,
                      topic.decode(), props.decode())
    except UnicodeDecodeError as exc:
        raise BadRecord(f"topic/properties not UTF-8: {exc}") from None


def decode_many(buf) -> list[Record]:
    """All records of a concatenation (a pull reply body). BLANK fillers are skipped."""
    out = []
    pos, end = 0, len(buf)
    while pos < end:
        total, blank = check_head(buf, pos)
        if not blank:
            out.append(decode_at(buf, pos))
        pos += total
    return out


@fast
def decode_fields(buf) -> list[Fields]:
    """Every record of a concatenation as `Fields`, for the consumers' hot path. BLANK
    fillers are skipped; anything malformed raises BadRecord. No Record objects, topic
    strings decoded once."""
    out = []
    pos, end = 0, len(buf)
    unpack, fixed, new = _FIXED.unpack_from, FIXED_SIZE, tuple.__new__
    topics: dict[bytes, str] = {}
    try:
        while pos < end:
            (total, magic, body_crc, queue_id, flag, qoff, poff, sys_flag, born_ts, _bh, store_ts, store_host,
             reconsume, _prep, blen) = unpack(buf, pos)
            rec_end = pos + total
            if magic == MAGIC_BLANK:
                if total < 8:  # a filler that does not move on would loop forever
                    raise BadRecord(f"BLANK of {total} bytes at {pos}")
                pos = rec_end
                continue
            if (magic != MAGIC_V1 and magic != MAGIC_V2) or total < MIN_RECORD or rec_end > end or blen < 0:
                raise BadRecord(f"bad record at {pos}")
            p = pos + fixed
            body = buf[p:p + blen]
            p += blen
            if magic == MAGIC_V1:
                tlen = buf[p]
                p += 1
            else:
                tlen = buf[p] << 8 | buf[p + 1]
                p += 2
            tb = buf[p:p + tlen]
            topic = topics.get(tb)
            if topic is None:
                topic = topics[tb] = bytes(tb).decode()
            p += tlen
            plen = buf[p] << 8 | buf[p + 1]
            p += 2
            if p + plen != rec_end:
                raise BadRecord(f"record length mismatch at {pos}")
            out.append(new(Fields, (topic, bytes(body), bytes(buf[p:rec_end]).decode(), queue_id, flag, qoff, poff,
                                    sys_flag, born_ts, store_ts, store_host, reconsume, body_crc)))
            pos = rec_end
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise BadRecord(f"truncated or undecodable record at {pos}: {exc}") from None
    return out


speedups.layout("record", _LAYOUT, run_head=RunHead, fields=Fields)

