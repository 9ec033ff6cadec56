"""What Admin's inspection calls return, typed: TypedDicts, so the rows stay the plain dicts
`-o json` prints and older code indexes, while a type checker knows each key and its type."""

from typing import Any, NotRequired, TypedDict


class ProgressRow(TypedDict):
    """One queue of a consumer group (`consumer_progress`, `consumer_stats()["rows"]`)."""
    broker: str
    topic: str
    queue_id: int
    broker_offset: int               # the queue's max offset
    consumer_offset: int | None      # the group's committed offset; None: none yet
    lag: int
    last_consume_time: int | None    # store time (epoch ms) of the last consumed message
    client_id: str | None            # the member that owns the queue now


class ConsumerStats(TypedDict):
    """Every broker's view of a group (`consumer_stats`)."""
    rows: list[ProgressRow]
    clients: list[str]
    conflicts: dict[str, dict[str, list[str]]]   # topic -> {"TAG:expr": [client ids]}


class QueueStatus(TypedDict):
    """One queue of a topic (`topic_status`), RocketMQ's topicStatus."""
    broker: str
    queue_id: int
    min_offset: int
    max_offset: int
    local_min_offset: int            # below it, served from the broker's tiered store
    compacted_to: int                # below it, a compacted queue keeps each key's latest
    last_store_time: int | None      # epoch ms; None: empty queue


class HaRow(TypedDict):
    """One broker address of a group (`ha_status`): master id 0, slaves >= 1."""
    broker: str
    id: int
    addr: str
    role: NotRequired[str]
    max_offset: NotRequired[int]
    lag_bytes: NotRequired[int | None]
    lag_ms: NotRequired[int | None]
    ack_latency: NotRequired[Any]
    ha: NotRequired[dict[str, Any]]
    error: NotRequired[str]          # the address did not answer STATUS


class TraceEvent(TypedDict):
    """One event of a message's trace timeline (`trace`), oldest first."""
    type: str                        # Pub, SubBefore, SubAfter, EndTransaction, ...
    time_ms: int
    cost_ms: int | None
    status: str | None
    topic: str | None
    broker: str | None
    group: str | None
    client: str | None
    msg_id: str
    keys: str | None
    tags: str | None
    queue_id: int | None
    queue_offset: int | None
