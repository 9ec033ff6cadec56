"""A Kafka record as a Quiver message and back, exactly.

    Kafka            Quiver
    value            body (a null or empty value: body b"\\0" and property kafka.value = null|empty)
    key              keys [key] when it is UTF-8 without spaces (searchable with `quiver msg query`);
                     any other key: property kafka.key = base64 of the bytes
    headers          properties (name -> UTF-8 value), in order; when a header cannot be a plain
                     property (binary or null value, a repeated or reserved name, a kafka.* name)
                     every header is also kept as property kafka.headers (JSON, base64 values), the
                     one read back
    timestamp        the message's born time; a record of a batch whose timestamp differs from
                     the batch's first also carries property kafka.ts (the Quiver send takes one
                     born time per batch)

A message sent by Quiver's SDK reads as: key = its keys joined by spaces, headers = its user
properties, timestamp = its born time.
"""

import base64
import json

from quiver.client.message import Message
from quiver.wire import record
from quiver.wire.properties import KEYS, RESERVED_PROPERTIES
from quiver.wire.record import client_properties
from quiver.wire.property_string import NAME_SEP, PROP_SEP
from quiver.wire.speedups import fast

from . import records
from .records import Record

KEY, VALUE, HEADERS, TS = "kafka.key", "kafka.value", "kafka.headers", "kafka.ts"
EMPTY_BODY = b"\0"
_OURS = "kafka."


def _plain(text: str) -> bool:
    return NAME_SEP not in text and PROP_SEP not in text


def to_message(topic: str, rec: Record, born_ts: int) -> Message:
    props: dict[str, str] = {}
    keys = None
    if rec.key is not None:
        try:
            k = rec.key.decode()
        except UnicodeDecodeError:
            k = ""
        if k and " " not in k and _plain(k) and k.isprintable():
            keys = [k]
        else:
            props[KEY] = base64.b64encode(rec.key).decode()
    body = rec.value
    if not body:
        props[VALUE] = "null" if body is None else "empty"
        body = EMPTY_BODY
    exact = True
    for name, value in rec.headers:
        text = None
        if value is not None:
            try:
                text = value.decode()
            except UnicodeDecodeError:
                pass
        if (text is None or not name or name in props or name in RESERVED_PROPERTIES or name.startswith(_OURS)
                or not _plain(name) or not _plain(text)):
            exact = False
            continue
        props[name] = text
    if not exact:
        props[HEADERS] = json.dumps([[n, None if v is None else base64.b64encode(v).decode()]
                                     for n, v in rec.headers])
    if rec.timestamp != born_ts:
        props[TS] = str(rec.timestamp)
    return Message(topic, body, keys=keys, properties=props)


def to_record(m) -> Record:
    """A pulled MessageExt as a Kafka record at its queue offset."""
    return Record(m.queue_offset, *record_fields(m.properties, m.body, m.born_timestamp, " ".join(m.keys)))


def record_fields(p: dict, body: bytes, born_ts: int, keys: str | None) -> tuple:
    """(timestamp, key, value, headers) of a stored message's properties, body, born time and
    keys (joined by spaces)."""
    if KEY in p:
        key = base64.b64decode(p[KEY])
    else:
        key = keys.encode() if keys else None
    marker = p.get(VALUE)
    value = None if marker == "null" else b"" if marker == "empty" else body
    if HEADERS in p:
        headers = [(n, None if v is None else base64.b64decode(v)) for n, v in json.loads(p[HEADERS])]
    else:
        headers = [(n, v.encode()) for n, v in p.items() if n not in NOT_HEADERS and not n.startswith(_OURS)]
    ts = int(p[TS]) if TS in p and p[TS].isdigit() else born_ts
    return ts, key, value, headers


def pulled_rows(fields, offset: int, skip: frozenset | None = None, keys_name: str = KEYS) -> list[tuple]:
    """The records of a pull answer (record.decode_fields) from queue offset `offset` as
    (offset, timestamp, key, value, headers) rows for records.encode_rows: no MessageExt.
    `skip`: the properties that are not headers (default NOT_HEADERS); `keys_name` the key's."""
    skip = NOT_HEADERS if skip is None else skip
    plain_only = _PLAIN_ONLY if skip is NOT_HEADERS else skip - {keys_name}
    rows, parse, fields_of = [], client_properties, record_fields
    for f in fields:
        qoff = f[5]
        if qoff < offset:
            continue
        text = f[2]
        if text.find(PROP_SEP) == len(text) - 1 and text[:text.find(NAME_SEP)] in plain_only:
            rows.append((qoff, f[8], None, f[1], []))   # one property (UNIQ_KEY ...): no key, no headers
            continue
        p = parse(text)
        if _OURS in text:   # a property of the gateway's own: the whole mapping
            rows.append((qoff, *fields_of(p, f[1], f[8], p.get(KEYS))))
            continue
        keys = p.get(keys_name)
        rows.append((qoff, f[8], keys.encode() if keys else None, f[1],
                     [(n, v.encode()) for n, v in p.items() if n not in skip]))
    return rows


@fast
def kafka_pulled(body, offset: int, room: int, prefix: int, skip: frozenset, keys_name: str) -> tuple:
    """The records of a pull answer's `body` from queue offset `offset` laid out as
    records.kafka_records lays out their pulled_rows (compiled: straight from the bytes, no
    object per record); (`prefix` zero bytes, 0, -1, -1, -1, -1) when there are none."""
    rows = pulled_rows(record.decode_fields(body), offset, skip, keys_name)
    if not rows:
        return bytearray(prefix), 0, -1, -1, -1, -1
    return records.kafka_records(rows, room, prefix)


def pulled_batch(body, offset: int, max_bytes: int) -> tuple:
    """(record batch, records in it, the last one's offset) of a pull answer's `body` from queue
    offset `offset`: those that fit `max_bytes`, the first whatever its size."""
    return records.batch(kafka_pulled(body, offset, max_bytes - records.BATCH_OVERHEAD, records.BATCH_OVERHEAD,
                                      NOT_HEADERS, KEYS))


# properties the broker and services add that are not a producer's own (left out of headers)
_SYSTEM = frozenset({"CLUSTER", "TRAN_BORN_MS", "DLQ_ORIGIN_TOPIC", "DLQ_ORIGIN_MESSAGE_ID", "TRANSACTION_ID",
                     "TRANSACTION_CHECK_TIMES", "SCHEDULE_ORIGIN_ID", "SCHEDULE_DUE_MS", "MSG_REGION",
                     "CHECK_IMMUNITY_TIME_IN_SECONDS"})
NOT_HEADERS = RESERVED_PROPERTIES | _SYSTEM
_PLAIN_ONLY = NOT_HEADERS - {KEYS}   # a message whose only property is one of these reads without a parse
