"""Name and size rules shared by the SDK (early errors) and the broker (the authority)."""

import re

from .errors import MessageIllegalError, NoPermissionError, PropertiesSizeExceededError

TOPIC_RE = re.compile(r"^[%|a-zA-Z0-9_-]+$")
TOPIC_MAX_CHARS = 127
SYSTEM_TOPIC_MAX_CHARS = 255
GROUP_MAX_CHARS = 120
DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024 * 1024
MAX_PROPERTIES_BYTES = 32767

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
TIMER_TOPIC = "rmq_sys_wheel_timer"
HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
CHECK_MAX_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"

SYSTEM_TOPICS = frozenset({
    "TBW102", SCHEDULE_TOPIC, "BenchmarkTest", HALF_TOPIC, "RMQ_SYS_TRACE_TOPIC", OP_HALF_TOPIC,
    CHECK_MAX_TOPIC, "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT", "CHECKPOINT_TOPIC", TIMER_TOPIC,
})
# Apps may not send to these (RocketMQ's list plus the timer topic).
NOT_ALLOWED_SEND = frozenset({SCHEDULE_TOPIC, HALF_TOPIC, OP_HALF_TOPIC, CHECK_MAX_TOPIC,
                              "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT", TIMER_TOPIC})


def is_system_topic(topic: str) -> bool:
    return topic in SYSTEM_TOPICS or topic.startswith("rmq_sys_")


def check_topic(topic, for_send: bool = False, for_create: bool = False) -> None:
    """Raise MessageIllegalError / NoPermissionError saying what to fix."""
    if not isinstance(topic, str) or not topic.strip():
        raise MessageIllegalError("topic is blank: give a topic name")
    if not TOPIC_RE.match(topic):
        raise MessageIllegalError(
            f"topic {topic[:64]!r} has illegal characters: only letters, digits, '%', '|', '_' and '-' are allowed")
    limit = SYSTEM_TOPIC_MAX_CHARS if topic.startswith((RETRY_PREFIX, DLQ_PREFIX)) else TOPIC_MAX_CHARS
    if len(topic) > limit:
        raise MessageIllegalError(f"topic is {len(topic)} characters long; the limit is {limit}")
    if for_send and topic in NOT_ALLOWED_SEND:
        raise NoPermissionError(f"topic {topic!r} is a system topic: apps cannot send to it")
    if for_create and is_system_topic(topic):
        raise NoPermissionError(f"topic {topic!r} is reserved for the system: pick another name")


def check_group(group) -> None:
    if not isinstance(group, str) or not group.strip():
        raise MessageIllegalError("group is blank: give a group name")
    if not TOPIC_RE.match(group):
        raise MessageIllegalError(f"group {group[:64]!r} has illegal characters")
    if len(group) > GROUP_MAX_CHARS:
        raise MessageIllegalError(f"group is {len(group)} characters long; the limit is {GROUP_MAX_CHARS}")


def check_body(body, max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> None:
    if not isinstance(body, (bytes, bytearray, memoryview)):
        raise MessageIllegalError(f"body must be bytes, got {type(body).__name__}")
    n = len(body)
    if n == 0:
        raise MessageIllegalError("body is empty: a message needs at least one byte")
    if n > max_bytes:
        raise MessageIllegalError(f"body is {n} bytes; the limit is {max_bytes} (max_message_bytes)")


def check_properties_size(props_bytes: int) -> None:
    if props_bytes > MAX_PROPERTIES_BYTES:
        raise PropertiesSizeExceededError(
            f"properties take {props_bytes} bytes; the limit is {MAX_PROPERTIES_BYTES}: move data into the body")
