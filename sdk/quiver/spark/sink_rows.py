"""The "quiver" sink without Spark: options, the input columns, rows -> Messages, sending a partition.

A partition's rows arrive as columns (name -> list of Python values, from an
Arrow batch or from Rows); each row becomes one Message carrying an
idempotence key property, and the partition's messages go through one pipelined
Producer (send_async, auto-batched) with at most `maxInFlight` unanswered; the
partition is written only when every send is acknowledged, and a failed send
raises (Spark fails the task and retries it).

Idempotence key: `<prefix>:<partition>:<row>` where the prefix is the streaming
query id and batch id (both stable when a restarted query runs a batch again
from its checkpoint) or the batch write's `writeId`; or the value of the column
`idempotenceKeyColumn`. Owns the options, the schema check and that loop; not
Spark's writer classes (sink.py). Imports no pyspark: unit-testable alone.
"""

import datetime
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from quiver.client.message import Message, SendResult, SendStatus
from quiver.errors import ClientError, QuiverError
from quiver.wire.properties import BROKER_WRITTEN, RESERVED_PROPERTIES
from quiver.wire.property_string import NAME_SEP, PROP_SEP

# Spark types (DataType.simpleString()) each input column may have; other columns are ignored
# (so a DataFrame read with the source, with broker, queue_offset, msg_id ..., writes as it is)
COLUMN_TYPES: dict[str, tuple[str, ...]] = {
    "topic": ("string",),
    "body": ("binary", "string"),
    "keys": ("array<string>", "string"),
    "tags": ("string",),
    "properties": ("map<string,string>",),
    "delay_level": ("tinyint", "smallint", "int"),
    "delay_ms": ("tinyint", "smallint", "int", "bigint"),
    "deliver_at": ("timestamp", "timestamp_ntz", "bigint"),
}
KEY_COLUMN_TYPES = ("string", "int", "bigint")
DEFAULT_KEY_PROPERTY = "idempotence_key"
# the producer and the broker write these: a map read by the source carries them, a send may not
_NOT_SENT = frozenset(RESERVED_PROPERTIES) | frozenset(BROKER_WRITTEN)


def _positive(o: dict[str, Any], name: str, default: int) -> int:
    v = o.get(name.lower())
    if v is None or v == "":
        return default
    try:
        n = int(v)
    except ValueError:
        n = 0
    if n <= 0:
        raise ClientError(f"option {name} must be a positive integer, got {v!r}")
    return n


@dataclass(frozen=True)
class SinkOptions:
    """The sink's options (case-insensitive, like every Spark option); see docs/features/spark-sink.md."""
    namesrv: str
    topic: str | None = None            # every row goes there; None: each row's `topic` column
    credentials: str | None = None
    key_property: str = DEFAULT_KEY_PROPERTY
    key_column: str | None = None
    write_id: str | None = None         # batch writes: the key prefix (None: a fresh one per save())
    max_in_flight: int = 10_000
    send_timeout_ms: int = 3000

    @classmethod
    def parse(cls, options: Any) -> "SinkOptions":
        o = {str(k).lower(): v for k, v in dict(options).items()}
        prop = o.get("idempotenceproperty", DEFAULT_KEY_PROPERTY)
        if not prop or prop in _NOT_SENT or NAME_SEP in prop or PROP_SEP in prop:
            raise ClientError(f"option idempotenceProperty must be a property name a message may carry, "
                              f"got {prop!r}")
        return cls(namesrv=o.get("namesrv") or o.get("nameserver") or "127.0.0.1:9876",
                   topic=(o.get("topic") or "").strip() or None,
                   credentials=o.get("credentials") or os.environ.get("QUIVER_CREDENTIALS") or None,
                   key_property=prop, key_column=o.get("idempotencekeycolumn") or None,
                   write_id=o.get("writeid") or None,
                   max_in_flight=_positive(o, "maxInFlight", 10_000),
                   send_timeout_ms=_positive(o, "sendTimeoutMs", 3000))


