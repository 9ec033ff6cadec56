"""Kafka's record batch v2 (magic 2), read and written here: the `records` bytes of Produce and Fetch.

    baseOffset i64 | batchLength i32 | partitionLeaderEpoch i32 | magic i8 = 2 | crc u32 (CRC32C of
    what follows) | attributes i16 | lastOffsetDelta i32 | baseTimestamp i64 | maxTimestamp i64 |
    producerId i64 | producerEpoch i16 | baseSequence i32 | count i32 | records

    record: length varint | attributes i8 | timestampDelta varlong | offsetDelta varint |
            key varbytes | value varbytes | header count varint | (key varbytes, value varbytes)*

Written by hand rather than taken from kio's record readers: those round a record's timestamp to
the second and know no compression, and a Kafka timestamp must come back to the millisecond.
Compression (reading; what the gateway writes is uncompressed): gzip, snappy (raw, or the
Java client's xerial framing), lz4 (frame format) and zstd, through cramjam.
"""

import struct
import zlib
from dataclasses import dataclass, field

import cramjam
from crc32c import crc32c

from quiver.wire.speedups import fast

MAGIC = 2
_HEAD = struct.Struct(">qiibI")           # baseOffset, batchLength, leaderEpoch, magic, crc
_BODY = struct.Struct(">hiqqqhii")        # attributes .. count
HEAD_BYTES = _HEAD.size                    # 21: where the CRC'd part starts
BATCH_OVERHEAD = _HEAD.size + _BODY.size   # 61
NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
_XERIAL = b"\x82SNAPPY\x00"
COMPRESSION_MASK = 0x07
LOG_APPEND_TIME = 0x08
TRANSACTIONAL, CONTROL = 0x10, 0x20


class Corrupt(ValueError):
    """The bytes are not a well-formed batch (CORRUPT_MESSAGE)."""


class Unsupported(ValueError):
    """A well-formed batch this gateway does not take (a compression codec, a control batch)."""


@dataclass
class Record:
    offset: int                      # absolute: baseOffset + offsetDelta
    timestamp: int                   # epoch ms
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


@dataclass
class Batch:
    base_offset: int
    attributes: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records: list[Record]


# ---- varints (zigzag) -------------------------------------------------------------------------

def put_varint(out: bytearray, n: int) -> None:
    z = (n << 1) ^ (n >> 63)
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)


def get_varint(buf, pos: int) -> tuple[int, int]:
    if pos < len(buf) and buf[pos] < 0x80:   # one byte: most lengths and deltas
        b = buf[pos]
        return (b >> 1) ^ -(b & 1), pos + 1
    shift = z = 0
    while True:
        if pos >= len(buf):
            raise Corrupt("a varint runs past the end of the batch")
        b = buf[pos]
        pos += 1
        z |= (b & 0x7F) << shift
        if not b & 0x80:
            return (z >> 1) ^ -(z & 1), pos
        shift += 7
        if shift > 63:
            raise Corrupt("a varint is longer than 10 bytes")


def _get_bytes(buf, pos: int) -> tuple[bytes | None, int]:
    n, pos = get_varint(buf, pos)
    if n < 0:
        return None, pos
    if pos + n > len(buf):
        raise Corrupt("a key, value or header runs past the end of its record")
    return buf[pos:pos + n], pos + n


def _put_bytes(out: bytearray, b: bytes | None) -> None:
    if b is None:
        put_varint(out, -1)
    else:
        put_varint(out, len(b))
        out += b


# ---- decode -----------------------------------------------------------------------------------

