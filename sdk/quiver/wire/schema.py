"""The schema machinery behind `quiver.wire.requests` and `quiver.wire.replies`: the base class (checks and ranges: checks.py).

A check is a callable value -> value that raises `Invalid`; a schema is a
frozen, slotted dataclass whose fields name their short wire key and their
check (`wire(key, check, default)`). `Schema.decode(ext)` raises only
`FieldError` naming the request, the field, what was expected and what came;
`obj.ext()` is the wire form. Also owns the objects nested in several requests
and replies, and packed batch bodies; re-exports the checks and ranges.
Does not own any request (requests.py) or reply (replies.py).
"""

import re
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import TYPE_CHECKING, Any, ClassVar, Self

from quiver.wire.speedups import fast
from quiver.wire.codes import RequestCode, ResponseCode
from quiver.errors import FieldError


from quiver.wire.checks import _SKIPS, _show
from quiver.wire.checks import (  # re-exported: callers import checks and ranges from here
    MAX_OFFSET as MAX_OFFSET,
    MAX_QUEUES as MAX_QUEUES,
    MAX_BODY_BYTES as MAX_BODY_BYTES,
    MAX_BATCH as MAX_BATCH,
    MAX_PROPERTIES_BYTES as MAX_PROPERTIES_BYTES,
    Invalid as Invalid,
    Check as Check,
    Int as Int,
    Bool as Bool,
    Str as Str,
    OneOf as OneOf,
    Name as Name,
    Opt as Opt,
    ListOf as ListOf,
    MapOf as MapOf,
    IdKey as IdKey,
    Row as Row,
    Nested as Nested,
    Json as Json,
    SendMetas as SendMetas,
    U8 as U8,
    I32 as I32,
    U31 as U31,
    OFFSET as OFFSET,
    TIMESTAMP as TIMESTAMP,
    ANY_OFFSET as ANY_OFFSET,
    QUEUE_ID as QUEUE_ID,
    QUEUE_COUNT as QUEUE_COUNT,
    MAX_PULL as MAX_PULL,
    SUSPEND_MS as SUSPEND_MS,
    TOPIC as TOPIC,
    GROUP as GROUP,
    BROKER_NAME as BROKER_NAME,
    CLUSTER as CLUSTER,
    ADDR as ADDR,
    CLIENT_ID as CLIENT_ID,
    KEY as KEY,
    EXPRESSION as EXPRESSION,
    EXPR_TYPE as EXPR_TYPE,
    MSG_ID as MSG_ID,
)


# ---- the schema base -------------------------------------------------------------------------


def wire(key: str, check: Check, default: Any = MISSING, *, code: int | None = None) -> Any:
    """A schema field: its short wire key, its check, and its default (absent = required)."""
    meta = {"key": key, "check": check, "code": code}
    if default is MISSING:
        return field(metadata=meta)
    if isinstance(default, (list, dict, set)):
        return field(default_factory=lambda d=default: type(d)(d), metadata=meta)
    return field(default=default, metadata=meta)


class Spec:
    """One field of a schema, as decode and the fuzzers see it."""
    __slots__ = ("name", "key", "check", "default", "required", "code")

    def __init__(self, f):
        self.name, self.key = f.name, f.metadata["key"]
        self.check, self.code = f.metadata["check"], f.metadata["code"]
        self.required = f.default is MISSING and f.default_factory is MISSING
        self.default = f.default if f.default_factory is MISSING else f.default_factory


