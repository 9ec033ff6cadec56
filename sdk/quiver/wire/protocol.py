"""The wire contract: the only place Quiver frames are built or parsed.

Every request and reply is one ZeroMQ multipart message::

    +-------+----------------------------+--------+--------+-----
    | "QV1" | header (orjson map)        | body 0 | body 1 | ...
    +-------+----------------------------+--------+--------+-----
      request header: {"c": RequestCode,  "id": int, "ext": {...}}
      reply header:   {"c": ResponseCode, "id": int, "r": remark, "ext": {...}}

A ROUTER adds/strips the identity frame in front. A peer of another version is
refused, not guessed at: a server answers VERSION_NOT_SUPPORTED naming both
versions, and whichever side reads a frame of another version still takes the
"id" of its header (a JSON map with an integer "id" is what every version keeps),
so the request it answers fails at once with that refusal. A reply always carries "r"
(possibly empty); a request never does, which is how a client tells a pushed
request (CHECK_TRANSACTION_STATE, NOTIFY_CONSUMER_IDS_CHANGED) from a reply.
Bodies are raw bytes, never JSON. Per-message fields of a batch travel as
compact arrays in "ext"; what "ext" may hold for each code is owned by
`quiver.wire.requests` (one schema per code).

`decode()` raises only `ProtocolError`.
"""

from dataclasses import dataclass, field

import orjson

from quiver.wire import speedups
from quiver.wire.codes import RequestCode, ResponseCode
from quiver.errors import ProtocolError

__all__ = ["VERSION", "Envelope", "request", "reply", "decode", "RequestCode", "ResponseCode",
           "UNATTRIBUTED_ID", "MAX_HEADER_BYTES"]

VERSION = b"QV1"
UNATTRIBUTED_ID = -1  # id of an error reply to a frame whose own id could not be read
MAX_HEADER_BYTES = 1 << 20

_dumps = orjson.dumps
_loads = orjson.loads


@dataclass(slots=True)
class Envelope:
    code: int
    id: int
    ext: dict = field(default_factory=dict)
    bodies: list = field(default_factory=list)
    remark: str | None = None  # None on requests, a string on replies

    @property
    def is_reply(self) -> bool:
        return self.remark is not None


speedups.layout("envelope", (), type=Envelope, loads=_loads, version=VERSION, max_header=MAX_HEADER_BYTES)


def request(code, req_id: int, ext: dict | None = None, bodies=()) -> list:
    """`code` is a typed request (quiver.wire.requests), or a bare code with `ext` (peers' tests)."""
    if not isinstance(code, int):
        code, ext = code.CODE, code.ext()
    head = {"c": int(code), "id": req_id}
    if ext:
        head["ext"] = ext
    return [VERSION, _dumps(head), *bodies]


def reply(code: int, req_id: int, remark: str = "", ext: dict | None = None, bodies=()) -> list:
    head = {"c": int(code), "id": req_id, "r": remark}
    if ext:
        head["ext"] = ext
    return [VERSION, _dumps(head), *bodies]


@speedups.fast
def decode(frames) -> Envelope:
    """Parse a multipart message (identity already stripped) into an Envelope."""
    if not isinstance(frames, (list, tuple)) or len(frames) < 2:
        raise ProtocolError(f"expected at least 2 frames [version, header], got {_count(frames)}")
    version = _as_bytes(frames[0])
    if version != VERSION:
        err = ProtocolError(f"unsupported protocol version {version[:16]!r}; this peer speaks {VERSION!r}: "
                            "run client and server releases that share a protocol version (docs/upgrade.md)")
        err.version_mismatch = True
        rid = _peek_id(frames[1])
        if rid is not None:  # so the asker's request fails at once, not by its timeout
            err.request_id = rid
        raise err
    raw = _as_bytes(frames[1])
    if len(raw) > MAX_HEADER_BYTES:
        raise ProtocolError(f"header of {len(raw)} bytes exceeds {MAX_HEADER_BYTES}")
    try:
        head = _loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ProtocolError(f"header is not valid JSON: {exc}") from None
    if not isinstance(head, dict):
        raise ProtocolError("header must be a JSON object")
    code, req_id = head.get("c"), head.get("id")
    if type(code) is not int or type(req_id) is not int:
        err = ProtocolError('header needs integer "c" (code) and "id" (request id)')
        if type(req_id) is int:
            err.request_id = req_id
        raise err
    ext = head.get("ext") or {}
    if not isinstance(ext, dict):
        err = ProtocolError('header "ext" must be a JSON object')
        err.request_id = req_id
        raise err
    remark = head.get("r")
    if remark is not None and not isinstance(remark, str):
        raise ProtocolError('reply remark "r" must be a string')
    return Envelope(code, req_id, ext, [_as_bytes(f) for f in frames[2:]], remark)


def request_id_of(exc: ProtocolError) -> int:
    """The request id a malformed frame carried, or UNATTRIBUTED_ID."""
    return getattr(exc, "request_id", UNATTRIBUTED_ID)


def _peek_id(frame) -> int | None:
    """The integer "id" of a header from a peer of another version, if it is a JSON map
    holding one: every version keeps that much, so a refusal reaches the request it answers."""
    try:
        raw = _as_bytes(frame)
        head = _loads(raw) if len(raw) <= MAX_HEADER_BYTES else None
    except (ProtocolError, orjson.JSONDecodeError):
        return None
    rid = head.get("id") if isinstance(head, dict) else None
    return rid if type(rid) is int else None


def _as_bytes(frame) -> bytes:
    if isinstance(frame, bytes):
        return frame
    try:
        return frame.bytes  # zmq.Frame
    except AttributeError:
        pass
    try:
        return bytes(frame)
    except (TypeError, ValueError) as exc:
        raise ProtocolError(f"frame is not bytes: {type(frame).__name__}") from exc


def _count(frames) -> int:
    try:
        return len(frames)
    except TypeError:
        return 0