def decode(data: bytes, max_uncompressed: int = 64 << 20) -> list[Batch]:
    """Every batch of a Produce's records; Corrupt or Unsupported saying why."""
    view, pos, out = memoryview(data), 0, []
    while pos < len(view):
        if len(view) - pos < BATCH_OVERHEAD:
            raise Corrupt(f"{len(view) - pos} bytes left: shorter than a batch header")
        base_offset, length, _epoch, magic, crc = _HEAD.unpack_from(view, pos)
        end = pos + 12 + length
        if magic != MAGIC:
            raise Unsupported(f"record batch magic {magic}: only v2 (magic 2) is taken")
        if length < BATCH_OVERHEAD - 12 or end > len(view):
            raise Corrupt(f"batch length {length} does not fit the {len(view) - pos} bytes left")
        if crc32c(view[pos + HEAD_BYTES:end]) != crc:
            raise Corrupt("record batch CRC32C mismatch")
        attrs, _last, base_ts, _max_ts, pid, pepoch, bseq, count = _BODY.unpack_from(view, pos + HEAD_BYTES)
        if attrs & CONTROL:
            raise Unsupported("control batches (transactions) are not taken")
        body = bytes(view[pos + BATCH_OVERHEAD:end])   # bytes index faster than a memoryview
        codec = attrs & COMPRESSION_MASK
        if codec != NONE:
            body = inflate(codec, body, max_uncompressed)
        if not 0 <= count <= len(body):
            raise Corrupt(f"record count {count} does not fit the batch")
        out.append(Batch(base_offset, attrs, pid, pepoch, bseq, _records(body, count, base_offset, base_ts)))
        pos = end
    return out


def _records(body, count: int, base_offset: int, base_ts: int) -> list[Record]:
    recs, pos = [], 0
    for _ in range(count):
        length, pos = get_varint(body, pos)
        end = pos + length
        if length < 1 or end > len(body):
            raise Corrupt(f"record length {length} does not fit the batch")
        pos += 1   # record attributes: unused by the format
        ts_delta, pos = get_varint(body, pos)
        off_delta, pos = get_varint(body, pos)
        key, pos = _get_bytes(body, pos)
        value, pos = _get_bytes(body, pos)
        n, pos = get_varint(body, pos)
        if not 0 <= n <= length:
            raise Corrupt(f"header count {n} does not fit its record")
        headers = []
        for _ in range(n):
            hk, pos = _get_bytes(body, pos)
            hv, pos = _get_bytes(body, pos)
            if hk is None:
                raise Corrupt("a header has a null key")
            try:
                headers.append((hk.decode(), hv))
            except UnicodeDecodeError:
                raise Corrupt("a header key is not UTF-8") from None
        if pos != end:
            raise Corrupt("a record's fields do not add up to its length")
        recs.append(Record(base_offset + off_delta, base_ts + ts_delta, key, value, headers))
    return recs


def inflate(codec: int, data: bytes, cap: int) -> bytes:
    """The records of a compressed batch; Corrupt past `cap` bytes or when they do not decompress."""
    if codec not in (GZIP, SNAPPY, LZ4, ZSTD):
        raise Unsupported(f"compression codec {codec} (1-4 are Kafka's)")
    try:
        if codec == GZIP:
            out = zlib.decompressobj(wbits=31).decompress(data, cap + 1)   # stops past the cap
        elif codec == SNAPPY:
            out = _snappy(data, cap)
        else:   # lz4 frames and zstd: checked once inflated
            out = bytes((cramjam.lz4 if codec == LZ4 else cramjam.zstd).decompress(data))
    except (zlib.error, cramjam.DecompressionError) as exc:
        raise Corrupt(f"codec {codec} records do not decompress: {exc}") from None
    if len(out) > cap:
        raise Corrupt(f"compressed records inflate past {cap} bytes")
    return out


def _snappy(data: bytes, cap: int) -> bytes:
    if not data.startswith(_XERIAL):
        if cramjam.snappy.decompress_raw_len(data) > cap:
            raise Corrupt(f"snappy records inflate past {cap} bytes")
        return bytes(cramjam.snappy.decompress_raw(data))
    out, pos = bytearray(), 16          # magic, version, compatible version
    while pos < len(data):
        if pos + 4 > len(data):
            raise Corrupt("a xerial snappy block length runs past the end")
        n = struct.unpack_from(">i", data, pos)[0]
        block = data[pos + 4:pos + 4 + n]
        if n < 0 or len(block) != n or len(out) + cramjam.snappy.decompress_raw_len(block) > cap:
            raise Corrupt(f"a xerial snappy block is truncated, or the records inflate past {cap} bytes")
        out += cramjam.snappy.decompress_raw(block)
        pos += 4 + n
    return bytes(out)