class Schema:
    """Base of every request and reply schema (subclasses are frozen slotted dataclasses)."""

    CODE: RequestCode | None = None
    WHAT = ""  # "CODE_NAME (code)" of a request schema, as its errors name it (each send's bodies ask)
    ACCESS = None  # a request schema's Access (quiver.wire.access); replies have none
    FIELDS: tuple = ()
    PLAN: tuple = ()  # FIELDS as the compiled schema_decode reads them (_plan_row)
    KEEP_DEFAULTS = False  # ext() sends fields at their default too (a reply some peers read as a plain map)
    __slots__ = ()

    if TYPE_CHECKING:  # the dataclass decorators write these (a keyword-only __init__, one per field)
        __dataclass_fields__: ClassVar[dict[str, Field[Any]]]

        def __init__(self, **fields: Any) -> None: ...

    @classmethod
    def decode(cls, ext: Any) -> Self:
        """A request's ext -> the typed object, or FieldError."""
        if type(ext) is not dict:
            raise FieldError(f"{cls._what()}: the header's ext must be a JSON object, got {_show(ext)}")
        try:
            return schema_decode(cls, cls.PLAN, ext)
        except Invalid as exc:
            raise cls._error(exc) from None

    @classmethod
    def decode_skipping(cls, ext: Any, *, drop_fields: bool = False) -> tuple[Self, list[str]]:
        """`decode`, and a description of each entry its `skip_bad` lists and maps left out
        (a peer's data: the caller logs them). With `drop_fields`, an optional field of the
        wrong shape is left out too (its default taken, its description listed first), so one
        bad field does not cost the rest; a required one is still a FieldError."""
        sink: list[str] = []
        if type(ext) is not dict:
            raise FieldError(f"{cls._what()}: the header's ext must be a JSON object, got {_show(ext)}")
        # the reference alone: a compiled run that declines half-way would list its skips twice
        dropped: list[str] | None = [] if drop_fields else None
        token = _SKIPS.set(sink)
        try:
            return cls._decode(ext, dropped), (dropped or []) + sink
        except Invalid as exc:
            raise cls._error(exc) from None
        finally:
            _SKIPS.reset(token)

    @classmethod
    def _decode(cls, ext: dict[str, Any], dropped: list[str] | None = None) -> Self:
        """`dropped` given: an optional field of the wrong shape takes its default and is described there."""
        obj = object.__new__(cls)
        put = object.__setattr__
        get = ext.get
        for spec in cls.FIELDS:
            value = get(spec.key)
            if value is not None:
                try:
                    put(obj, spec.name, spec.check(value))
                    continue
                except Invalid as exc:
                    exc.path = spec.key + exc.path
                    if spec.code is not None and exc.code is None:
                        exc.code = spec.code
                    if dropped is None or spec.required:
                        raise
                    dropped.append(cls._error(exc).remark)
            elif spec.required:
                raise Invalid(spec.check.expected, MISSING, spec.code, spec.key)
            default = spec.default
            put(obj, spec.name, default() if callable(default) else default)
        return obj

    @classmethod
    def _error(cls, exc: Invalid) -> FieldError:
        got = "nothing (the field is required)" if exc.got is MISSING else _show(exc.got)
        key = re.split(r"[\[.]", exc.path, maxsplit=1)[0]
        label = next((f" ({s.name})" for s in cls.FIELDS if s.key == key and s.name != key), "")
        err = FieldError(f"{cls._what()}: field {exc.path!r}{label}: expected {exc.expected}, got {got}")
        if exc.code is not None:
            err.code = ResponseCode(exc.code)
        return err

    @classmethod
    def _what(cls) -> str:
        return cls.WHAT or cls.__name__

    @classmethod
    def key(cls, name: str) -> str:
        """The wire key of field `name`, for code that must touch a wire-form map (`HeartBeat.key("client_id")`)."""
        for spec in cls.FIELDS:
            if spec.name == name:
                return spec.key
        raise AttributeError(f"{cls.__name__} has no field {name!r}")

    def ext(self) -> dict:
        """The wire form: short keys, None and unchanged defaults left out."""
        return schema_ext(self, self.PLAN, self.KEEP_DEFAULTS)


def _finish(cls):
    cls = dataclass(frozen=True, slots=True, kw_only=True)(cls)
    cls.FIELDS = tuple(Spec(f) for f in fields(cls))
    cls.PLAN = tuple(_plan_row(spec) for spec in cls.FIELDS)
    return cls


K_CALL, K_INT, K_BOOL, K_METAS, K_NAME = range(5)   # the kinds of check _speedups.c's schema_decode makes itself
_I64 = (-2 ** 63, 2 ** 63 - 1)


def _plan_row(spec: Spec) -> tuple:
    """One field as the compiled schema_decode reads it: (key, name, kind, lo, hi, check, default,
    default is a factory, required, good names, encoder (None: the value as it is)). Only exact
    Int, Bool and SendMetas checks are made in C, and a Name's known good names taken (its `good`
    set); schema_ext's twin encodes send pairs itself and calls any other encoder."""
    check = spec.check
    if type(check) is Opt and not check.blank:
        check = check.inner   # None never reaches a check: decode takes the default for it
    kind, lo, hi, good = K_CALL, 0, 0, None
    if type(check) is Int and _I64[0] <= check.lo and check.hi <= _I64[1]:
        kind, lo, hi = K_INT, check.lo, check.hi
    elif type(check) is Bool:
        kind = K_BOOL
    elif type(check) is SendMetas:
        kind, lo, hi = K_METAS, MAX_BATCH, MAX_PROPERTIES_BYTES // 4
    elif type(check) is Name:
        kind, good = K_NAME, check.good
    return (spec.key, spec.name, kind, lo, hi, spec.check, spec.default, callable(spec.default), spec.required, good,
            _encoder(spec.check))


def _encoder(check: Check):
    """check.encode, or None where it returns the value as it is (the twin then does too)."""
    while type(check) is Opt:
        check = check.inner   # a None is left out before any encode
    return None if type(check).encode is Check.encode else check.encode


@fast
def schema_ext(obj: Schema, plan: tuple, keep_defaults: bool) -> dict:
    """`obj.ext()`; `plan` (its class's PLAN) is what the compiled twin reads."""
    out = {}
    for spec in obj.FIELDS:
        value = getattr(obj, spec.name)
        if value is None:
            continue
        if not spec.required and not callable(spec.default) and value == spec.default and not keep_defaults:
            continue
        out[spec.key] = spec.check.encode(value)
    return out


