"""One frozen schema per request code: the short keys, types and ranges of every field.

`protocol.py` owns the frame; this module owns what travels in a header's
"ext". A schema is a frozen dataclass whose fields name their wire key and a
check::

    @request(RequestCode.GET_MAX_OFFSET)
    class GetMaxOffset(Schema):
        topic: str = wire("t", TOPIC)
        queue_id: int = wire("q", QUEUE_ID)

    GetMaxOffset(topic="Orders", queue_id=0).ext()   -> {"t": "Orders", "q": 0}
    GetMaxOffset.decode({"t": "Orders", "q": 0})     -> GetMaxOffset(...)

`Service.handle` decodes every request's ext through the schema of its code
before a handler runs (`req.args`); SDK callers build the typed object and the
transport sends `obj.CODE` with `obj.ext()`. Reply shapes a peer trusts (a
route, a send result, a pull result) have schemas too, decoded by the caller.

`decode` raises only `FieldError` (a ProtocolError: INVALID_PARAMETER, RocketMQ's
code for a bad field, unless the field names the code RocketMQ would use), whose remark names the code, the
field, what was expected and what came. Keys a schema does not know are
ignored, so newer peers can add fields. Every integer is ranged to the width
it is packed into; every string, list and map is length-capped.
"""

import reprlib
from dataclasses import MISSING, dataclass, field, fields

from . import names
from .codes import RequestCode, ResponseCode
from .errors import FieldError

__all__ = ["Schema", "FieldError", "SCHEMAS", "request", "wire", "schema_for", "pack_bodies",
           "MAX_OFFSET", "MAX_QUEUES"]

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


# ---- checks: callables value -> value, raising Invalid ------------------------------------


class Check:
    expected = "a value"

    def __call__(self, value):
        raise NotImplementedError

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
    """A name that may become a path or an address, checked by `names` (`problem` -> str | None)."""
    __slots__ = ("problem", "expected", "code")

    def __init__(self, problem, expected: str, code: int | None = None):
        self.problem, self.expected, self.code = problem, expected, code

    def __call__(self, value):
        if type(value) is not str:
            raise Invalid(self.expected, value, self.code)
        problem = self.problem(value)
        if problem:
            raise Invalid(f"{self.expected} ({problem})", value, self.code)
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
        return self.schema._decode(value)

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


def wire(key: str, check: Check, default=MISSING, *, code: int | None = None):
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
    FIELDS: tuple = ()
    __slots__ = ()

    @classmethod
    def decode(cls, ext) -> "Schema":
        """A request's ext -> the typed object, or FieldError."""
        if type(ext) is not dict:
            raise FieldError(f"{cls._what()}: the header's ext must be a JSON object, got {_show(ext)}")
        try:
            return cls._decode(ext)
        except Invalid as exc:
            raise cls._error(exc) from None

    @classmethod
    def _decode(cls, ext: dict):
        obj = object.__new__(cls)
        put = object.__setattr__
        get = ext.get
        for spec in cls.FIELDS:
            value = get(spec.key)
            if value is None:
                if spec.required:
                    raise Invalid(spec.check.expected, MISSING, spec.code, spec.key)
                default = spec.default
                put(obj, spec.name, default() if callable(default) else default)
                continue
            try:
                put(obj, spec.name, spec.check(value))
            except Invalid as exc:
                exc.path = spec.key + exc.path
                if spec.code is not None and exc.code is None:
                    exc.code = spec.code
                raise
        return obj

    @classmethod
    def _error(cls, exc: Invalid) -> FieldError:
        got = "nothing (the field is required)" if exc.got is MISSING else _show(exc.got)
        key = exc.path.split("[", 1)[0]
        label = next((f" ({s.name})" for s in cls.FIELDS if s.key == key and s.name != key), "")
        err = FieldError(f"{cls._what()}: field {exc.path!r}{label}: expected {exc.expected}, got {got}")
        if exc.code is not None:
            err.code = ResponseCode(exc.code)
        return err

    @classmethod
    def _what(cls) -> str:
        return f"{cls.CODE.name} ({int(cls.CODE)})" if cls.CODE is not None else cls.__name__

    def ext(self) -> dict:
        """The wire form: short keys, None and unchanged defaults left out."""
        out = {}
        for spec in self.FIELDS:
            value = getattr(self, spec.name)
            if value is None:
                continue
            if not spec.required and not callable(spec.default) and value == spec.default:
                continue
            out[spec.key] = spec.check.encode(value)
        return out


