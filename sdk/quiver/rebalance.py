"""Queue allocation inside a consumer group, shared by the push and pull consumers.

Owns the allocation strategies (RocketMQ's AllocateMessageQueueAveragely,
AveragelyByCircle and ConsistentHash) and `Rebalancer`, which asks a broker
for the group's client ids, takes every readable queue of each subscribed
topic, and returns the queues this client should own. It does not own
process queues, offsets or pulling: the consumer applies the difference.
"""

import bisect
import hashlib
import logging

from . import requests as rq
from .client import MessageQueue
from .errors import QuiverError, TopicNotExistError

log = logging.getLogger(__name__)


def allocate_averagely(me: str, mqs: list, cids: list) -> list:
    """Contiguous blocks; the first Q mod C clients get one extra (Q=8, C=3: 3, 3, 2)."""
    if me not in cids or not mqs:
        return []
    i, q, c = cids.index(me), len(mqs), len(cids)
    mod = q % c
    if q <= c:
        size = 1
    elif mod > 0 and i < mod:
        size = q // c + 1
    else:
        size = q // c
    start = i * size if mod > 0 and i < mod else i * size + mod
    return [mqs[(start + k) % q] for k in range(min(size, q - start))]


def allocate_circle(me: str, mqs: list, cids: list) -> list:
    """Queue j goes to client j mod C."""
    if me not in cids:
        return []
    i, c = cids.index(me), len(cids)
    return [mq for j, mq in enumerate(mqs) if j % c == i]


def _hash(key: str) -> int:
    return int.from_bytes(hashlib.md5(key.encode()).digest()[:8], "big")


def allocate_consistent_hash(me: str, mqs: list, cids: list, virtual_nodes: int = 10) -> list:
    """Each client has `virtual_nodes` points on a ring; a queue goes to the next point clockwise."""
    if me not in cids:
        return []
    ring = sorted((_hash(f"{cid}-{n}"), cid) for cid in cids for n in range(virtual_nodes))
    points = [p for p, _ in ring]
    out = []
    for mq in mqs:
        i = bisect.bisect_right(points, _hash(f"{mq.topic}@{mq.broker}@{mq.queue_id}")) % len(ring)
        if ring[i][1] == me:
            out.append(mq)
    return out


STRATEGIES = {
    "averagely": allocate_averagely,
    "circle": allocate_circle,
    "consistent_hash": allocate_consistent_hash,
}


def strategy(name_or_fn):
    if callable(name_or_fn):
        return name_or_fn
    try:
        return STRATEGIES[name_or_fn]
    except KeyError:
        raise ValueError(f"unknown allocation strategy {name_or_fn!r}: use one of {sorted(STRATEGIES)}") from None


class Rebalancer:
    """Computes this client's queues for each subscribed topic.

    `client` is a started ClientBase with `group` and `client_id`. Broadcasting
    takes every queue; clustering allocates the sorted queues over the sorted
    client ids reported by one broker of the topic.
    """

    def __init__(self, client, group: str, allocate="averagely", broadcast: bool = False):
        self.client = client
        self.group = group
        self.allocate = strategy(allocate)
        self.broadcast = broadcast

    def client_ids(self, route) -> list[str]:
        for broker in sorted(route.addrs):
            try:
                env = self.client.call_broker(route.addrs[broker], rq.GetConsumerList(group=self.group))
                return sorted(rq.ConsumerListReply.decode(env.ext).ids)
            except QuiverError as exc:
                log.warning("consumer list of %s from %s failed: %s", self.group, broker, exc)
        return []

    def topic_queues(self, topic: str) -> list[MessageQueue] | None:
        """This client's share of `topic`, or None when it could not be computed."""
        try:
            route = self.client.route(topic, refresh=True)
        except TopicNotExistError:
            return []
        except QuiverError as exc:
            log.warning("route of %s unavailable: %s", topic, exc)
            return None
        mqs = sorted(route.read_queues)
        if self.broadcast:
            return mqs
        cids = self.client_ids(route)
        if not cids:
            return None
        return sorted(self.allocate(self.client.client_id, mqs, cids))

    def assignment(self, topics) -> dict[str, list[MessageQueue] | None]:
        return {t: self.topic_queues(t) for t in topics}
