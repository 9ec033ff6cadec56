"""Message trace records: the one encoder and decoder of what RMQ_SYS_TRACE_TOPIC holds.

A trace message (one CommitLog record of the trace topic) carries a batch of
events; its KEYS are the msg ids it mentions, so the IndexFile finds every
trace message of a msg id (`Admin.trace`). The body is JSON (orjson):

    body   = {"v": 1, "ev": [EVENT, ...]}
    EVENT  = [type, time_ms, cost_ms, status, topic, broker, group, client, extra, MSGS]
              str   int      num|null str    str    str|null str|null str|null {}|null
    MSGS   = {"id": [msg_id, ...],                        n >= 1 strings
              "k":  [keys|null, ...] | null,              per message, or null: none had keys
              "tg": [tags|null, ...] | null,
              "q":  int | [int|null, ...] | null,         one queue id for all, or per message
              "o":  int | [int|null, ...] | null,         int: the first's queue offset, the rest
                                                          follow it (a batch); or per message
              "x":  [{}|null, ...] | null}                per-message extras

    type     Pub | SubBefore | SubAfter | EndTransaction | Delayed | Retry | DLQ
    time_ms  epoch ms: Pub, SubBefore, EndTransaction when they started; SubAfter
             when the listener returned; Delayed, Retry, DLQ when the broker stored the copy
    status   Pub: the SendStatus (SEND_OK ...); SubBefore: CONSUMING; SubAfter: SUCCESS |
             FAILED; EndTransaction: COMMIT | ROLLBACK | UNKNOWN; Delayed: DELIVERED;
             Retry: RETRY; DLQ: DLQ
    extra    event-wide extras (Pub: {"transaction": "half"}; EndTransaction:
             {"from_check": bool}; Retry: {"retry_topic", "delay_level" | "delay_ms"};
             DLQ: {"dlq_topic"}), merged into each row
    "x"      per message (Sub*: {"reconsume_times"}; Delayed: {"due_ms", "late_ms"};
             Retry, DLQ: {"reconsume_times"})

MSGS is by column so that a Pub of a 512-message batch costs the client one
list of ids (orjson writes it in C), not a Python object per message.
One event names every message a send, a listener call or a re-put covered:
the client builds one event per request, not per message. `decode` flattens
a body into rows, one per (event, message), the dicts `Admin.trace` returns.
A body from the topic is untrusted (any authenticated user may write it):
`decode` raises TraceFormatError for anything not shaped as above.
Does not own sending (quiver.client.trace_dispatcher) nor display (quiver.tools.trace_view).
"""

import orjson

from quiver.wire.names import TRACE_TOPIC
from quiver.wire.properties import TRACE_ON

__all__ = ["TRACE_TOPIC", "TRACE_ON", "TYPES", "TraceFormatError", "encode", "decode", "timeline", "msg_entry",
           "columns", "event", "pack"]

VERSION = 1
PUB, SUB_BEFORE, SUB_AFTER, END_TRANSACTION = "Pub", "SubBefore", "SubAfter", "EndTransaction"
DELAYED, RETRY, DLQ = "Delayed", "Retry", "DLQ"
TYPES = (PUB, END_TRANSACTION, DELAYED, SUB_BEFORE, SUB_AFTER, RETRY, DLQ)
_RANK = {t: i for i, t in enumerate(TYPES)}   # order of events stamped in the same millisecond

_EVENT_FIELDS = ("type", "time_ms", "cost_ms", "status", "topic", "broker", "group", "client")


class TraceFormatError(ValueError):
    """A trace body that is not a version-1 batch of events."""


def msg_entry(msg_id: str, keys: str | None = None, tags: str | None = None, queue_id: int | None = None,
              queue_offset: int | None = None, extra: dict | None = None) -> list:
    """One message as a row [id, keys, tags, queue id, offset, extra], for `columns`."""
    return [msg_id, keys, tags, queue_id, queue_offset, extra]


def columns(entries: list[list]) -> dict:
    """MSGS of `msg_entry` rows (events of a few messages: services, consumers)."""
    out = {"id": [e[0] for e in entries]}
    for key, i in (("k", 1), ("tg", 2), ("q", 3), ("o", 4), ("x", 5)):
        col = [e[i] for e in entries]
        out[key] = col if any(v is not None for v in col) else None
    return out


def event(type_: str, time_ms: int, cost_ms, status: str, topic: str, broker, group, client, extra,
          msgs: dict) -> list:
    """One EVENT (see the module docstring); `msgs` is MSGS."""
    return [type_, int(time_ms), cost_ms, status, topic, broker, group, client, extra, msgs]


def encode(events: list[list]) -> bytes:
    """The body of one trace message carrying `events`."""
    return orjson.dumps({"v": VERSION, "ev": events})