def _finish(cls):
    cls = dataclass(frozen=True, slots=True, kw_only=True)(cls)
    cls.FIELDS = tuple(Spec(f) for f in fields(cls))
    return cls


def schema(cls):
    """Decorator for a schema that is not a request (a reply, a nested object)."""
    return _finish(cls)


SCHEMAS: dict[RequestCode, type[Schema]] = {}


def request(code: RequestCode):
    def register(cls):
        cls = _finish(cls)
        cls.CODE = code
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


@schema
class TopicConfig(Schema):
    read: int = wire("read", Int(0, MAX_QUEUES))
    write: int = wire("write", Int(0, MAX_QUEUES))
    perm: int = wire("perm", Int(0, 15), 6)
    sysflag: int = wire("sysflag", I32, 0)
    order: bool = wire("order", Bool(), False)


@schema
class DataVersion(Schema):
    state: int = wire("state", I32, 0)
    ts: int = wire("ts", TIMESTAMP, 0)
    counter: int = wire("counter", Int(0, MAX_OFFSET), 0)


# ---- requests: name server ---------------------------------------------------------------------


@request(RequestCode.REGISTER_BROKER)
class RegisterBroker(Schema):
    cluster: str = wire("cluster", CLUSTER)
    broker_name: str = wire("broker_name", BROKER_NAME)
    broker_addr: str = wire("broker_addr", ADDR)
    broker_id: int = wire("broker_id", U31, 0)
    data_version: DataVersion | None = wire("data_version", Opt(Nested(DataVersion)), None)
    topics: dict = wire("topics", MapOf(TOPIC, Nested(TopicConfig), 100_000), {})
    filter_servers: list = wire("filter_servers", ListOf(ADDR, 1024), [])
    ha_addr: str | None = wire("ha_addr", Opt(ADDR), None)


@request(RequestCode.UNREGISTER_BROKER)
class UnregisterBroker(Schema):
    cluster: str = wire("cluster", CLUSTER)
    broker_name: str = wire("broker_name", BROKER_NAME)
    broker_addr: str = wire("broker_addr", ADDR)
    broker_id: int | None = wire("broker_id", Opt(U31), None)


@request(RequestCode.GET_ROUTEINFO_BY_TOPIC)
class GetRouteInfo(Schema):
    topic: str = wire("topic", TOPIC)


@request(RequestCode.GET_BROKER_CLUSTER_INFO)
class GetClusterInfo(Schema):
    pass


@request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
class GetTopicList(Schema):
    pass


# ---- requests: every service ---------------------------------------------------------------------


@request(RequestCode.PING)
class Ping(Schema):
    pass


@request(RequestCode.STATUS)
class Status(Schema):
    pass


# ---- requests: broker, messages --------------------------------------------------------------------


@request(RequestCode.SEND_MESSAGE)
class SendMessage(Schema):
    """One message (SEND_MESSAGE, SEND_MESSAGE_V2) or a batch (SEND_BATCH_MESSAGE) to one queue."""
    topic: str = wire("t", TOPIC, code=ResponseCode.MESSAGE_ILLEGAL)
    queue_id: int = wire("q", QUEUE_ID, 0)
    metas: tuple = wire("m", SendMetas())       # (flags, properties), one entry per body
    lengths: list | None = wire("l", BODY_LENGTHS, None)
    group: str | None = wire("g", Opt(GROUP), None)
    born_ts: int = wire("b", TIMESTAMP, 0)       # 0: now
    born_host: str | None = wire("bh", Opt(ADDR), None)
    sys_flag: int = wire("sf", I32, 0)
    reconsume: int = wire("rc", U31, 0)
    prepared_offset: int = wire("po", OFFSET, 0)
    wait: bool = wire("w", Bool(), True)        # False: oneway, no reply wanted

    def bodies(self, frames: list) -> list:
        return unpack_bodies(self._what(), frames, self.lengths, len(self.metas[0]))


