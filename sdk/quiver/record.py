"""The CommitLog record: RocketMQ's field order, one struct drives encode and decode.

The broker writes these records to disk and a pull reply carries them verbatim,
so the SDK decodes exactly what the broker stored::

     0 TOTALSIZE  4 | 4 MAGICCODE 4 | 8 BODYCRC 4 | 12 QUEUEID 4 | 16 FLAG 4
    20 QUEUEOFFSET 8 | 28 PHYSICALOFFSET 8 | 36 SYSFLAG 4 | 40 BORNTIMESTAMP 8
    48 BORNHOST 8 (ipv4 4 + port 4) | 56 STORETIMESTAMP 8 | 64 STOREHOST 8
    72 RECONSUMETIMES 4 | 76 PREPARED_TX_OFFSET 8 | 84 BODYLEN 4 | body
    | TOPICLEN 1 (v1) or 2 (v2, topic > 127 bytes) | topic | PROPLEN 2 | properties

BODYCRC = crc32(body) & 0x7FFFFFFF. A BLANK record (magic 0xCBD43194, 8 bytes
minimum) pads the end of a segment. Properties are "name\\x01value\\x02" repeated.
This module owns bytes only: no file I/O.
"""

import struct
import zlib
from dataclasses import dataclass

MAGIC_V1 = 0xDAA320A7
MAGIC_V2 = 0xDAA320AB
MAGIC_BLANK = 0xCBD43194

_FIXED = struct.Struct(">iIiiiqqiq8sq8siqi")
FIXED_SIZE = _FIXED.size  # 88: fixed fields through BODYLEN
_PREFIX = struct.Struct(">iI")
_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
MIN_RECORD = FIXED_SIZE + 1 + 2
MAX_PROPERTIES_BYTES = 32767

# sysFlag bits (RocketMQ MessageSysFlag)
SYSFLAG_COMPRESSED = 0x1
TX_NOT = 0x0
TX_PREPARED = 0x4
TX_COMMIT = 0x8
TX_ROLLBACK = 0xC
TX_MASK = 0xC

NAME_SEP = "\x01"
PROP_SEP = "\x02"


def crc(body) -> int:
    return zlib.crc32(body) & 0x7FFFFFFF


def encode(body: bytes, topic: bytes, queue_id: int, flag: int, queue_offset: int,
           phys_offset: int, sys_flag: int, born_ts: int, born_host: bytes, store_ts: int,
           store_host: bytes, reconsume: int, prepared_offset: int, props: bytes,
           body_crc: int | None = None) -> bytes:
    """One record as bytes. `born_host`/`store_host` are 8 bytes (ipv4 + port)."""
    tlen = len(topic)
    thead = _U8.pack(tlen) if tlen <= 127 else _U16.pack(tlen)
    total = FIXED_SIZE + len(body) + len(thead) + tlen + 2 + len(props)
    head = _FIXED.pack(total, MAGIC_V1 if tlen <= 127 else MAGIC_V2,
                       crc(body) if body_crc is None else body_crc, queue_id, flag,
                       queue_offset, phys_offset, sys_flag, born_ts, born_host, store_ts,
                       store_host, reconsume, prepared_offset, len(body))
    return b"".join((head, body, thead, topic, _U16.pack(len(props)), props))


def encode_run(bodies, topic: bytes, queue_id: int, flags, first_qoff: int | None, phys: int, sys_flag: int,
               born_ts: int, born_host: bytes, store_ts: int, store_host: bytes, reconsume: int,
               prepared_offset: int, props: list[bytes], body_crcs=None) -> tuple[bytes, list[int], list[int]]:
    """Consecutive records as one bytes object: (data, phys offsets, sizes).

    The batch form of `encode` for the put path: sizes, CRCs and offsets are
    computed list-wise and everything is joined once. `first_qoff` None gives
    every record queue offset 0 (half and rollback records).
    """
    tlen = len(topic)
    tpart = (_U8.pack(tlen) if tlen <= 127 else _U16.pack(tlen)) + topic
    magic = MAGIC_V1 if tlen <= 127 else MAGIC_V2
    fixed = FIXED_SIZE + len(tpart) + 2
    sizes = [fixed + len(b) + len(p) for b, p in zip(bodies, props)]
    if body_crcs is None:
        body_crcs = [c & 0x7FFFFFFF for c in map(zlib.crc32, bodies)]
    pack, u16 = _FIXED.pack, _U16.pack
    parts, offsets = [], []
    append, extend = offsets.append, parts.extend
    qoff = first_qoff
    for body, pb, size, c, flag in zip(bodies, props, sizes, body_crcs, flags):
        append(phys)
        extend((pack(size, magic, c, queue_id, flag, 0 if qoff is None else qoff, phys, sys_flag, born_ts,
                     born_host, store_ts, store_host, reconsume, prepared_offset, len(body)),
                body, tpart, u16(len(pb)), pb))
        phys += size
        if qoff is not None:
            qoff += 1
    return b"".join(parts), offsets, sizes


