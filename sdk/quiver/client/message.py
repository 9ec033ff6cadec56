"""Messages as apps see them.

Owns: Message, MessageExt, SendResult and the small enums of the public API, the
producer's unique id (UNIQ_KEY). Re-exports the property names, the tag hash and the
offset msgId, which are wire facts (quiver.wire.properties, quiver.wire.ids).
Does not own the on-disk record (record.py) nor the wire (protocol.py).

A MessageExt's `properties` never hold the store's record CRC, `__CRC32#`
(--append-prop-crc): like RocketMQ's MessageDecoder, the client drops it
(record.client_properties).
"""

import enum
import itertools
from itertools import repeat
import os
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from quiver.wire import record, speedups
from quiver.wire.speedups import fast

# The property names, the tag hash and the ids are wire facts (quiver.wire.properties, quiver.wire.ids):
# re-exported here, where apps meet them.
from quiver.wire.ids import host_bytes, host_str, offset_msg_id, parse_offset_msg_id
from quiver.wire.properties import (DELAY, KEYS, MAX_OFFSET, MIN_OFFSET, ORIGIN_MESSAGE_ID, PGROUP, REAL_QID,
                                    REAL_TOPIC, RESERVED_PROPERTIES, RETRY_TOPIC, SHARDING_KEY, TAGS,
                                    TIMER_DELIVER_MS, TRAN_MSG, TRANSACTION_ID, UNIQ_KEY, WAIT, java_hash, tag_hash)

__all__ = ["DELAY", "KEYS", "MAX_OFFSET", "MIN_OFFSET", "ORIGIN_MESSAGE_ID", "PGROUP", "REAL_QID", "REAL_TOPIC",
           "RESERVED_PROPERTIES", "RETRY_TOPIC", "SHARDING_KEY", "TAGS", "TIMER_DELIVER_MS", "TRAN_MSG",
           "TRANSACTION_ID", "UNIQ_KEY", "WAIT", "java_hash", "tag_hash", "host_bytes", "host_str", "offset_msg_id",
           "parse_offset_msg_id", "SendStatus", "ConsumeResult", "ReconsumeLater", "RECONSUME_DEFAULT",
           "MAX_RETRY_DELAY_S", "TransactionState", "PullStatus", "MessageSelector", "Message", "MessageExt",
           "decode_messages", "SendResult", "UniqueIdMaker"]


class SendStatus(enum.Enum):
    """How a broker stored a sent message (RocketMQ's SendStatus). SEND_OK: stored (flushed and
    replicated as far as the broker waits for); FLUSH_DISK_TIMEOUT / FLUSH_SLAVE_TIMEOUT: stored,
    but the synchronous flush / the slave did not confirm in time; SLAVE_NOT_AVAILABLE: stored,
    with no slave to replicate to."""
    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


class ConsumeResult(enum.Enum):
    """What a listener returns: SUCCESS, RECONSUME_LATER (the broker's next delay level), or
    `ConsumeResult.later(delay_level=N)` / `later(seconds=S)` to choose this failure's retry
    delay (RocketMQ's delayLevelWhenNextConsume)."""
    SUCCESS = "SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"

    @staticmethod
    def later(delay_level: int | None = None, seconds: float | None = None) -> "ReconsumeLater":
        """Retry this batch after delay level `delay_level` (1-based, the broker's table) or after
        `seconds` (a timer; orderly consumers retry in place after that long). ValueError unless
        exactly one is given and positive."""
        if (delay_level is None) == (seconds is None):
            raise ValueError("ConsumeResult.later needs delay_level or seconds, exactly one of them")
        if delay_level is not None:
            if isinstance(delay_level, bool) or not isinstance(delay_level, int) or delay_level < 1:
                raise ValueError(f"delay_level is a level number >= 1, not {delay_level!r}")
            return ReconsumeLater(delay_level=delay_level)
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds <= MAX_RETRY_DELAY_S:
            raise ValueError(f"seconds is a number in (0, {MAX_RETRY_DELAY_S}], not {seconds!r}")
        return ReconsumeLater(delay_ms=max(1, round(seconds * 1000)))


MAX_RETRY_DELAY_S = 7 * 86_400   # a per-failure retry delay; the scheduler's timer horizon is longer


@dataclass(frozen=True, slots=True)
class ReconsumeLater:
    """A failed consume with its retry delay (from `ConsumeResult.later`); 0 / None: the broker's default."""
    delay_level: int = 0
    delay_ms: int | None = None


RECONSUME_DEFAULT = ReconsumeLater()


class TransactionState(enum.Enum):
    """What a transaction's local step (`execute`) or check-back (`checker`) answers: COMMIT
    delivers the half message, ROLLBACK drops it, UNKNOWN leaves it for a later check."""
    COMMIT = "COMMIT"
    ROLLBACK = "ROLLBACK"
    UNKNOWN = "UNKNOWN"