@fast
def schema_decode(cls, plan: tuple, ext: dict):
    """`cls._decode(ext)`, or Invalid; `plan` (cls.PLAN) is what the compiled twin reads."""
    return cls._decode(ext)


def schema(cls):
    """Decorator for a schema that is not a request (a reply, a nested object)."""
    return _finish(cls)


SCHEMAS: dict[RequestCode, type[Schema]] = {}


def request(code: RequestCode, access):
    """Register a request schema with what its code needs (`quiver.wire.access`): a code
    cannot exist without saying who may send it."""
    if access is None or not hasattr(access, "needs"):
        raise TypeError(f"{code.name}: request() needs an Access declaration (quiver.wire.access)")

    def register(cls):
        cls = _finish(cls)
        cls.CODE = code
        cls.WHAT = f"{code.name} ({int(code)})"
        cls.ACCESS = access
        if code in SCHEMAS:
            raise TypeError(f"{code.name} has two schemas: {SCHEMAS[code].__name__} and {cls.__name__}")
        SCHEMAS[code] = cls
        return cls
    return register


def schema_for(code: int) -> type[Schema] | None:
    return SCHEMAS.get(code)


# ---- packed bodies ----------------------------------------------------------------------------


def pack_bodies(bodies: list) -> tuple[list | None, list]:
    """Several bodies travel as one frame plus their lengths: one socket call, not one per message."""
    if len(bodies) < 2:
        return None, list(bodies)
    return [len(b) for b in bodies], [b"".join(bodies)]


def unpack_bodies(what: str, frames: list, lengths: list | None, count: int) -> list:
    """The bodies of a request whose `l` field (if any) gives the packed lengths."""
    if lengths is None:
        bodies = frames
    else:
        if len(frames) != 1:
            raise FieldError(f"{what}: 'l' (body lengths) goes with exactly one packed body frame, got {len(frames)}")
        buf = memoryview(frames[0])
        if sum(lengths) != len(buf):
            raise FieldError(f"{what}: body lengths add up to {sum(lengths)}, the frame has {len(buf)} bytes")
        bodies, pos = [], 0
        for n in lengths:
            bodies.append(buf[pos:pos + n])
            pos += n
    if len(bodies) != count:
        raise FieldError(f"{what}: one body frame per message entry: {len(bodies)} bodies for {count} entries")
    return bodies


BODY_LENGTHS = Opt(ListOf(Int(0, MAX_BODY_BYTES), MAX_BATCH, 2))


class Props(Check):
    """A properties string ("name\\x01value\\x02..."), capped in UTF-8 bytes."""
    expected = f"a properties string of at most {MAX_PROPERTIES_BYTES} bytes"

    def __call__(self, value):
        if type(value) is str and (len(value) <= MAX_PROPERTIES_BYTES // 4
                                   or len(value.encode("utf-8", "surrogatepass")) <= MAX_PROPERTIES_BYTES):
            return value
        raise Invalid(self.expected, value)


PROPS = Props()


# ---- nested objects ------------------------------------------------------------------------------


@schema
class Subscription(Schema):
    type: str = wire("type", EXPR_TYPE, "TAG")
    expression: str = wire("expression", EXPRESSION, "*")


@schema
class ConsumerData(Schema):
    """One consumer group a client heartbeats (what GET_CONSUME_STATS and rebalancing read)."""
    group: str = wire("group", GROUP)
    subscriptions: dict = wire("subscriptions", MapOf(TOPIC, Nested(Subscription), MAX_QUEUES), {})
    consume_type: str | None = wire("consume_type", Opt(OneOf("PULL", "PUSH")), None)
    model: str | None = wire("model", Opt(OneOf("CLUSTERING", "BROADCASTING")), None)
    consume_from: str | None = wire("consume_from", Opt(Str(32)), None)
    orderly: bool | None = wire("orderly", Opt(Bool()), None)
    queues: list | None = wire("queues", Opt(ListOf(Row(TOPIC, BROKER_NAME, QUEUE_ID), 1 << 16)), None)


TOPIC_COMPACT = 1 << 8   # topic sysflag bit: a compacted topic (the latest message of each key is kept)


@schema
class TopicConfig(Schema):
    """A topic as a broker stores it (REGISTER_BROKER, HA sync, topic create): 1..1024 queues each way,
    as UPDATE_AND_CREATE_TOPIC allows; perm READ=4 | WRITE=2 | INHERIT=1; sysflag bits."""
    read: int = wire("read", QUEUE_COUNT)
    write: int = wire("write", QUEUE_COUNT)
    perm: int = wire("perm", Int(0, 15), 6)
    sysflag: int = wire("sysflag", U31, 0)
    order: bool = wire("order", Bool(), False)


@schema
class DataVersion(Schema):
    """A broker's metadata version: the name server rewrites its queue data only when this changes."""
    state: int = wire("state", U31, 0)
    ts: int = wire("ts", TIMESTAMP, 0)
    counter: int = wire("counter", Int(0, MAX_OFFSET), 0)