SCHEMAS[RequestCode.SEND_MESSAGE_V2] = SendMessage
SCHEMAS[RequestCode.SEND_BATCH_MESSAGE] = SendMessage


@request(RequestCode.PULL_MESSAGE)
class PullMessage(Schema):
    """A pull from the broker (tag subscriptions) or a filter server (SQL92, `broker_addr` the source)."""
    topic: str = wire("t", TOPIC)
    queue_id: int = wire("q", QUEUE_ID)
    offset: int = wire("o", OFFSET)
    group: str | None = wire("g", Opt(GROUP), None)
    commit_offset: int | None = wire("co", Opt(Int(-1, MAX_OFFSET)), None)  # piggy-backed commit
    max_msgs: int = wire("n", MAX_PULL, 32)
    suspend_ms: int = wire("s", SUSPEND_MS, 0)
    expression: str | None = wire("sub", Opt(EXPRESSION), None)
    expression_type: str | None = wire("tp", Opt(EXPR_TYPE), None)
    max_bytes: int = wire("mb", Int(1, MAX_BODY_BYTES), 4 << 20)
    broker_addr: str | None = wire("ba", Opt(ADDR), None)


@request(RequestCode.QUERY_MESSAGE)
class QueryMessage(Schema):
    topic: str = wire("t", TOPIC)
    key: str = wire("key", Str(1024))
    max_msgs: int = wire("n", Int(1, 64 * 1024), 32)
    begin_ts: int = wire("b", TIMESTAMP, 0)
    end_ts: int = wire("e", TIMESTAMP, 2 ** 62)


@request(RequestCode.VIEW_MESSAGE_BY_ID)
class ViewMessage(Schema):
    offset: int = wire("offset", OFFSET)


@request(RequestCode.CONSUMER_SEND_MSG_BACK)
class ConsumerSendMsgBack(Schema):
    group: str = wire("g", GROUP)
    offset: int = wire("offset", OFFSET)                  # CommitLog offset of the failed message
    delay_level: int = wire("delay", Int(-1, 2 ** 31 - 1), 0)  # -1: straight to the DLQ
    origin_topic: str | None = wire("ot", Opt(TOPIC), None)
    origin_msg_id: str | None = wire("omid", Opt(MSG_ID), None)
    reconsume: int | None = wire("rc", Opt(U31), None)
    max_reconsume: int | None = wire("max", Opt(Int(-1, 2 ** 31 - 1)), None)


# ---- requests: broker, offsets and queues -----------------------------------------------------------


@request(RequestCode.QUERY_CONSUMER_OFFSET)
class QueryConsumerOffset(Schema):
    group: str = wire("g", GROUP)
    topic: str = wire("t", TOPIC)
    queue_id: int = wire("q", QUEUE_ID)


@request(RequestCode.UPDATE_CONSUMER_OFFSET)
class UpdateConsumerOffset(Schema):
    group: str = wire("g", GROUP)
    topic: str = wire("t", TOPIC)
    queue_id: int = wire("q", QUEUE_ID)
    offset: int = wire("o", OFFSET)


@request(RequestCode.GET_MAX_OFFSET)
class GetMaxOffset(Schema):
    topic: str = wire("t", TOPIC)
    queue_id: int = wire("q", QUEUE_ID)


@request(RequestCode.GET_MIN_OFFSET)
class GetMinOffset(Schema):
    topic: str = wire("t", TOPIC)
    queue_id: int = wire("q", QUEUE_ID)