# ---- encode -----------------------------------------------------------------------------------

# a varint's bytes for 0 <= n < 1 << 13 (lengths and deltas of most records): one lookup, no loop
_SMALL = tuple(bytes([(n << 1) & 0x7F | 0x80, n >> 6]) if n >= 64 else bytes([n << 1]) for n in range(1 << 13))
_NULL = b"\x01"   # varint -1: a null key or value


def _varint(n: int) -> bytes:
    if 0 <= n < 8192:
        return _SMALL[n]
    out = bytearray()
    put_varint(out, n)
    return bytes(out)


def _headers(headers: list[tuple[str, bytes | None]]) -> bytes:
    out = bytearray(_varint(len(headers)))
    for hk, hv in headers:
        _put_bytes(out, hk.encode())
        _put_bytes(out, hv)
    return bytes(out)


def encode(records: list[Record]) -> bytes:
    """One uncompressed batch of `records` (offsets ascending, at least one)."""
    return bytes(encode_rows([(r.offset, r.timestamp, r.key, r.value, r.headers) for r in records])[0])


def encode_rows(rows: list[tuple], max_bytes: int = 1 << 62) -> tuple[bytearray, int]:
    """(one uncompressed batch, how many rows it holds) of (offset, timestamp, key, value,
    headers) rows, offsets ascending, at least one: the rows that fit `max_bytes`, the first
    whatever its size."""
    return batch(kafka_records(rows, max_bytes - BATCH_OVERHEAD, BATCH_OVERHEAD))[:2]


def batch(laid: tuple) -> tuple[bytearray | bytes, int, int]:
    """(the batch, how many records, the last one's offset) of records laid out after
    BATCH_OVERHEAD bytes (kafka_records' answer): the header is packed around them in place
    and the CRC taken over the buffer without a copy; (b"", 0, -1) when there are none."""
    buf, used, base, base_ts, last, max_ts = laid
    if not used:
        return b"", 0, -1
    _BODY.pack_into(buf, HEAD_BYTES, NONE, last - base, base_ts, max_ts, -1, -1, -1, used)
    with memoryview(buf) as view:
        crc = crc32c(view[HEAD_BYTES:])
    _HEAD.pack_into(buf, 0, base, len(buf) - 12, 0, MAGIC, crc)
    return buf, used, last


@fast
def kafka_records(rows: list[tuple], room: int, prefix: int) -> tuple[bytearray, int, int, int, int, int]:
    """(`prefix` zero bytes then the records of the rows that fit `room` bytes - the first
    whatever its size -, how many, the first one's offset and timestamp, the last one's offset,
    the largest timestamp)."""
    base, base_ts = rows[0][0], rows[0][1]
    parts: list[bytes] = []
    add, varint, small = parts.extend, _varint, _SMALL
    max_ts, used, last = base_ts, 0, base
    for offset, ts, key, value, headers in rows:
        dt, do = ts - base_ts, offset - base
        head = b"\x00" + (small[dt] if 0 <= dt < 8192 else varint(dt)) + (small[do] if 0 <= do < 8192 else varint(do))
        if key is None:
            kl, key = _NULL, b""
        else:
            kl = small[len(key)] if len(key) < 8192 else varint(len(key))
        if value is None:
            vl, value = _NULL, b""
        else:
            vl = small[len(value)] if len(value) < 8192 else varint(len(value))
        hs = _headers(headers) if headers else b"\x00"
        size = len(head) + len(kl) + len(key) + len(vl) + len(value) + len(hs)
        sl = small[size] if size < 8192 else varint(size)
        room -= size + len(sl)
        if room < 0 and used:
            break
        add((sl, head, kl, key, vl, value, hs))
        used, last = used + 1, offset
        if ts > max_ts:
            max_ts = ts
    return bytearray(prefix) + b"".join(parts), used, base, base_ts, last, max_ts
