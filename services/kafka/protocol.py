"""Kafka's request and response frames, through `kio` (types generated from Apache Kafka's schemas).

A frame is `size i32 | header | body`. The request header is v2 (tagged fields) when the API
version is flexible, else v1; the response header likewise v1 or v0 - except ApiVersions, whose
response header is always v0 so that a client can read it before knowing any version.

`make(cls, values)` builds a kio response of any version from one dict of the superset of its
versions' fields: fields a version lacks are dropped, fields it has but the dict does not give
take their default or a zero value, nested entities are built from dicts likewise, and plain ints
become the kio types (timedeltas, error codes) the writers want. So one handler serves every
version it advertises.
"""

import dataclasses
import datetime
import enum
import functools
import io
import struct
import typing

from kio import index
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer

API_VERSIONS, PRODUCE, FETCH, LIST_OFFSETS, METADATA = 18, 0, 1, 2, 3
OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR = 8, 9, 10
JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP, DESCRIBE_GROUPS, LIST_GROUPS = 11, 12, 13, 14, 15, 16
INIT_PRODUCER_ID = 22
CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS = 19, 20, 37
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
DESCRIBE_CONFIGS, ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 32, 33, 44
DESCRIBE_CLUSTER = 60

# API key -> (min, max) version served. Non-flexible versions of Produce, Fetch, ListOffsets and
# Metadata, and the group APIs: every current client (librdkafka, the Java client, aiokafka, kafka-python) speaks them.
SUPPORTED = {
    PRODUCE: (3, 8),
    FETCH: (4, 11),
    LIST_OFFSETS: (1, 5),
    METADATA: (1, 8),
    API_VERSIONS: (0, 3),
    OFFSET_COMMIT: (2, 7),
    OFFSET_FETCH: (1, 5),
    FIND_COORDINATOR: (0, 3),
    JOIN_GROUP: (0, 5),
    SYNC_GROUP: (0, 3),
    HEARTBEAT: (0, 3),
    LEAVE_GROUP: (0, 3),
    DESCRIBE_GROUPS: (0, 4),
    LIST_GROUPS: (0, 2),
    INIT_PRODUCER_ID: (0, 4),
    CREATE_TOPICS: (2, 4),
    DELETE_TOPICS: (1, 3),
    CREATE_PARTITIONS: (0, 1),
    SASL_HANDSHAKE: (1, 1),       # v0 (raw tokens after the handshake) is not served
    SASL_AUTHENTICATE: (0, 2),
    DESCRIBE_CONFIGS: (1, 3),
    ALTER_CONFIGS: (0, 2),
    INCREMENTAL_ALTER_CONFIGS: (0, 1),
    DESCRIBE_CLUSTER: (0, 1),
}

# Kafka's error codes used here
NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
REQUEST_TIMED_OUT = 7
MESSAGE_TOO_LARGE = 10
INVALID_TOPIC_EXCEPTION = 17
INVALID_REQUIRED_ACKS = 21
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
TOPIC_AUTHORIZATION_FAILED = 29
UNSUPPORTED_VERSION = 35
INVALID_REQUEST = 42
UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
KAFKA_STORAGE_ERROR = 56
UNSUPPORTED_COMPRESSION_TYPE = 76
FENCED_INSTANCE_ID = 82
INVALID_RECORD = 87
UNKNOWN_SERVER_ERROR = -1

# kio resolves a schema's module by name at each call: a fifth of a small Produce's time
load_request_schema = functools.cache(index.load_request_schema)
load_response_schema = functools.cache(index.load_response_schema)

_FIXED = struct.Struct(">hhi")   # api key, api version, correlation id: every header starts so
_SIZE = struct.Struct(">i")


class BadRequest(ValueError):
    """A frame that does not parse: the connection is closed (Kafka brokers do the same)."""


@dataclasses.dataclass
class Request:
    api_key: int
    version: int
    correlation_id: int
    client_id: str | None
    body: object | None       # the kio request; None when the API or version is not served
    flexible: bool


def parse(frame: bytes) -> Request:
    """A request frame (without its size) as a Request; BadRequest if even the header is garbled."""
    if len(frame) < _FIXED.size:
        raise BadRequest(f"a {len(frame)}-byte frame is shorter than a request header")
    key, version, corr = _FIXED.unpack_from(frame)
    lo_hi = SUPPORTED.get(key)
    if lo_hi is None or not lo_hi[0] <= version <= lo_hi[1]:
        return Request(key, version, corr, None, None, _flexible(key, version))
    try:
        cls = load_request_schema(key, version)
    except Exception:   # a version this kio does not know: answered as not served
        return Request(key, version, corr, None, None, False)
    header_cls = RequestHeaderV2 if cls.__flexible__ else RequestHeaderV1
    try:
        header, size = entity_reader(header_cls)(frame, 0)
        body, used = entity_reader(cls)(frame, size)
    except Exception as exc:   # kio raises several kinds for truncated or garbled input
        raise BadRequest(f"{cls.__name__} v{version} does not parse: {exc}") from None
    if size + used != len(frame):
        raise BadRequest(f"{cls.__name__} v{version}: {len(frame) - size - used} bytes left over")
    return Request(key, version, corr, header.client_id, body, cls.__flexible__)


def _flexible(key: int, version: int) -> bool:
    try:
        return bool(load_response_schema(key, version).__flexible__)
    except Exception:   # an API or version kio does not know: answered as non-flexible
        return False


