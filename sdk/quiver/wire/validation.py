"""Name and size rules shared by the SDK (early errors) and the broker (the authority).

The name rules live in names.py (re-exported here); this module owns the body and
properties sizes.
"""

from quiver.errors import MessageIllegalError, PropertiesSizeExceededError
# Topic and group names are owned by names.py; re-exported here, where callers import them.
from quiver.wire.names import (CHECK_MAX_TOPIC, DLQ_PREFIX, GROUP_MAX_CHARS, HALF_TOPIC, NOT_ALLOWED_SEND,  # noqa: F401
                               OP_HALF_TOPIC, RETRY_PREFIX, SCHEDULE_TOPIC, SYSTEM_TOPIC_MAX_CHARS, SYSTEM_TOPICS, TIMER_TOPIC,
                               TOPIC_MAX_CHARS, TOPIC_RE, check_group, check_topic, is_system_topic)

DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024 * 1024
MAX_PROPERTIES_BYTES = 32767


def check_body(body, max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES, tombstone: bool = False) -> None:
    """`tombstone`: the message has keys, so an empty body is allowed (a compacted topic's
    tombstone; the broker refuses it for any other topic)."""
    if not isinstance(body, (bytes, bytearray, memoryview)):
        raise MessageIllegalError(f"body must be bytes, got {type(body).__name__}")
    n = len(body)
    if n == 0 and not tombstone:
        raise MessageIllegalError("body is empty: a message needs at least one byte (an empty body with keys is "
                                  "a tombstone, for a compacted topic)")
    if n > max_bytes:
        raise MessageIllegalError(f"body is {n} bytes; the limit is {max_bytes} (max_message_bytes)")


def check_properties_size(props_bytes: int) -> None:
    if props_bytes > MAX_PROPERTIES_BYTES:
        raise PropertiesSizeExceededError(
            f"properties take {props_bytes} bytes; the limit is {MAX_PROPERTIES_BYTES}: move data into the body")