@request(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP)
class SearchOffsetByTimestamp(Schema):
    topic: str = wire("t", TOPIC)
    queue_id: int = wire("q", QUEUE_ID)
    timestamp: int = wire("ts", TIMESTAMP)


@request(RequestCode.LOCK_BATCH_MQ)
class LockBatchMq(Schema):
    group: str = wire("g", GROUP)
    client_id: str = wire("c", CLIENT_ID)
    queues: list = wire("mqs", ListOf(Row(TOPIC, QUEUE_ID), 1 << 16))


@request(RequestCode.UNLOCK_BATCH_MQ)
class UnlockBatchMq(Schema):
    group: str = wire("g", GROUP)
    client_id: str = wire("c", CLIENT_ID)
    queues: list = wire("mqs", ListOf(Row(TOPIC, QUEUE_ID), 1 << 16))


# ---- requests: broker, clients and groups ------------------------------------------------------------


@request(RequestCode.HEART_BEAT)
class HeartBeat(Schema):
    client_id: str = wire("client_id", CLIENT_ID)
    producers: list = wire("producers", ListOf(GROUP, 1024), [])
    consumers: list = wire("consumers", ListOf(Nested(ConsumerData), 1024), [])


@request(RequestCode.UNREGISTER_CLIENT)
class UnregisterClient(Schema):
    client_id: str = wire("client_id", CLIENT_ID)
    producer_group: str | None = wire("producer_group", Opt(GROUP), None)
    consumer_group: str | None = wire("consumer_group", Opt(GROUP), None)


@request(RequestCode.GET_CONSUMER_LIST_BY_GROUP)
class GetConsumerList(Schema):
    group: str = wire("g", GROUP)


@request(RequestCode.GET_CONSUME_STATS)
class GetConsumeStats(Schema):
    group: str = wire("g", GROUP)


@request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP)
class UpdateSubscriptionGroup(Schema):
    group: str = wire("g", GROUP)
    retry_max_times: int = wire("retry_max_times", Int(0, 1_000_000), 16)


@request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED)
class NotifyConsumerIdsChanged(Schema):
    group: str | None = wire("g", Opt(GROUP), None)


@request(RequestCode.CHECK_CLIENT_CONFIG)
class CheckClientConfig(Schema):
    group: str | None = wire("g", Opt(GROUP), None)
    topic: str | None = wire("t", Opt(TOPIC), None)
    expression_type: str | None = wire("tp", Opt(EXPR_TYPE), None)
    expression: str | None = wire("sub", Opt(EXPRESSION), None)


# ---- requests: broker, topics and admin -----------------------------------------------------------------


@request(RequestCode.UPDATE_AND_CREATE_TOPIC)
class CreateTopic(Schema):
    topic: str = wire("topic", TOPIC)
    read: int = wire("read", QUEUE_COUNT, 4)
    write: int | None = wire("write", Opt(QUEUE_COUNT), None)   # None: as many as read
    perm: int = wire("perm", Int(0, 15), 6)                     # READ=4, WRITE=2, INHERIT=1
    order: bool = wire("order", Bool(), False)


@request(RequestCode.DELETE_TOPIC_IN_BROKER)
class DeleteTopic(Schema):
    topic: str = wire("topic", TOPIC)


@request(RequestCode.GET_ALL_TOPIC_CONFIG)
class GetAllTopicConfig(Schema):
    pass


@request(RequestCode.ADMIN_CLEAN_EXPIRED)
class CleanExpired(Schema):
    pass


@request(RequestCode.REGISTER_FILTER_SERVER)
class RegisterFilterServer(Schema):
    addr: str = wire("addr", ADDR)
    unregister: bool = wire("unregister", Bool(), False)


# ---- requests: scheduler ---------------------------------------------------------------------------------


@request(RequestCode.SCHEDULE_INIT)
class ScheduleInit(Schema):
    pass


REPUT_META = Row(I32, PROPS, TIMESTAMP, U31, I32, TIMESTAMP)  # flag, props, born, reconsume, sys flag, due


