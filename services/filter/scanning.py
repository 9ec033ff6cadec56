"""Filtering a pull reply body: which stored records a selector keeps.

A broker pull reply body is CommitLog records concatenated (layout in
quiver/record.py). Only the properties of each record are decoded (the body
is never copied); records whose properties match are returned as raw byte
slices, so the consumer decodes exactly what the broker stored. BLANK
fillers are skipped. No sockets here.
"""

import struct

from quiver import record

_I32 = struct.Struct(">i")
_U16 = struct.Struct(">H")
_BODYLEN_AT = record.FIXED_SIZE - 4     # BODYLEN is the last fixed field
_QOFF_AT = 20
_NAME_SEP = record.NAME_SEP
_PROP_SEP = record.PROP_SEP


def properties_at(buf, pos: int) -> tuple[int, dict[str, str]]:
    """(total size, properties) of the record at pos; raises record.BadRecord on garbage."""
    total, magic = record.peek(buf, pos)
    if magic not in (record.MAGIC_V1, record.MAGIC_V2):
        raise record.BadRecord(f"bad magic {magic:#x} at {pos}")
    p = pos + record.FIXED_SIZE + _I32.unpack_from(buf, pos + _BODYLEN_AT)[0]
    if magic == record.MAGIC_V1:
        p += 1 + buf[p]
    else:
        p += 2 + _U16.unpack_from(buf, p)[0]
    (plen,) = _U16.unpack_from(buf, p)
    p += 2
    if p + plen != pos + total:
        raise record.BadRecord(f"record at {pos}: length mismatch")
    props = {}
    if plen:
        for item in bytes(buf[p:p + plen]).decode().split(_PROP_SEP):
            if item:
                k, _, v = item.partition(_NAME_SEP)
                props[k] = v
    return total, props


class ScanResult:
    __slots__ = ("chunks", "scanned", "matched", "bytes", "last_offset")

    def __init__(self):
        self.chunks: list[bytes] = []
        self.scanned = 0
        self.matched = 0
        self.bytes = 0
        self.last_offset = -1   # queue offset of the last record scanned


def scan(buf, matches, limit_msgs: int, limit_bytes: int, out: ScanResult | None = None) -> tuple[ScanResult, int]:
    """Keep the records for which `matches(props)` is true.

    Stops early when `limit_msgs` matches or `limit_bytes` are collected;
    returns (result, position reached) so the caller can tell whether the
    whole buffer was scanned (position == len(buf)).
    """
    out = out or ScanResult()
    view = memoryview(buf)
    pos, end = 0, len(buf)
    while pos < end:
        if out.matched >= limit_msgs:
            break
        total, magic = record.peek(buf, pos)
        if magic == record.MAGIC_BLANK:
            pos += total
            continue
        total, props = properties_at(buf, pos)
        if matches(props):
            if out.matched and out.bytes + total > limit_bytes:
                break
            out.chunks.append(bytes(view[pos:pos + total]))
            out.matched += 1
            out.bytes += total
        out.scanned += 1
        out.last_offset = struct.unpack_from(">q", buf, pos + _QOFF_AT)[0]
        pos += total
    return out, pos
