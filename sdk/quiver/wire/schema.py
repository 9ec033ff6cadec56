"""The schema machinery behind `quiver.wire.requests` and `quiver.wire.replies`: checks, ranges, the base class.

A check is a callable value -> value that raises `Invalid`; a schema is a
frozen, slotted dataclass whose fields name their short wire key and their
check (`wire(key, check, default)`). `Schema.decode(ext)` raises only
`FieldError` naming the request, the field, what was expected and what came;
`obj.ext()` is the wire form. Also owns the ranges every schema shares, the
objects nested in several requests and replies, and packed batch bodies.
Does not own any request (requests.py) or reply (replies.py).
"""

import abc
import re
import reprlib
from contextvars import ContextVar
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import TYPE_CHECKING, Any, ClassVar, Self

from quiver.wire import names
from quiver.wire.speedups import fast
from quiver.wire.codes import RequestCode, ResponseCode
from quiver.errors import FieldError


MAX_OFFSET = 2 ** 63 - 1   # offsets and epoch-ms timestamps: a signed 8-byte field
MAX_QUEUES = 1024          # read/write queues of a topic
MAX_BODY_BYTES = 1 << 30   # a sanity cap; the broker enforces its max_message_bytes
MAX_BATCH = 100_000        # entries of one batch, one list field
MAX_PROPERTIES_BYTES = 32767


class Invalid(Exception):
    """Raised by a check; turned into a FieldError naming the request and field."""

    def __init__(self, expected: str, got=MISSING, code: int | None = None, path: str = ""):
        super().__init__(expected)
        self.expected, self.got, self.code, self.path = expected, got, code, path


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother = 3, 48, 48


def _show(value) -> str:
    # bounded (a 1000-deep list has no plain repr), ASCII only (no control or right-to-left characters)
    text = _REPR.repr(value).encode("ascii", "backslashreplace").decode()
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({type(value).__name__})"


# what `skip_bad` lists and maps left out, while a `Schema.decode_skipping` runs
_SKIPS: ContextVar[list[str] | None] = ContextVar("quiver_schema_skips", default=None)
_MAX_SKIPS = 1024


def _skip(where: str, value, exc: Invalid) -> None:
    sink = _SKIPS.get()
    if sink is not None and len(sink) < _MAX_SKIPS:
        inner = exc.path.lstrip(".")
        sink.append(f"{where} {_show(value)}: {inner + ' ' if inner else ''}must be {exc.expected}")


# ---- checks: callables value -> value, raising Invalid ------------------------------------


class Check(abc.ABC):
    """One field's check: __call__ returns the decoded value or raises Invalid."""
    expected = "a value"

    @abc.abstractmethod
    def __call__(self, value):
        """The wire value checked and converted."""

    def encode(self, value):
        """Python value -> JSON-able wire value (the inverse of __call__)."""
        return value


class Int(Check):
    __slots__ = ("lo", "hi", "expected")

    def __init__(self, lo: int, hi: int):
        self.lo, self.hi = lo, hi
        self.expected = f"an integer {lo}..{hi}"

    def __call__(self, value):
        if type(value) is int and self.lo <= value <= self.hi:
            return value
        raise Invalid(self.expected, value)


class Bool(Check):
    expected = "true or false"

    def __call__(self, value):
        if type(value) is bool:
            return value
        raise Invalid(self.expected, value)


class Str(Check):
    __slots__ = ("min_len", "max_len", "expected")

    def __init__(self, max_len: int, min_len: int = 1):
        self.min_len, self.max_len = min_len, max_len
        self.expected = f"a string of {min_len}..{max_len} characters"

    def __call__(self, value):
        if type(value) is str and self.min_len <= len(value) <= self.max_len:
            return value
        raise Invalid(self.expected, value)


class OneOf(Check):
    __slots__ = ("values", "expected")

    def __init__(self, *values):
        self.values = frozenset(values)
        self.expected = "one of " + ", ".join(sorted(map(repr, values)))

    def __call__(self, value):
        if type(value) is str and value in self.values:
            return value
        raise Invalid(self.expected, value)