@request(RequestCode.SCHEDULE_REPUT)
class ScheduleReput(Schema):
    """Due messages back to their real topics (or `roll`: timers re-parked in the timer topic)."""
    metas: list = wire("m", ListOf(REPUT_META, MAX_BATCH, 1))
    lengths: list | None = wire("l", BODY_LENGTHS, None)
    roll: bool = wire("roll", Bool(), False)
    born_host: str | None = wire("bh", Opt(ADDR), None)

    def bodies(self, frames: list) -> list:
        return unpack_bodies(self._what(), frames, self.lengths, len(self.metas))


@request(RequestCode.SCHEDULE_CANCEL)
class ScheduleCancel(Schema):
    msg_id: str = wire("id", MSG_ID)


# ---- requests: transactions --------------------------------------------------------------------------------

TX_STATE = Int(0, 0xC)  # record.TX_NOT / TX_COMMIT / TX_ROLLBACK


@request(RequestCode.END_TRANSACTION)
class EndTransaction(Schema):
    group: str = wire("g", GROUP)
    entries: list = wire("e", ListOf(Row(OFFSET, OFFSET, TX_STATE, Str(128, 0)), MAX_BATCH, 1))  # phys, qoff, state, txid
    from_check: bool = wire("fc", Bool(), False)


@request(RequestCode.TRANSACTION_CHECK)
class TransactionCheck(Schema):
    entries: list = wire("e", ListOf(Row(OFFSET, OFFSET, OneOf("c", "r", "d")), MAX_BATCH, 1))  # phys, qoff, action


@request(RequestCode.TRANSACTION_LIST_OPEN)
class TransactionListOpen(Schema):
    limit: int = wire("limit", Int(1, 1_000_000), 1000)


CHECK_ENTRY = Row(OFFSET, OFFSET, Str(128, 0), Str(255, 0), QUEUE_ID, TIMESTAMP, TIMESTAMP, I32, PROPS)


@request(RequestCode.CHECK_TRANSACTION_STATE)
class CheckTransactionState(Schema):
    """Broker -> producer: [half phys, half qoff, txid, real topic, real qid, born, stored, flag, props]."""
    group: str = wire("g", GROUP)
    entries: list = wire("e", ListOf(CHECK_ENTRY, MAX_BATCH, 1))


# ---- requests: master/slave ---------------------------------------------------------------------------------


@request(RequestCode.HA_SYNC_METADATA)
class HaSyncMetadata(Schema):
    offsets: list = wire("offsets", ListOf(Row(GROUP, TOPIC, QUEUE_ID, OFFSET), 1 << 20), [])


@request(RequestCode.HA_SLAVE_OFFSETS)
class HaSlaveOffsets(Schema):
    pass


@request(RequestCode.HA_TRANSFER)
class HaTransfer(Schema):
    offset: int = wire("o", OFFSET)
    segment_bytes: int = wire("sb", Int(0, MAX_OFFSET), 0)
    master_end: int = wire("me", OFFSET, 0)


@request(RequestCode.HA_REPORT)
class HaReport(Schema):
    offset: int = wire("o", OFFSET)
    addr: str = wire("addr", Str(255), "?")
    broker_id: int = wire("id", U31, 1)
    reset: bool = wire("reset", Bool(), False)


# ---- replies a client or service trusts ---------------------------------------------------------------
# Lists and maps of peers' data skip bad entries: one garbage registration must not hide the rest.


@schema
class QueueData(Schema):
    broker_name: str = wire("broker_name", BROKER_NAME)
    read: int = wire("read", Int(0, MAX_QUEUES))
    write: int = wire("write", Int(0, MAX_QUEUES))
    perm: int = wire("perm", Int(0, 15), 6)
    order: bool = wire("order", Bool(), False)


@schema
class BrokerData(Schema):
    cluster: str = wire("cluster", CLUSTER)
    broker_name: str = wire("broker_name", BROKER_NAME)
    addrs: dict = wire("addrs", MapOf(IdKey(), ADDR, 64, skip_bad=True))   # broker id -> address


