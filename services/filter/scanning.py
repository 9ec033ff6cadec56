"""Filtering a pull reply body: which stored records a selector keeps.

A broker pull reply body is CommitLog records concatenated (layout in
quiver/wire/record.py). Only the properties of each record are decoded (the body
is never copied); records whose properties match are returned as raw byte
slices, so the consumer decodes exactly what the broker stored. BLANK
fillers are skipped. No sockets here.
"""

from quiver.wire import record


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
        total, blank = record.check_head(buf, pos)
        if blank:
            pos += total
            continue
        total, props = record.properties_at(buf, pos)
        if matches(props):
            if out.matched and out.bytes + total > limit_bytes:
                break
            out.chunks.append(bytes(view[pos:pos + total]))
            out.matched += 1
            out.bytes += total
        out.scanned += 1
        out.last_offset = record.queue_offset_at(buf, pos)
        pos += total
    return out, pos