class Name(Check):
    """A name that may become a path or an address, checked by `names` (`problem` -> str | None).

    A name's problem depends on the name alone: the first NAMES_KEPT good ones are kept
    (`good`) and taken again without the check (every request names its topic)."""
    __slots__ = ("problem", "expected", "code", "good")
    NAMES_KEPT = 4096

    def __init__(self, problem, expected: str, code: int | None = None):
        self.problem, self.expected, self.code = problem, expected, code
        self.good: set[str] = set()

    def __call__(self, value):
        if type(value) is not str:
            raise Invalid(self.expected, value, self.code)
        if value in self.good:
            return value
        problem = self.problem(value)
        if problem:
            raise Invalid(f"{self.expected} ({problem})", value, self.code)
        if len(self.good) < self.NAMES_KEPT:
            self.good.add(value)
        return value


class Opt(Check):
    """None (or absent) is allowed; with `blank`, so is "" (read as None)."""
    __slots__ = ("inner", "blank", "expected")

    def __init__(self, inner: Check, blank: bool = False):
        self.inner, self.blank = inner, blank
        self.expected = f"null{', empty' if blank else ''} or {inner.expected}"

    def __call__(self, value):
        if value is None or (self.blank and value == ""):
            return None
        return self.inner(value)

    def encode(self, value):
        return None if value is None else self.inner.encode(value)


class ListOf(Check):
    """A capped list; with `skip_bad` (replies from peers) bad items are dropped, not fatal."""
    __slots__ = ("item", "max_len", "min_len", "skip_bad", "expected")

    def __init__(self, item: Check, max_len: int, min_len: int = 0, skip_bad: bool = False):
        self.item, self.max_len, self.min_len, self.skip_bad = item, max_len, min_len, skip_bad
        self.expected = f"a list of {min_len}..{max_len} items, each {item.expected}"

    def __call__(self, value):
        if type(value) is not list or not self.min_len <= len(value) <= self.max_len:
            raise Invalid(self.expected, value)
        item = self.item
        out = []
        for i, v in enumerate(value):
            try:
                out.append(item(v))
            except Invalid as exc:
                if self.skip_bad:
                    _skip(f"item {i}", v, exc)
                    continue
                exc.path = f"[{i}]{exc.path}"
                raise
        return out

    def encode(self, value):
        enc = self.item.encode
        return [enc(v) for v in value]


class MapOf(Check):
    """A capped map; with `skip_bad` (replies from peers) bad entries are dropped, not fatal."""
    __slots__ = ("key", "value", "max_len", "skip_bad", "expected")

    def __init__(self, key: Check, value: Check, max_len: int, skip_bad: bool = False):
        self.key, self.value, self.max_len, self.skip_bad = key, value, max_len, skip_bad
        self.expected = f"a map of at most {max_len} entries, {key.expected} -> {value.expected}"

    def __call__(self, value):
        if type(value) is not dict or len(value) > self.max_len:
            raise Invalid(self.expected, value)
        out = {}
        for k, v in value.items():
            try:
                out[self.key(k)] = self.value(v)
            except Invalid as exc:
                if self.skip_bad:
                    if exc.got is k and not exc.path:   # the key was refused
                        _skip("key", k, exc)
                    else:
                        _skip(f"entry {_REPR.repr(k)[:40]} ->", v, exc)
                    continue
                exc.path = f"[{_REPR.repr(k)[:40]}]{exc.path}"
                raise
        return out

    def encode(self, value):
        kenc, venc = self.key.encode, self.value.encode
        return {kenc(k): venc(v) for k, v in value.items()}


class IdKey(Check):
    """A JSON object key holding a broker id ("0", "1" ...), decoded to an int."""
    expected = "a broker id 0..2147483647 as a string"

    def __call__(self, value):
        if type(value) is str and value.isdigit() and value.isascii() and len(value) <= 10 \
                and int(value) < 2 ** 31:
            return int(value)
        raise Invalid(self.expected, value)

    def encode(self, value):
        return str(value)


