"""The checks a schema field names, and the ranges every schema shares.

A check is a callable value -> value that raises `Invalid` (expected, got); `quiver.wire.schema`
turns that into a FieldError naming the request and the field. Does not own the Schema base
(schema.py) or any request or reply.
"""

import abc
import reprlib
from contextvars import ContextVar
from dataclasses import MISSING
from typing import TYPE_CHECKING

from quiver.wire import names
from quiver.wire.codes import ResponseCode

if TYPE_CHECKING:
    from quiver.wire.schema import Schema

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
