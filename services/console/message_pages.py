"""What the message search, trace and DLQ pages show, read through `quiver.Admin` only.

A body is shown as a preview: at most `cap` bytes, as text when it decodes as UTF-8,
else as hex; the template escapes it like every other value. The trace timeline comes
from `Admin.trace(msg_id)` when this SDK has it (rows with type, time_ms, cost_ms, status,
topic, broker, group, client), else the page says tracing is not available. Not owned:
input checks (inputs.py), HTML."""

from dataclasses import dataclass

from quiver.wire.properties import DLQ_ORIGIN_MESSAGE_ID, DLQ_ORIGIN_TOPIC, RETRY_TOPIC

from .cluster_pages import attempt

TRACE_KEYS = ("type", "time_ms", "cost_ms", "status", "topic", "broker", "group", "client")
MAX_TRACED = 10        # messages of one search whose trace is looked up
MAX_PROPERTY_CHARS = 512


@dataclass(frozen=True)
class Preview:
    text: str
    size: int
    truncated: bool
    binary: bool


def preview(body: bytes, cap: int) -> Preview:
    head = bytes(body[:cap])
    try:
        text, binary = head.decode("utf-8"), False
    except UnicodeDecodeError as exc:
        # a cut through a multi-byte character is still text: keep what decodes
        if len(body) > cap and exc.start >= len(head) - 3:
            text, binary = head[:exc.start].decode("utf-8", "replace"), False
        else:
            text, binary = head.hex(" "), True
    if not binary and any(c < " " and c not in "\t\n\r" or c == "\x7f" for c in text):
        text, binary = head.hex(" "), True   # control bytes: not text a person reads
    return Preview(text, len(body), len(body) > cap, binary)


def message_row(m, cap: int) -> dict:
    props = {k: (v if len(v) <= MAX_PROPERTY_CHARS else v[:MAX_PROPERTY_CHARS] + "...")
             for k, v in sorted(m.properties.items())}
    return {"msg_id": m.msg_id, "offset_id": getattr(m, "offset_msg_id", None) or "", "topic": m.topic,
            "broker": m.broker, "queue_id": m.queue_id, "queue_offset": m.queue_offset, "tags": m.tags or "",
            "key_list": " ".join(m.keys or []), "born_ms": m.born_timestamp, "store_ms": m.store_timestamp,
            "reconsume_times": m.reconsume_times, "properties": props, "body": preview(m.body, cap)}


def trace(admin, msg_id: str) -> dict:
    """{"available", "rows", "error"}: the timeline of one message, oldest event first."""
    fn = getattr(admin, "trace", None)
    if fn is None:
        return {"available": False, "rows": [], "error": None}
    rows, error = attempt(fn, msg_id)
    clean = [{k: r.get(k) for k in TRACE_KEYS} for r in (rows or []) if isinstance(r, dict)]
    clean.sort(key=lambda r: r["time_ms"] if isinstance(r["time_ms"], int) else 0)
    return {"available": True, "rows": clean, "error": error}


def search(admin, query: dict, cap: int) -> dict:
    """`query` holds checked input: topic, key, msg_id, begin_ms, end_ms, max (inputs.py)."""
    topic, key, msg_id = query["topic"], query["key"], query["msg_id"]
    begin, end, limit = query["begin_ms"], query["end_ms"], query["max"]
    if msg_id:
        found, error = attempt(admin.view_message, msg_id, topic or None)
        found = [found] if found is not None else []
    elif key:
        found, error = attempt(admin.query_by_key, topic, key, limit, begin or 0, end or 2 ** 62)
    elif begin is not None:
        found, error = attempt(admin.messages_between, topic, begin, end or 2 ** 62, limit)
    else:
        return {"messages": [], "error": None, "searched": False}
    rows = [message_row(m, cap) for m in (found or [])]
    for row in rows[:MAX_TRACED]:
        row["trace"] = trace(admin, row["msg_id"])
    return {"messages": rows, "error": error, "searched": True}


def dlq(admin, group: str, limit: int, cap: int) -> dict:
    found, error = attempt(admin.dlq_messages, group, limit)
    rows = []
    for m in found or []:
        row = message_row(m, cap)
        row["origin_topic"] = m.properties.get(DLQ_ORIGIN_TOPIC) or m.properties.get(RETRY_TOPIC) or ""
        row["origin_id"] = m.properties.get(DLQ_ORIGIN_MESSAGE_ID) or ""
        rows.append(row)
    return {"group": group, "messages": rows, "error": error, "limit": limit}