class Row(Check):
    """A fixed-shape list ([topic, queue_id]) decoded into a tuple; extra items are ignored."""
    __slots__ = ("items", "expected")

    def __init__(self, *items: Check):
        self.items = items
        self.expected = "[" + ", ".join(i.expected for i in items) + "]"

    def __call__(self, value):
        if type(value) is not list or len(value) < len(self.items):
            raise Invalid(self.expected, value)
        out = []
        for i, (check, v) in enumerate(zip(self.items, value)):
            try:
                out.append(check(v))
            except Invalid as exc:
                exc.path = f"[{i}]{exc.path}"
                raise
        return tuple(out)

    def encode(self, value):
        return [c.encode(v) for c, v in zip(self.items, value)]


class Nested(Check):
    """A JSON object decoded through another schema."""
    __slots__ = ("schema", "expected")

    def __init__(self, schema: type["Schema"]):
        self.schema = schema
        self.expected = f"an object {schema.__name__}"

    def __call__(self, value):
        if type(value) is not dict:
            raise Invalid(self.expected, value)
        try:
            return self.schema._decode(value)
        except Invalid as exc:
            exc.path = "." + exc.path  # topics['T'].read, not topics['T']read
            raise

    def encode(self, value):
        return value.ext()


class Json(Check):
    """Opaque JSON kept as is (status maps, report blobs), bounded by the header cap."""
    expected = "any JSON value"

    def __call__(self, value):
        return value


class SendMetas(Check):
    """A batch's per-message [flag, properties] pairs, checked list-wise (the put path is hot).

    Decodes to (flags, properties) as two lists."""
    expected = (f"a list of 1..{MAX_BATCH} [flag (a 32-bit integer), properties "
                f"(a string of at most {MAX_PROPERTIES_BYTES} bytes)]")

    def __call__(self, value):
        if type(value) is not list or not 0 < len(value) <= MAX_BATCH:
            raise Invalid(self.expected, value)
        try:
            flags = [m[0] for m in value]
            props = [m[1] for m in value]
        except (TypeError, IndexError, KeyError):
            raise Invalid(self.expected, value) from None
        if set(map(type, flags)) != {int} or set(map(type, props)) != {str} \
                or min(flags) < -2 ** 31 or max(flags) >= 2 ** 31:
            raise Invalid(self.expected, value)
        # UTF-8 takes at most 4 bytes a character: only long strings can be too big
        if max(map(len, props)) > MAX_PROPERTIES_BYTES // 4:
            for p in props:
                if len(p) > MAX_PROPERTIES_BYTES // 4 and len(p.encode()) > MAX_PROPERTIES_BYTES:
                    raise Invalid(f"properties of at most {MAX_PROPERTIES_BYTES} bytes (move data into the body)",
                                  f"{len(p.encode())} bytes", ResponseCode.PROPERTIES_SIZE_EXCEEDED)
        return flags, props

    def encode(self, value):
        flags, props = value
        return [[f, p] for f, p in zip(flags, props)]


# ---- the ranges every schema shares --------------------------------------------------------

U8 = Int(0, 255)
I32 = Int(-2 ** 31, 2 ** 31 - 1)
U31 = Int(0, 2 ** 31 - 1)
OFFSET = Int(0, MAX_OFFSET)
TIMESTAMP = Int(0, MAX_OFFSET)
ANY_OFFSET = Int(-2, MAX_OFFSET)        # -1 latest, -2 earliest where a field allows it
QUEUE_ID = Int(0, MAX_QUEUES - 1)
QUEUE_COUNT = Int(1, MAX_QUEUES)
MAX_PULL = Int(1, 1 << 20)
SUSPEND_MS = Int(0, 24 * 3600 * 1000)
TOPIC = Name(names.topic_problem, "a topic name")
GROUP = Name(names.group_problem, "a group name")
BROKER_NAME = Name(names.broker_name_problem, "a broker name")
CLUSTER = Name(lambda name: names.broker_name_problem(name, "cluster"), "a cluster name")
ADDR = Name(names.addr_problem, "HOST:PORT")
CLIENT_ID = Str(255)
KEY = Str(255)
EXPRESSION = Str(64 * 1024)
EXPR_TYPE = OneOf("TAG", "SQL92")
MSG_ID = Str(64)


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
