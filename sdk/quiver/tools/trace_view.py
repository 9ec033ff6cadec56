"""A message's trace timeline as lines for people (`quiver msg trace --id MSGID`).

`format_trace(Admin.trace(msg_id))` gives one line per event: when (UTC, like
every time the CLI and the console show, with milliseconds, and + ms since the first event), what, who (group and
client), where (topic, broker, queue and offset), how long, then the type's
extras. Pure: no I/O, rows in, lines out; owns no format but this display.
"""

import datetime

# extras worth a word on the line, in this order; the rest stay in Admin.trace's rows
_EXTRAS = (("reconsume_times", "reconsume"), ("transaction", "tx"), ("from_check", "from check"),
           ("due_ms", "due"), ("late_ms", "late"), ("retry_topic", "to"), ("delay_level", "level"),
           ("delay_ms", "delay"), ("dlq_topic", "to"))


def _clock(ms) -> str:
    try:
        return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).strftime("%H:%M:%S.%f")[:-3] + "Z"
    except (TypeError, ValueError, OverflowError, OSError):
        return "?"


def _ms(value) -> str:
    if value is None:
        return "-"
    return f"{value:.1f} ms" if isinstance(value, float) and value < 10 else f"{round(value)} ms"


def _extra(row: dict) -> str:
    parts = []
    for key, word in _EXTRAS:
        value = row.get(key)
        if value is None or (key == "reconsume_times" and value == 0) or (key == "from_check" and not value):
            continue
        if key == "due_ms":
            value = _clock(value)
        elif key in ("late_ms", "delay_ms"):
            value = _ms(value)
        elif value is True:
            value = ""
        parts.append(f"{word} {value}".strip())
    return ", ".join(parts)


def format_trace(rows: list[dict]) -> list[str]:
    """Lines for `rows` (Admin.trace's, in its order); one line saying so when there are none."""
    if not rows:
        return ["no trace found (was the producer traced? trace records arrive within a second)"]
    first = rows[0].get("time_ms") or 0
    lines = []
    for r in rows:
        t = r.get("time_ms")
        since = f"+{t - first}" if isinstance(t, int) else "?"
        who = " ".join(x for x in (r.get("group"), f"({r['client']})" if r.get("client") else None) if x) or "-"
        where = r.get("topic") or "-"
        if r.get("broker"):
            where += f"@{r['broker']}"
        if r.get("queue_id") is not None:
            where += f" q{r['queue_id']}"
            if r.get("queue_offset") is not None:
                where += f":{r['queue_offset']}"
        line = (f"{_clock(t)} {since:>8} ms  {r.get('type', '?'):<14} {r.get('status') or '-':<10} "
                f"{who}  {where}  cost {_ms(r.get('cost_ms'))}")
        extra = _extra(r)
        lines.append(f"{line}  [{extra}]" if extra else line)
    return lines