class PullStatus(enum.Enum):
    """The outcome of one pull from a queue: FOUND messages, NO_NEW_MSG at the end of the queue,
    NO_MATCHED_MSG (records there, none matching the subscription), OFFSET_ILLEGAL (the offset
    was outside the queue: the consumer moves to the offset the broker gives)."""
    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


@dataclass(frozen=True, slots=True)
class MessageSelector:
    """A subscription expression: tags ("TagA || TagB", "*") or SQL92."""
    type: str
    expression: str

    @classmethod
    def tags(cls, expression: str = "*") -> "MessageSelector":
        """A tag selector: "TagA || TagB", or "*" (also for an empty expression) for every tag."""
        return cls("TAG", expression or "*")

    @classmethod
    def sql(cls, expression: str) -> "MessageSelector":
        """An SQL92 selector over the message's properties, filtered by a filter server:

            consumer.subscribe("Orders", MessageSelector.sql("region = 'eu' AND qty > 10"))

        A consumer checks the expression when it subscribes or starts (SubscriptionParseError)."""
        return cls("SQL92", expression)


class _Json:
    """`Message.json(topic, obj, **fields)`: a Message whose body is `obj` as JSON (orjson: dicts,
    lists, dataclasses, datetimes ...); `msg.json()`: the body of a Message or MessageExt decoded
    (orjson.JSONDecodeError, a ValueError, if it is not JSON).

        p.send(Message.json("Orders", {"id": "o-1", "qty": 2}, keys=["o-1"]))
        order = msg.json()
    """

    def __get__(self, obj: Any, cls: type) -> Any:
        if obj is None:
            def build(topic: str, value: Any, **fields: Any) -> Any:
                return cls(topic, orjson.dumps(value), **fields)
            build.__doc__ = _Json.__doc__
            return build
        return lambda: orjson.loads(obj.body)


@dataclass(slots=True)
class Message:
    """A message to send: `topic`, `body` (1 byte or more), optional `tags` (one tag, what
    consumers filter on), `keys` (a list, or one space-separated string: what `Admin.query_by_key`
    finds), user `properties`, and at most one delay: `delay_level` (1-based, the broker's delay
    table), `deliver_at` (epoch ms) or `delay_ms` (from now). A producer checks it when sending
    (MessageIllegalError: empty body, bad topic, a reserved property name).

        Message("Orders", b"o-1", tags="created", keys=["o-1"], properties={"region": "eu"})
        Message("Reminders", b"r-1", delay_ms=30_000)
    """
    topic: str
    body: bytes
    tags: str | None = None
    keys: list[str] | str | None = None
    properties: dict[str, str] = field(default_factory=dict)
    delay_level: int = 0
    deliver_at: int | None = None
    delay_ms: int | None = None
    flag: int = 0

    json = _Json()

    def key_list(self) -> list[str]:
        """The keys as a list (a string is split on spaces; empty names are dropped)."""
        if not self.keys:
            return []
        if isinstance(self.keys, str):
            return [k for k in self.keys.split(" ") if k]
        return list(self.keys)


@dataclass(slots=True)
class MessageExt:
    """A message as consumers and lookups get it: the Message fields plus where and when it was
    stored (`msg_id` (the producer's unique id), `broker`, `queue_id`, `queue_offset`,
    `commit_log_offset`, `born_timestamp` / `store_timestamp` in epoch ms), how often it was
    delivered again (`reconsume_times`) and, from a SimpleConsumer, its `receipt_handle`.

        for msg in consumer.poll():
            print(msg.msg_id, msg.queue_offset, msg.body, msg.properties.get("region"))
    """
    topic: str
    body: bytes
    tags: str | None
    keys: list[str]
    properties: dict[str, str]
    msg_id: str
    _offset_id: str | None     # broker address + CommitLog offset; computed on first access
    broker: str
    queue_id: int
    queue_offset: int
    reconsume_times: int
    born_timestamp: int
    store_timestamp: int
    commit_log_offset: int
    flag: int = 0
    sys_flag: int = 0
    body_crc: int = 0
    store_host: bytes = b""
    receipt_handle: str | None = None   # POP only (SimpleConsumer): what ack and change_invisible_duration take

    json = _Json()

    @property
    def offset_msg_id(self) -> str:
        """Broker store address + CommitLog offset as 32 hex characters (what `Admin.view_message`
        reads directly)."""
        if not self._offset_id:
            self._offset_id = offset_msg_id(self.store_host, self.commit_log_offset)
        return self._offset_id

    @classmethod
    def from_record(cls, rec: record.Record, broker: str) -> "MessageExt":
        """The message of one stored record (quiver.wire.record), read from broker `broker`."""
        props = record.client_properties(rec.props)
        keys = props.get(KEYS)
        return cls(rec.topic, rec.body, props.get(TAGS), keys.split(" ") if keys else [], props,
                   props.get(UNIQ_KEY) or offset_msg_id(rec.store_host, rec.phys_offset), None, broker,
                   rec.queue_id, rec.queue_offset, rec.reconsume, rec.born_ts, rec.store_ts, rec.phys_offset,
                   rec.flag, rec.sys_flag, rec.body_crc, rec.store_host)


