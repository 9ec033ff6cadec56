"""How a service's log lines look: `--log-format text` (human) or `json` (one object a line).

A JSON line has `time` (ISO 8601 UTC, milliseconds), `level`, `logger`, `message`
(the formatted message) and, when a traceback was logged, `exc`. Every value is
a string, so a message carrying a peer's bytes cannot break the line: orjson
escapes control characters and a newline stays inside the string.
"""

import datetime
import logging

import orjson

FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        try:
            message = record.getMessage()
        except Exception as exc:  # bad %-args: the line still says what was logged
            message = f"{record.msg!r} (unformattable: {type(exc).__name__})"
        when = datetime.datetime.fromtimestamp(record.created, datetime.timezone.utc)
        line = {"time": when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                "level": record.levelname, "logger": record.name, "message": str(message)}
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exc"] = str(record.exc_text)
        try:
            return orjson.dumps(line).decode()
        except orjson.JSONEncodeError:  # a lone surrogate (bytes decoded with surrogateescape)
            return orjson.dumps({k: v.encode("utf-8", "backslashreplace").decode() for k, v in line.items()}).decode()


def formatter(kind: str) -> logging.Formatter:
    if kind not in FORMATS:
        raise ValueError(f"log format {kind!r} is not one of {', '.join(FORMATS)}")
    return JsonFormatter() if kind == "json" else logging.Formatter(TEXT_FORMAT)