def record_size(body_len: int, topic_len: int, props_len: int) -> int:
    return FIXED_SIZE + body_len + (1 if topic_len <= 127 else 2) + topic_len + 2 + props_len


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

    def properties(self) -> dict[str, str]:
        return parse_properties(self.props)


class BadRecord(Exception):
    """Raised by `decode_at` for bytes that are not a whole, intact record."""


def peek(buf, pos: int) -> tuple[int, int]:
    """(total size, magic) of the record starting at pos."""
    return _PREFIX.unpack_from(buf, pos)


def decode_at(buf, pos: int = 0, check_crc: bool = False) -> Record:
    """Decode the record at `pos` of `buf` (bytes or memoryview)."""
    end_buf = len(buf)
    if end_buf - pos < MIN_RECORD:
        raise BadRecord("truncated record header")
    (total, magic, body_crc, queue_id, flag, qoff, poff, sys_flag, born_ts, born_host,
     store_ts, store_host, reconsume, prep, blen) = _FIXED.unpack_from(buf, pos)
    if magic not in (MAGIC_V1, MAGIC_V2):
        raise BadRecord(f"bad magic {magic:#x}")
    if total < MIN_RECORD or pos + total > end_buf or blen < 0:
        raise BadRecord("record size out of range")
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
        total, magic = peek(buf, pos)
        if magic == MAGIC_BLANK:
            pos += total
            continue
        out.append(decode_at(buf, pos))
        pos += total
    return out


def decode_fields(buf) -> list[tuple]:
    """Every record of a concatenation as a plain tuple, for the consumers' hot path:
    (topic, body, props, queue_id, flag, queue_offset, phys_offset, sys_flag, born_ts,
     store_ts, store_host, reconsume, body_crc). BLANK fillers are skipped; anything
    malformed raises BadRecord. No Record objects, topic strings decoded once."""
    out = []
    pos, end = 0, len(buf)
    unpack, fixed = _FIXED.unpack_from, FIXED_SIZE
    topics: dict[bytes, str] = {}
    try:
        while pos < end:
            (total, magic, body_crc, queue_id, flag, qoff, poff, sys_flag, born_ts, _bh, store_ts, store_host,
             reconsume, _prep, blen) = unpack(buf, pos)
            rec_end = pos + total
            if magic == MAGIC_BLANK:
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
            out.append((topic, bytes(body), bytes(buf[p:rec_end]).decode(), queue_id, flag, qoff, poff, sys_flag,
                        born_ts, store_ts, store_host, reconsume, body_crc))
            pos = rec_end
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise BadRecord(f"truncated or undecodable record at {pos}: {exc}") from None
    return out


def format_properties(props: dict[str, str]) -> str:
    return "".join(f"{k}{NAME_SEP}{v}{PROP_SEP}" for k, v in props.items())


def parse_properties(s: str) -> dict[str, str]:
    out = {}
    if not s:
        return out
    for item in s.split(PROP_SEP):
        if item:
            k, _, v = item.partition(NAME_SEP)
            out[k] = v
    return out


def get_property(s: str, name: str) -> str | None:
    """One property without building the whole map (hot path on the broker)."""
    key = name + NAME_SEP
    i = 0 if s.startswith(key) else s.find(PROP_SEP + key)
    if i < 0:
        return None
    start = i + len(key) + (0 if i == 0 and s.startswith(key) else 1)
    end = s.find(PROP_SEP, start)
    return s[start:end if end >= 0 else len(s)]