speedups.layout("message_ext", (), type=MessageExt)   # its slots, for the compiled decode_messages


@fast
def decode_messages(buf: bytes | memoryview, broker: str) -> list[MessageExt]:
    """A pull reply's records as MessageExt, in one pass (the consumers' hot path)."""
    out: list[MessageExt] = []
    parse, append = record.client_properties, out.append
    # unpacked, not read by name: tuple speed (8% of this loop); the names are record.Fields' own
    for (topic, body, props, queue_id, flag, queue_offset, phys_offset, sys_flag, born_ts, store_ts, store_host,
         reconsume, body_crc) in record.decode_fields(buf):
        properties = parse(props)
        keys = properties.get(KEYS)
        append(MessageExt(topic, body, properties.get(TAGS), keys.split(" ") if keys else [], properties,
                          properties.get(UNIQ_KEY) or offset_msg_id(store_host, phys_offset), None, broker, queue_id,
                          queue_offset, reconsume, born_ts, store_ts, phys_offset, flag, sys_flag, body_crc,
                          store_host))
    return out


@dataclass(slots=True)
class SendResult:
    """A broker's answer to a send: `status`, the message's `msg_id`, the `broker`, `queue_id` and
    `queue_offset` it was stored at, its `topic` and `commit_log_offset`; `transaction_id` for a
    transactional send.

        r = producer.send(Message("Orders", b"o-1"))
        assert r.status is SendStatus.SEND_OK
    """
    status: SendStatus
    msg_id: str
    broker: str
    queue_id: int
    queue_offset: int
    topic: str = ""
    store_host: bytes = b""
    commit_log_offset: int = -1
    transaction_id: str | None = None

    @property
    def offset_msg_id(self) -> str:
        """Broker address + CommitLog offset (computed on demand: most callers never ask)."""
        return offset_msg_id(self.store_host, self.commit_log_offset)


@fast
def send_results(status: SendStatus, msg_ids: list[str], broker: str, queue_id: int, first: int, topic: str,
                 store_host: bytes, phys_offsets: list[int]) -> list[SendResult]:
    """A send reply's results: one per message, queue offsets from `first` on (as many as the shorter list)."""
    n = len(msg_ids)   # map() calls the class from C: no comprehension frame per message
    return list(map(SendResult, repeat(status, n), msg_ids, repeat(broker, n), repeat(queue_id, n),
                    range(first, first + n), repeat(topic, n), repeat(store_host, n), phys_offsets))


speedups.layout("send_result", (), type=SendResult)   # its slots, for the compiled send_results


# ---- ids -------------------------------------------------------------------

class UniqueIdMaker:
    """RocketMQ-style UNIQ_KEY: ip 4 + pid 2 + random 4 + ms-since-month 4 + counter 2, hex."""

    def __init__(self) -> None:
        try:
            ip = socket.inet_aton(socket.gethostbyname(socket.gethostname()))
        except OSError:
            ip = b"\x7f\x00\x00\x01"
        self._prefix = (ip + struct.pack(">H", os.getpid() & 0xFFFF) + os.urandom(4)).hex().upper()
        self._counter = itertools.count()
        self._lock = threading.Lock()
        self._month_start = 0
        self._month_end = 0
        self._head = (-1, "")  # (ms, prefix + time hex): formatted once per millisecond

    def _month_base(self, now_ms: int) -> int:
        if not (self._month_start <= now_ms < self._month_end):
            t = time.gmtime(now_ms / 1000)
            start = int(time.mktime((t.tm_year, t.tm_mon, 1, 0, 0, 0, 0, 0, 0)) - time.timezone) * 1000
            ny, nm = (t.tm_year + (t.tm_mon == 12), t.tm_mon % 12 + 1)
            self._month_end = int(time.mktime((ny, nm, 1, 0, 0, 0, 0, 0, 0)) - time.timezone) * 1000
            self._month_start = start
        return self._month_start

    def next(self) -> str:
        now = time.time_ns() // 1_000_000
        ms, head = self._head  # one tuple: threads never see a half-updated pair
        if ms != now:
            head = f"{self._prefix}{(now - self._month_base(now)) & 0xFFFFFFFF:08X}"
            self._head = (now, head)
        return f"{head}{next(self._counter) & 0xFFFF:04X}"  # itertools.count is atomic under the GIL