@schema
class RouteData(Schema):
    topic: str = wire("topic", TOPIC)
    queues: list = wire("queues", ListOf(Nested(QueueData), 10_000, skip_bad=True), [])
    brokers: list = wire("brokers", ListOf(Nested(BrokerData), 10_000, skip_bad=True), [])
    filter_servers: dict = wire("filter_servers", MapOf(ADDR, ListOf(ADDR, 1024, skip_bad=True), 10_000,
                                                        skip_bad=True), {})


@schema
class RouteReply(Schema):
    route: RouteData = wire("route", Nested(RouteData))


@schema
class LiveBroker(Schema):
    broker_name: str = wire("broker_name", BROKER_NAME)
    broker_id: int = wire("broker_id", U31, 0)
    age_ms: int = wire("age_ms", Int(0, MAX_OFFSET), 0)
    filter_servers: list = wire("filter_servers", ListOf(ADDR, 1024, skip_bad=True), [])


@schema
class ClusterData(Schema):
    brokers: dict = wire("brokers", MapOf(BROKER_NAME, Nested(BrokerData), 10_000, skip_bad=True), {})
    clusters: dict = wire("clusters", MapOf(CLUSTER, ListOf(BROKER_NAME, 10_000, skip_bad=True), 1000,
                                            skip_bad=True), {})
    live: dict = wire("live", MapOf(ADDR, Nested(LiveBroker), 10_000, skip_bad=True), {})


@schema
class ClusterReply(Schema):
    cluster: ClusterData = wire("cluster", Nested(ClusterData))


@schema
class RegisterBrokerReply(Schema):
    master_addr: str | None = wire("master_addr", Opt(ADDR, blank=True), None)
    ha_addr: str | None = wire("ha_addr", Opt(ADDR, blank=True), None)


@schema
class SendReply(Schema):
    topic: str = wire("t", TOPIC)
    queue_id: int = wire("q", QUEUE_ID)
    queue_offset: int = wire("o", OFFSET)                  # of the first message
    phys_offsets: list = wire("p", ListOf(OFFSET, MAX_BATCH))


@schema
class PullReply(Schema):
    """Every pull answer: where to go next and the queue's bounds."""
    next: int = wire("next", OFFSET)   # required: read as 0 it would rewind a consumer to the queue's start
    min: int = wire("min", OFFSET, 0)
    max: int = wire("max", OFFSET, 0)


@schema
class OffsetReply(Schema):
    offset: int = wire("offset", OFFSET)


@schema
class ScheduleInitReply(Schema):
    delay_levels_ms: list = wire("delay_levels_ms", ListOf(Int(1, 10 * 365 * 86_400_000), 1024, 1))
    broker_name: str = wire("broker_name", BROKER_NAME)
    schedule_queues: int = wire("schedule_queues", QUEUE_COUNT)
    timer_queues: int = wire("timer_queues", QUEUE_COUNT)
    timer_horizon_ms: int = wire("timer_horizon_ms", Int(0, MAX_OFFSET))
    now_ms: int = wire("now_ms", TIMESTAMP)


@schema
class ScheduleReputReply(Schema):
    count: int = wire("n", Int(0, MAX_BATCH), 0)
    dropped: list = wire("dropped", ListOf(Int(0, MAX_BATCH), MAX_BATCH), [])
    store_ts: int = wire("ts", TIMESTAMP, 0)


# ---- replies: master/slave sync, scheduler membership (added by the broker-HA/scheduler/filter conversion) ----

OFFSET_ROW = Row(GROUP, TOPIC, QUEUE_ID, OFFSET)   # [group, topic, queue id, offset]


@schema
class GroupConfig(Schema):
    retry_max_times: int = wire("retry_max_times", Int(0, 1_000_000), 16)
    consume_enable: bool = wire("consume_enable", Bool(), True)


