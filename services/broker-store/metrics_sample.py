"""What the broker's gauges need from the store and the group tables, computed on the service
thread by BrokerMetrics.sample_step (metrics.py) and read whole by a scrape.

Owns the walks and the folding of per-queue rows into series; not the family names (metrics.py).

- `queue_rows`: one row per (group, topic, queue) as GET_CONSUME_STATS sees it (consume_stats.py):
  every read queue of every topic a group has an offset for or subscribes to; lag = max offset -
  consumer offset (0 when none), its age the store time of the first unconsumed message (read for
  at most LAG_READS_PER_SAMPLE queues).
- `topic_rows`: (topic, queue, min offset, max offset) of every queue of every topic.
- `fold`: rows summed (or maxed) per (group, topic) or (topic), or kept per queue when
  --metrics-per-queue asks for it; at most MAX_SERIES series either way.
"""

import time

from quiver.runtime.histogram import MAX_SERIES
from quiver.wire import record
from quiver.wire.names import DLQ_PREFIX

from .store import GetStatus

LAG_READS_PER_SAMPLE = 1000
MAX_QUEUE_ROWS = 4 * MAX_SERIES   # queues walked per sample (a walk runs on the service thread)


def groups(metadata, clients) -> dict[str, dict[tuple[str, int], int]]:
    """group -> {(topic, queue id): committed offset}, with every online group (maybe empty)."""
    by_group: dict[str, dict[tuple[str, int], int]] = {}
    for (group, topic, qid), off in list(metadata.offsets.items()):
        by_group.setdefault(group, {})[(topic, qid)] = off
    for group in list(clients.consumers):
        by_group.setdefault(group, {})
    return by_group


def online(by_group: dict, clients) -> list[tuple[str, int]]:
    """(group, consumers online) for every group known here, 0 for one with offsets only."""
    return [(g, len(clients.consumers.get(g, {}))) for g in sorted(by_group)][:MAX_SERIES]


def queue_rows(store, topics, clients, by_group: dict) -> list[tuple]:
    """(group, topic, queue id, consumer offset, lag messages, lag seconds or None) per queue."""
    rows, reads, now_ms = [], LAG_READS_PER_SAMPLE, int(time.time() * 1000)
    for group in sorted(by_group):
        offsets = by_group[group]
        names = {t for t, _ in offsets}
        for info in list(clients.consumers.get(group, {}).values()):
            names.update(info.subscriptions)
        for topic in sorted(names):
            conf = topics.get(topic)
            for qid in range(conf["read"] if conf else 0):
                consumer = offsets.get((topic, qid)) or 0
                lag = max(0, store.max_offset(topic, qid) - consumer)
                age = 0.0 if not lag else None
                if lag and reads > 0:
                    reads -= 1
                    age = _age_s(store, topic, qid, consumer, now_ms)
                rows.append((group, topic, qid, consumer, lag, age))
                if len(rows) >= MAX_QUEUE_ROWS:
                    return rows
    return rows


def topic_rows(store, topics) -> list[tuple]:
    """(topic, queue id, min offset, max offset) of every queue of every topic."""
    rows = []
    for topic, conf in sorted(list(topics.rows.items())):
        for qid in range(max(conf.get("read", 0), conf.get("write", 0))):
            rows.append((topic, qid, store.min_offset(topic, qid), store.max_offset(topic, qid)))
            if len(rows) >= MAX_QUEUE_ROWS:
                return rows
    return rows


def dlq_depth(rows: list[tuple]) -> list[tuple[str, int]]:
    """(group, messages stored in %DLQ%group) from topic_rows."""
    depth: dict[str, int] = {}
    for topic, _, low, high in rows:
        if topic.startswith(DLQ_PREFIX):
            group = topic[len(DLQ_PREFIX):]
            depth[group] = depth.get(group, 0) + max(0, high - low)
    return sorted(depth.items())


def fold(rows, key_len: int, per_queue: bool, column: int, how=sum) -> list[tuple[tuple, float]]:
    """(labels, value) of rows[column], keyed by the first `key_len` fields (plus the queue id,
    the next field, when `per_queue`); `how` combines a key's values (None values left out)."""
    width = key_len + 1 if per_queue else key_len
    merged: dict[tuple, list] = {}
    for row in rows:
        v = row[column]
        if v is None:
            continue
        key = tuple(row[:width])
        if key not in merged and len(merged) >= MAX_SERIES:
            continue
        merged.setdefault(key, []).append(v)
    return [(k, how(vs)) for k, vs in merged.items()]


def _age_s(store, topic: str, qid: int, offset: int, now_ms: int) -> float | None:
    try:
        res = store.get_messages(topic, qid, offset, 1, None, 1 << 22)
        if res.status is not GetStatus.FOUND or not res.count:
            return None
        recs = record.decode_many(res.data)
    except Exception:  # an expired or unreadable slot: no age to show
        return None
    return max(0.0, (now_ms - recs[0].store_ts) / 1000) if recs else None
