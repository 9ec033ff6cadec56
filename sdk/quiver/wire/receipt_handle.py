"""The receipt handle of a popped message: what the broker needs to ack it or change its invisible time.

Clients treat it as an opaque string (RocketMQ's "extra info" plays the same part).
Its text, printable ASCII fields separated by single spaces:

    "1 <broker name> <topic> <queue id> <queue offset> <pop time ms> <invisible ms> <reconsume>"

The version comes first so a later layout can be told apart. Broker name and topic
let a client (or a proxy) route the ack to the broker and topic that popped it; queue
and offset name the message; the pop time names the delivery: a handle whose pop time
is not the one in flight (acked already, redelivered to someone else after expiry,
or replaced by a change of invisible time) is stale, and the broker says so
(RECEIPT_HANDLE_EXPIRED) instead of acking a later delivery. Every field is checked
on parse (names by `quiver.wire.names`, integers digits only and ranged), so a
forged or truncated handle is INVALID_PARAMETER naming the field, never a crash.
Owns the text layout only; what is in flight is the broker's (pop_state.py).
"""

import re
from dataclasses import dataclass

from quiver.wire import names
from quiver.wire.schema import Check, Invalid

VERSION = "1"
MAX_HANDLE_CHARS = 600
_MAX_INT = 2 ** 63 - 1
MAX_INVISIBLE_MS = 12 * 3600 * 1000   # RocketMQ 5's longest invisible duration
MIN_INVISIBLE_MS = 100
# A handle whose names are plain (quiver.wire.names' characters and lengths) and whose numbers
# have few enough digits; parse still ranges them, and anything else takes the field checks.
_BROKER, _TOPIC = (p.pattern.removeprefix("^").removesuffix("+\\Z") for p in (names.BROKER_NAME_RE, names.TOPIC_RE))
_PLAIN = re.compile(f"{VERSION} ({_BROKER}{{1,{names.BROKER_NAME_MAX_CHARS}}}) ({_TOPIC}{{1,{names.TOPIC_MAX_CHARS}}}) "
                    r"(\d{1,4}) (\d{1,19}) (\d{1,19}) (\d{1,9}) (\d{1,10})", re.ASCII)


@dataclass(frozen=True, slots=True)
class ReceiptHandle:
    broker: str
    topic: str
    queue_id: int
    offset: int
    pop_ts: int
    invisible_ms: int
    reconsume: int

    @property
    def deadline_ms(self) -> int:
        """Epoch ms at which the message is visible again unless acked."""
        return self.pop_ts + self.invisible_ms

    def encode(self) -> str:
        return " ".join((VERSION, self.broker, self.topic, str(self.queue_id), str(self.offset), str(self.pop_ts),
                         str(self.invisible_ms), str(self.reconsume)))

    __str__ = encode

    @classmethod
    def parse(cls, text) -> "ReceiptHandle":
        """The handle of `text`, or ValueError saying which part is wrong."""
        m = _PLAIN.fullmatch(text) if type(text) is str else None
        if m is not None:   # every ack parses one: a handle the checks below would pass, in one match
            broker, topic, q, off, pt, inv, rc = m.groups()
            q, off, pt, inv, rc = int(q), int(off), int(pt), int(inv), int(rc)
            if (q <= 1023 and off <= _MAX_INT and pt <= _MAX_INT and inv <= MAX_INVISIBLE_MS and rc <= 2 ** 31 - 1
                    and broker != "." and broker != ".."):
                return cls(broker, topic, q, off, pt, inv, rc)
        return cls._parse_checked(text)

    @classmethod
    def _parse_checked(cls, text) -> "ReceiptHandle":
        if type(text) is not str or not 0 < len(text) <= MAX_HANDLE_CHARS or not text.isascii():
            raise ValueError(f"a receipt handle is an ASCII string of 1..{MAX_HANDLE_CHARS} characters")
        parts = text.split(" ")
        if len(parts) != 8 or parts[0] != VERSION:
            raise ValueError(f"not a version {VERSION} receipt handle (8 space-separated fields)")
        broker, topic = parts[1], parts[2]
        problem = names.broker_name_problem(broker) or names.topic_problem(topic)
        if problem:
            raise ValueError(f"receipt handle: {problem}")
        nums = []
        for label, raw, hi in zip(("queue id", "offset", "pop time", "invisible time", "reconsume count"),
                                  parts[3:], (1023, _MAX_INT, _MAX_INT, MAX_INVISIBLE_MS, 2 ** 31 - 1)):
            if not raw.isdigit() or len(raw) > 19 or int(raw) > hi:
                raise ValueError(f"receipt handle: {label} {raw[:24]!r} is not an integer 0..{hi}")
            nums.append(int(raw))
        return cls(broker, topic, *nums)


class HandleCheck(Check):
    """A schema field holding a receipt handle: decodes to ReceiptHandle, encodes to its text."""
    expected = "a receipt handle (from a popped message)"

    def __call__(self, value):
        if isinstance(value, ReceiptHandle):
            return value
        try:
            return ReceiptHandle.parse(value)
        except ValueError as exc:
            raise Invalid(f"{self.expected}: {exc}", value) from None

    def encode(self, value):
        return value.encode() if isinstance(value, ReceiptHandle) else value


HANDLE = HandleCheck()