def check_schema(opts: SinkOptions, types: dict[str, str]) -> None:
    """Refuse a DataFrame the sink cannot write, before any task runs. `types`: column name ->
    Spark type (simpleString). ClientError saying which column to fix."""
    if "body" not in types:
        raise ClientError(f"the quiver sink needs a 'body' column (binary or string); columns: {sorted(types)}")
    if opts.topic is None and "topic" not in types:
        raise ClientError("give the option 'topic' or a 'topic' column (string) to say where rows go")
    for name, allowed in COLUMN_TYPES.items():
        if name in types and types[name] not in allowed:
            raise ClientError(f"column {name!r} must be {' or '.join(allowed)}, not {types[name]}")
    if opts.key_column is not None:
        kind = types.get(opts.key_column)
        if kind not in KEY_COLUMN_TYPES:
            raise ClientError(f"idempotenceKeyColumn {opts.key_column!r} must be a column of type "
                              f"{' or '.join(KEY_COLUMN_TYPES)}, got {kind or 'no such column'}")


def _epoch_ms(v: Any) -> int:
    if isinstance(v, datetime.datetime):
        return int(v.timestamp() * 1000)   # aware (Arrow, UTC) or naive local (Rows): both right
    return int(v)


def _pairs(v: Any) -> Iterable[tuple[str, str]]:
    return v.items() if isinstance(v, dict) else v   # Rows give dicts, Arrow lists of pairs


def messages(cols: dict[str, list[Any]], n: int, opts: SinkOptions, prefix: str, first_row: int) -> Iterator[Message]:
    """The Messages of `n` rows given as columns; the i-th row's generated key is
    `<prefix>:<first_row + i>`. ClientError naming the row for a value no message can carry."""
    topics, bodies = cols.get("topic"), cols["body"]
    keys, tags, props = cols.get("keys"), cols.get("tags"), cols.get("properties")
    levels, delays, dues = cols.get("delay_level"), cols.get("delay_ms"), cols.get("deliver_at")
    own_keys = cols.get(opts.key_column) if opts.key_column else None
    prop_name = opts.key_property
    for i in range(n):
        topic = opts.topic or (topics[i] if topics is not None else None)
        if not topic:
            raise ClientError(f"row {first_row + i}: no topic (a null 'topic' and no 'topic' option)")
        body = bodies[i]
        body = b"" if body is None else body.encode() if isinstance(body, str) else bytes(body)
        properties = {}
        if props is not None and props[i]:
            properties = {k: v for k, v in _pairs(props[i]) if v is not None and k not in _NOT_SENT}
        if own_keys is not None:
            if own_keys[i] is None or own_keys[i] == "":
                raise ClientError(f"row {first_row + i}: idempotenceKeyColumn {opts.key_column!r} is null")
            properties[prop_name] = str(own_keys[i])
        else:
            properties[prop_name] = f"{prefix}:{first_row + i}"
        msg = Message(topic, body, tags=tags[i] if tags is not None else None,
                      keys=keys[i] if keys is not None else None, properties=properties)
        if levels is not None and levels[i]:
            msg.delay_level = int(levels[i])
        elif delays is not None and delays[i] is not None:
            msg.delay_ms = int(delays[i])
        elif dues is not None and dues[i] is not None:
            msg.deliver_at = _epoch_ms(dues[i])
        yield msg


@dataclass
class Written:
    """What one partition sent: how many, and how many were stored with a status other than
    SEND_OK (stored, but the sync flush or the slave did not confirm in time)."""
    rows: int = 0
    not_ok: int = 0


def send_all(send_async: Callable[[Message], Future[SendResult]], msgs: Iterable[Message], max_in_flight: int,
             timeout_s: float) -> Written:
    """Send every message with at most `max_in_flight` unanswered; return once all are acked.
    The first failed send (or a message the producer refuses) raises: the task fails."""
    out = Written()
    pending: deque[Future[SendResult]] = deque()

    def settle() -> None:
        if pending.popleft().result(timeout_s).status is not SendStatus.SEND_OK:
            out.not_ok += 1

    for msg in msgs:
        try:
            pending.append(send_async(msg))
        except QuiverError as exc:   # refused before sending: say which row
            raise type(exc)(f"row {out.rows} (topic {msg.topic!r}): {exc.remark}", exc.code) from exc
        out.rows += 1
        if len(pending) >= max_in_flight:
            settle()
    while pending:
        settle()
    return out
