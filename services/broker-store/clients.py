"""Clients the broker knows from their heartbeats: producer and consumer groups.

Kept per group so the broker can push to a live member (transaction checks to
a producer, membership changes to consumers). Silent clients expire.
"""

import time
from dataclasses import dataclass

from quiver.wire.requests import ConsumerData


@dataclass
class ClientInfo:
    client_id: str
    identity: bytes
    last_seen: float
    consumer: ConsumerData | None = None   # as the last heartbeat declared it (consumers only)

    @property
    def subscriptions(self) -> dict:
        """topic -> quiver.wire.requests.Subscription"""
        return self.consumer.subscriptions if self.consumer is not None else {}

    @property
    def queues(self) -> list:
        """[(topic, broker name, queue id)] the member says it owns."""
        return (self.consumer.queues or []) if self.consumer is not None else []


class ClientRegistry:
    def __init__(self, expiry_s: float = 120.0, clock=time.monotonic):
        self.expiry_s = expiry_s
        self.clock = clock
        self.consumers: dict[str, dict[str, ClientInfo]] = {}
        self.producers: dict[str, dict[str, ClientInfo]] = {}

    def heartbeat(self, client_id: str, identity: bytes, producer_groups: list[str],
                  consumer_data: list[ConsumerData]) -> set[str]:
        """Record a heartbeat; returns consumer groups whose membership changed."""
        now = self.clock()
        changed = set()
        for g in producer_groups or ():
            self.producers.setdefault(g, {})[client_id] = ClientInfo(client_id, identity, now)
        for c in consumer_data or ():
            members = self.consumers.setdefault(c.group, {})
            if client_id not in members:
                changed.add(c.group)
            members[client_id] = ClientInfo(client_id, identity, now, c)
        return changed

    def unregister(self, client_id: str, producer_group: str | None, consumer_group: str | None) -> set[str]:
        changed = set()
        if producer_group:
            self.producers.get(producer_group, {}).pop(client_id, None)
        if consumer_group and self.consumers.get(consumer_group, {}).pop(client_id, None):
            changed.add(consumer_group)
        return changed

    def expire(self) -> set[str]:
        now = self.clock()
        changed = set()
        for table, is_consumer in ((self.consumers, True), (self.producers, False)):
            for group, members in table.items():
                for cid in [c for c, info in members.items() if now - info.last_seen > self.expiry_s]:
                    del members[cid]
                    if is_consumer:
                        changed.add(group)
        return changed

    def is_consumer(self, group: str, client_id: str) -> bool:
        return client_id in self.consumers.get(group, {})

    def find(self, client_id: str) -> ClientInfo | None:
        """The live client `client_id` as any of its heartbeats declared it (a producer first)."""
        for table in (self.producers, self.consumers):
            for members in table.values():
                info = members.get(client_id)
                if info is not None:
                    return info
        return None

    def consumer_ids(self, group: str) -> list[str]:
        return sorted(self.consumers.get(group, {}))

    def subscription_conflicts(self, group: str) -> dict:
        """topic -> {expression: [client ids]} where members of a group disagree."""
        seen: dict[str, dict[str, list]] = {}
        for cid, info in self.consumers.get(group, {}).items():
            for topic, sub in info.subscriptions.items():
                seen.setdefault(topic, {}).setdefault(f"{sub.type}:{sub.expression}", []).append(cid)
        return {t: e for t, e in seen.items() if len(e) > 1}
