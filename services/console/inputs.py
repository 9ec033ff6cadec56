"""What a browser may send: every query parameter and form field is checked here, before
an Admin call sees it. Each parser returns the clean value or raises InputError saying what
to fix; the page shows that message (escaped, like everything it renders).

Owns the shapes of user input (names, keys, ids, times, counts); not the cluster's own
rules, which come from quiver.wire.names."""

import re
from datetime import datetime, timezone

from quiver.wire.names import group_problem, topic_problem

MAX_KEY_CHARS = 128
MAX_BODY_BYTES = 16 * 1024   # a test message typed into a form
MAX_KEYS = 16
_MSG_ID = re.compile(r"[0-9A-Fa-f]{16,64}")
_SAFE_TEXT = re.compile(r"[^\x00-\x1f\x7f]*")
_WHEN_FORMATS = ("%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d")


class InputError(ValueError):
    """User input the console refuses: the message names the field and the rule."""


def text(form, name: str) -> str:
    value = form.get(name, "")
    if not isinstance(value, str) or len(value) > 512:
        raise InputError(f"{name}: at most 512 characters")
    return value.strip()


def topic(form, name: str = "topic", required: bool = True) -> str:
    value = text(form, name)
    if not value and not required:
        return ""
    problem = topic_problem(value) if value else "a topic is required"
    if problem:
        raise InputError(f"{name}: {problem}")
    return value


def group(form, name: str = "group", required: bool = True) -> str:
    value = text(form, name)
    if not value and not required:
        return ""
    problem = group_problem(value) if value else "a consumer group is required"
    if problem:
        raise InputError(f"{name}: {problem}")
    return value


def key(form, name: str = "key") -> str:
    value = text(form, name)
    if len(value) > MAX_KEY_CHARS or not _SAFE_TEXT.fullmatch(value):
        raise InputError(f"{name}: at most {MAX_KEY_CHARS} characters, no control characters")
    return value


def msg_id(form, name: str = "msg_id") -> str:
    value = text(form, name)
    if value and not _MSG_ID.fullmatch(value):
        raise InputError(f"{name}: a message id is 16 to 64 hex digits")
    return value.upper()


def when_ms(form, name: str) -> int | None:
    """A time as epoch milliseconds, or a date/time in UTC (the browser's datetime-local field);
    None when empty."""
    value = text(form, name)
    if not value:
        return None
    if value.isdigit() and len(value) <= 15:
        return int(value)
    for fmt in _WHEN_FORMATS:
        try:
            parsed = datetime.strptime(value, fmt).replace(tzinfo=timezone.utc)
        except ValueError:
            continue
        return int(parsed.timestamp() * 1000)
    raise InputError(f"{name}: use YYYY-MM-DDTHH:MM (UTC) or epoch milliseconds")


def count(form, name: str, low: int, high: int, default: int) -> int:
    value = text(form, name)
    if not value:
        return default
    if not value.isdigit() or not low <= int(value) <= high:
        raise InputError(f"{name}: a whole number from {low} to {high}")
    return int(value)


def body(form, name: str = "body") -> bytes:
    """A message body typed in the form (UTF-8, 1 byte to MAX_BODY_BYTES)."""
    value = form.get(name, "")
    data = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else b""
    if not data or len(data) > MAX_BODY_BYTES:
        raise InputError(f"{name}: 1 to {MAX_BODY_BYTES} bytes of text")
    return data


def keys(form, name: str = "keys") -> list[str]:
    """Space-separated message keys, each a `key`."""
    found = text(form, name).split()
    if len(found) > MAX_KEYS:
        raise InputError(f"{name}: at most {MAX_KEYS} keys, separated by spaces")
    return [key({name: k}, name) for k in found]


def confirmed(form, expected: str, name: str = "confirm") -> None:
    """The confirmation field repeats `expected` (a topic's name before it is deleted)."""
    if text(form, name) != expected:
        raise InputError(f"{name}: type the topic's name, {expected}, to confirm")
