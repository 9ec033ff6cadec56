"""Which scheduler instance handles which (broker, queue): pure functions, no I/O.

A unit is (broker name, kind, queue id) with kind "S" (a SCHEDULE_TOPIC_XXXX
level queue) or "T" (the broker's timer-topic queue). Every instance sorts the
units and the live member ids the same way and takes its averaged share
(RocketMQ's AllocateMessageQueueAveragely), so instances that agree on the
membership agree on the allocation without talking to each other.
"""

from typing import NamedTuple

LEVEL, TIMER = "S", "T"


class Unit(NamedTuple):
    broker: str
    kind: str
    queue_id: int

    def __str__(self) -> str:
        return f"{self.broker}/{'level' if self.kind == LEVEL else 'timer'}-{self.queue_id + (self.kind == LEVEL)}"


def units_of(broker: str, levels: int, timer_queues: int = 1) -> list[Unit]:
    return [Unit(broker, LEVEL, q) for q in range(levels)] + [Unit(broker, TIMER, q) for q in range(timer_queues)]


def allocate(units, members, me: str) -> list:
    """My averaged share of `units` among `members` (sorted, me included)."""
    units = sorted(units)
    members = sorted(set(members) | {me})
    n, m = len(units), len(members)
    idx = members.index(me)
    mod = n % m
    size = (n // m + 1) if idx < mod else n // m
    start = idx * size if idx < mod else idx * size + mod
    return units[start:start + size]


def client_id(advertised: str, pid: int, nonce: int) -> str:
    """A scheduler's client id names its address, so producers and peers can reach it."""
    return f"scheduler|{advertised}|{pid}|{nonce}"


def addr_of(client_id: str) -> str | None:
    parts = client_id.split("|")
    return parts[1] if len(parts) >= 3 and parts[0] == "scheduler" else None