def _part(msgs: dict, lo: int, hi: int) -> dict:
    out = {}
    for key, col in msgs.items():
        if isinstance(col, list):
            col = col[lo:hi]
        elif key == "o" and type(col) is int:
            col += lo   # consecutive offsets: the part starts further on
        out[key] = col
    return out


def pack(events: list[list], max_ids: int) -> list[tuple[bytes, list[str]]]:
    """(body, KEYS) of each trace message carrying `events`, each naming at most `max_ids`
    msg ids (its KEYS must fit the properties limit); an event over the limit is split.
    Ids are counted as they come (a SubBefore and a SubAfter of one message count twice) and
    made unique once per trace message: one dict per trace message, not one per event."""
    out, cur, ids = [], [], []
    for ev in events:
        msgs = ev[9]
        every = msgs["id"]
        n, lo = len(every), 0
        while lo < n:
            room = max_ids - len(ids)
            if room <= 0:
                out.append((encode(cur), list(dict.fromkeys(ids))))
                cur, ids = [], []
                room = max_ids
            hi = min(n, lo + room)
            if lo == 0 and hi == n:
                cur.append(ev)
                ids += every
            else:
                cur.append(ev[:9] + [_part(msgs, lo, hi)])
                ids += every[lo:hi]
            lo = hi
    if cur:
        out.append((encode(cur), list(dict.fromkeys(ids))))
    return out


def decode(body: bytes) -> list[dict]:
    """One row per (event, message) of a trace body; TraceFormatError if it is not one."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise TraceFormatError(f"trace body is not JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("v") != VERSION or not isinstance(doc.get("ev"), list):
        raise TraceFormatError("trace body is not {\"v\": 1, \"ev\": [...]}")
    rows = []
    for ev in doc["ev"]:
        base = _event_row(ev)
        rows.extend(_msg_rows(base, ev[9]))
    return rows


def _event_row(ev) -> dict:
    if not isinstance(ev, list) or len(ev) != 10 or ev[0] not in _RANK:
        raise TraceFormatError(f"not a trace event: {str(ev)[:80]}")
    t, cost = ev[1], ev[2]
    if type(t) is not int or not (cost is None or (isinstance(cost, (int, float)) and type(cost) is not bool)):
        raise TraceFormatError("trace event time_ms must be an integer and cost_ms a number or null")
    if not all(v is None or isinstance(v, str) for v in ev[3:8]) or not isinstance(ev[4], str):
        raise TraceFormatError("trace event status, topic, broker, group and client must be strings")
    row = dict(zip(_EVENT_FIELDS, ev[:8]))
    _merge(row, ev[8])
    return row


def _column(msgs: dict, key: str, n: int, kind) -> list:
    col = msgs.get(key)
    if col is None:
        return [None] * n
    if kind is int and type(col) is int:
        return [col + i for i in range(n)] if key == "o" else [col] * n
    if not isinstance(col, list) or len(col) != n or not all(v is None or _is(v, kind) for v in col):
        raise TraceFormatError(f"trace messages column {key!r} must be {n} {kind.__name__} or null values")
    return col


def _is(v, kind) -> bool:
    return type(v) is int if kind is int else isinstance(v, kind)


def _msg_rows(base: dict, msgs) -> list[dict]:
    if not isinstance(msgs, dict) or not isinstance(msgs.get("id"), list) or \
            not all(isinstance(i, str) for i in msgs["id"]):
        raise TraceFormatError("trace messages must be {\"id\": [msg ids], ...}")
    n = len(msgs["id"])
    cols = [msgs["id"], _column(msgs, "k", n, str), _column(msgs, "tg", n, str), _column(msgs, "q", n, int),
            _column(msgs, "o", n, int), _column(msgs, "x", n, dict)]
    rows = []
    for mid, keys, tags, qid, off, extra in zip(*cols):
        row = dict(base)
        row.update(msg_id=mid, keys=keys, tags=tags, queue_id=qid, queue_offset=off)
        _merge(row, extra)
        rows.append(row)
    return rows


def _merge(row: dict, extra) -> None:
    if extra is None:
        return
    if not isinstance(extra, dict):
        raise TraceFormatError("trace extras must be an object")
    for k, v in extra.items():
        if k not in row:  # an extra never overrides a named field
            row[k] = v


def sort_key(row: dict) -> tuple:
    return row["time_ms"], _RANK.get(row["type"], len(_RANK))


def timeline(rows: list[dict], msg_id: str) -> list[dict]:
    """The rows of `msg_id`, duplicates dropped (a retried trace send stores twice), in time
    order; events of the same millisecond in the order a message lives them (Pub first)."""
    seen, out = set(), []
    for r in rows:
        if r.get("msg_id") != msg_id:
            continue
        key = orjson.dumps(r, option=orjson.OPT_SORT_KEYS)
        if key not in seen:
            seen.add(key)
            out.append(r)
    out.sort(key=sort_key)
    return out