@schema
class HaSyncMetadataReply(Schema):
    """A master's topics, groups and consumer offsets, as its slaves copy them."""
    topics: dict = wire("topics", MapOf(TOPIC, Nested(TopicConfig), 100_000, skip_bad=True), {})
    groups: dict = wire("groups", MapOf(GROUP, Nested(GroupConfig), 100_000, skip_bad=True), {})
    offsets: list = wire("offsets", ListOf(OFFSET_ROW, 1 << 20, skip_bad=True), [])
    max_offset: int = wire("max_offset", OFFSET, 0)


@schema
class HaSlaveOffsetsReply(Schema):
    offsets: list = wire("offsets", ListOf(OFFSET_ROW, 1 << 20, skip_bad=True), [])


@schema
class ConsumerListReply(Schema):
    ids: list = wire("ids", ListOf(CLIENT_ID, 100_000, skip_bad=True), [])


@schema
class PingReply(Schema):
    service: str | None = wire("service", Opt(Str(64)), None)
    client_id: str | None = wire("client_id", Opt(CLIENT_ID), None)   # schedulers: which instance answered


# ---- replies the SDK's admin, push consumer and filter checks read (added by the SDK-clients conversion) ----


@schema
class TopicConfigReply(Schema):
    """UPDATE_AND_CREATE_TOPIC: the topic's config as the broker stored it."""
    topic: str = wire("topic", TOPIC)
    config: TopicConfig = wire("config", Nested(TopicConfig))


@schema
class TopicListReply(Schema):
    topics: list = wire("topics", ListOf(TOPIC, 1 << 20, skip_bad=True), [])


@schema
class LockBatchReply(Schema):
    locked: list = wire("locked", ListOf(Row(TOPIC, QUEUE_ID), 1 << 16, skip_bad=True), [])


@schema
class ConsumeStatsRow(Schema):
    topic: str = wire("topic", TOPIC)
    queue_id: int = wire("queue_id", QUEUE_ID)
    broker_offset: int = wire("broker_offset", OFFSET, 0)
    consumer_offset: int | None = wire("consumer_offset", Opt(OFFSET), None)
    lag: int = wire("lag", OFFSET, 0)
    last_consume_time: int | None = wire("last_consume_time", Opt(TIMESTAMP), None)
    client_id: str | None = wire("client_id", Opt(CLIENT_ID), None)


@schema
class ConsumeStatsReply(Schema):
    rows: list = wire("rows", ListOf(Nested(ConsumeStatsRow), 1 << 20, skip_bad=True), [])
    clients: list = wire("clients", ListOf(CLIENT_ID, 100_000, skip_bad=True), [])
    # topic -> {"TAG:expression": [client ids]} where members of the group disagree
    conflicts: dict = wire("conflicts", MapOf(TOPIC, MapOf(Str(EXPRESSION.max_len + 8), ListOf(CLIENT_ID, 100_000,
                                                                                             skip_bad=True),
                                                           1024, skip_bad=True), 10_000, skip_bad=True), {})


@schema
class TransactionListReply(Schema):
    """TRANSACTION_LIST_OPEN: rows are shown as they come (admin output); a row that is not a map is dropped."""
    open: list = wire("open", ListOf(MapOf(Str(64), Json(), 64), 1_000_000, skip_bad=True), [])
    count: int = wire("count", Int(0, MAX_OFFSET), 0)
    resolved: int = wire("resolved", Int(0, MAX_OFFSET), 0)


@schema
class CleanExpiredReply(Schema):
    deleted_segments: int = wire("deleted_segments", U31)


@schema
class StatusReply(Schema):
    """STATUS of any service: a free-form map, read by people and by `Admin.ha_status`."""
    status: dict = wire("status", MapOf(Str(255), Json(), 10_000))


@schema
class SubscriptionParseFailedReply(Schema):
    """CHECK_CLIENT_CONFIG answered SUBSCRIPTION_PARSE_FAILED: where in the expression."""
    position: int | None = wire("position", Opt(U31), None)