def response_frame(req: Request, body) -> memoryview:
    """The size-prefixed frame answering `req` with the kio response `body`: a view of the buffer
    it was written into, the size put in front last (a Fetch's megabytes are not copied again)."""
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    if req.api_key == API_VERSIONS or not req.flexible:
        entity_writer(ResponseHeaderV0)(buf, ResponseHeaderV0(correlation_id=req.correlation_id))
    else:
        entity_writer(ResponseHeaderV1)(buf, ResponseHeaderV1(correlation_id=req.correlation_id))
    if body is not None:
        entity_writer(type(body))(buf, body)
    frame = buf.getbuffer()
    _SIZE.pack_into(frame, 0, len(frame) - 4)
    return frame


def raw_error_frame(req: Request, error: int) -> bytes:
    """An answer to an API kio does not know: the correlation id and an error code."""
    return struct.pack(">iih", 6, req.correlation_id, error)


def response(req: Request, values: dict):
    """The kio response of `req`'s API and version built from `values` (see make)."""
    return make(load_response_schema(req.api_key, req.version), values)


def unsupported(req: Request) -> bytes:
    """The answer to an API or version not served: UNSUPPORTED_VERSION in the API's own response
    (an ApiVersions one lists what is served, as v0 so that any client reads it)."""
    if req.api_key == API_VERSIONS:
        req = dataclasses.replace(req, version=0, flexible=False)
        return response_frame(req, response(req, api_versions(UNSUPPORTED_VERSION)))
    try:
        cls = load_response_schema(req.api_key, req.version)
    except Exception:   # not a Kafka API kio knows
        return raw_error_frame(req, UNSUPPORTED_VERSION)
    return response_frame(req, make(cls, {"error_code": UNSUPPORTED_VERSION}))


def preload() -> None:
    """The kio types and response writers of each served API's highest version (what current
    clients negotiate) made now, at start-up: among the objects a service moves out of the
    collector's scans. Made on first use, they kept a full collection at tens of milliseconds:
    stalls of every answer on the latency path."""
    for key, (_lo, hi) in SUPPORTED.items():
        try:
            load_request_schema(key, hi)
            cls = load_response_schema(key, hi)
        except Exception:   # a version this kio does not know: answered as not served
            continue
        entity_writer(cls)
        _hints(cls)


def api_versions(error: int = NONE) -> dict:
    return {"error_code": error, "throttle_time": 0,
            "api_keys": [{"api_key": k, "min_version": lo, "max_version": hi}
                         for k, (lo, hi) in sorted(SUPPORTED.items())]}


# ---- building kio entities from dicts -------------------------------------------------------------

@functools.cache
def _hints(cls) -> dict:
    return typing.get_type_hints(cls)


_MISSING = object()


@functools.cache
def _plan(cls) -> tuple:
    """(field name, its coercion, its zero value or _MISSING when it has a default) per field of a
    kio entity, worked out once per class: building an answer reads no type hints."""
    hints, plan = _hints(cls), []
    for f in dataclasses.fields(cls):
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        plan.append((f.name, _coercion(hints[f.name]), _zero(hints[f.name]) if required else _MISSING))
    return tuple(plan)


def make(cls, values: dict):
    kw = {}
    for name, coerce, zero in _plan(cls):
        if name in values:
            value = values[name]
            kw[name] = None if value is None else coerce(value)
        elif zero is not _MISSING:
            kw[name] = zero
    return cls(**kw)


def _entity_of(hint):
    """(entity class, is a tuple of them) for a nested-entity hint, else (None, False)."""
    for h in (hint, *typing.get_args(hint)):   # X, tuple[X, ...] or either | None
        inner = typing.get_args(h)
        if typing.get_origin(h) is tuple and inner and dataclasses.is_dataclass(inner[0]):
            return inner[0], True
        if dataclasses.is_dataclass(h):
            return h, False
    return None, False


def _scalar(hint):
    """The one non-None type of a hint (int | None -> int)."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if typing.get_origin(hint) is typing.Union and len(args) == 1 else hint


def _same(value):
    return value


def _coercion(hint):
    """What turns a given (non-None) value into the field's kio value."""
    entity, many = _entity_of(hint)
    if entity is not None:
        if many:
            return lambda value: tuple(make(entity, v) for v in value)
        return lambda value: make(entity, value)
    t = _scalar(hint)
    if isinstance(t, type) and issubclass(t, datetime.timedelta):   # kio's phantom types take plain values
        return lambda value: datetime.timedelta(milliseconds=value) if isinstance(value, int) else value
    if isinstance(t, type) and issubclass(t, enum.Enum):
        return lambda value: t(value) if isinstance(value, int) else value
    if typing.get_origin(t) is tuple:
        return tuple
    return _same


def _zero(hint):
    if type(None) in typing.get_args(hint):
        return None
    entity, many = _entity_of(hint)
    if entity is not None:
        return () if many else make(entity, {})
    t = _scalar(hint)
    if typing.get_origin(t) is tuple:
        return ()
    if isinstance(t, type):
        if issubclass(t, datetime.timedelta):
            return datetime.timedelta(0)
        if issubclass(t, enum.Enum):
            return t(0)
        if issubclass(t, bool):
            return False
        if issubclass(t, int):
            return 0
        if issubclass(t, str):
            return ""
        if issubclass(t, bytes):
            return b""
    return None
