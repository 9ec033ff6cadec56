"""A Fetch answer's frame as a list of buffers: its fields packed here, each partition's records
buffer referenced, not copied.

kio writes a response into one buffer, copying megabytes of records into it (and again as it
grows); the socket then copies them once more into the kernel. Here the fields between the
records are packed by hand (Fetch v4-v11 are not flexible: fixed-size ints, i16-length strings,
i32-counted arrays, i32-length bytes) and the buffers go to the socket with one sendmsg
(outbox.py). tests/unit/kafka pins the bytes against kio's writer for every version served.
"""

import struct

from .protocol import FETCH

_HEAD = struct.Struct(">ii")        # frame size, correlation id (response header v0)
_TOP4 = struct.Struct(">ii")        # throttle, topic count (v4-v6)
_TOP7 = struct.Struct(">ihii")      # throttle, error, session id, topic count (v7+)
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_PART4 = struct.Struct(">ihqqi")    # index, error, high watermark, last stable, aborted (-1: null)
_PART5 = struct.Struct(">ihqqqi")   # ... log start offset before the aborted count (v5+)
_REPLICA_LEN = struct.Struct(">ii")  # preferred read replica (v11), records length
VERSIONS = (4, 11)


def frame(req, values: dict) -> list | None:
    """The size-prefixed frame answering a Fetch `req` with `values` (handlers.Gateway.fetch's) as
    buffers to send in order, or None for what kio writes instead (another version, an error-only
    answer, aborted transactions)."""
    v = req.version
    if req.api_key != FETCH or req.flexible or not VERSIONS[0] <= v <= VERSIONS[1] or "responses" not in values:
        return None
    out, head = [], bytearray()
    topics = values["responses"]
    if v >= 7:
        head += _TOP7.pack(values.get("throttle_time", 0), values.get("error_code", 0), values.get("session_id", 0),
                           len(topics))
    else:
        head += _TOP4.pack(values.get("throttle_time", 0), len(topics))
    for t in topics:
        name = t["topic"].encode()
        parts = t["partitions"]
        head += _I16.pack(len(name)) + name + _I32.pack(len(parts))
        for p in parts:
            if p.get("aborted_transactions") is not None:
                return None
            if v >= 5:
                head += _PART5.pack(p["partition_index"], p["error_code"], p["high_watermark"], p["last_stable_offset"],
                                    p["log_start_offset"], -1)
            else:
                head += _PART4.pack(p["partition_index"], p["error_code"], p["high_watermark"], p["last_stable_offset"],
                                    -1)
            records = p.get("records")
            size = -1 if records is None else len(records)
            head += _REPLICA_LEN.pack(p.get("preferred_read_replica", -1), size) if v >= 11 else _I32.pack(size)
            if size > 0:
                out.append(bytes(head))
                out.append(records)
                head = bytearray()
    if head:
        out.append(bytes(head))
    total = 4 + sum(len(b) for b in out)
    out.insert(0, _HEAD.pack(total, req.correlation_id))
    return out
