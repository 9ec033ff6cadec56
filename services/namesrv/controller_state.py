"""The failover controller's state and rules, without Raft or sockets.

Owns, per broker group (cluster, broker name), what every controller must agree
on: the members (broker address -> id it registers with, HA address), the
master, the master epoch and the SyncStateSet (the master plus the replicas
that have everything it acknowledged). `Groups` is that replicated data; its
`register`, `elect` and `alter` are the only changes, each applied on every
controller in Raft log order (controller.py), each a compare-and-set on the
epoch so a decision taken on a stale view changes nothing.

Also owns the leader's choices, which are not replicated: `Liveness` (the last
heartbeat of each broker, in memory: brokers beat every controller, so a new
leader has its own view) and `pick_master` (a live SyncStateSet member, never
anyone else, most data first).

Does not own timing (controller.py) nor the brokers' side (quiver_broker.replicas).
"""

import time
from dataclasses import dataclass

from quiver.wire.replies import ControllerAssignment


def group_key(cluster: str, broker_name: str) -> str:
    return f"{cluster}/{broker_name}"


class Groups:
    """The replicated data: plain dicts, so Raft snapshots pickle it as is.

    group key -> {"cluster", "broker_name", "master": addr or "", "epoch": int,
                  "sss": [addr, ...], "members": {addr: {"id": int, "ha": addr}}, "next_id": int}
    """

    def __init__(self, data: dict | None = None):
        self.data: dict[str, dict] = data if data is not None else {}

    def get(self, key: str) -> dict | None:
        return self.data.get(key)

    def register(self, cluster: str, broker_name: str, addr: str, ha_addr: str) -> int:
        """A broker joins its group (or changes its HA address); returns its id (>= 1, kept)."""
        key = group_key(cluster, broker_name)
        g = self.data.setdefault(key, {"cluster": cluster, "broker_name": broker_name, "master": "", "epoch": 0,
                                       "sss": [], "members": {}, "next_id": 1})
        m = g["members"].get(addr)
        if m is None:
            m = g["members"][addr] = {"id": g["next_id"], "ha": ha_addr}
            g["next_id"] += 1
        m["ha"] = ha_addr
        return m["id"]

    def elect(self, key: str, expect_epoch: int, new_master: str, expect_sss: list[str] | None = None) -> bool:
        """`new_master` leads epoch + 1 if the epoch is still `expect_epoch` and, once the group has
        had a master, `new_master` is in the SyncStateSet (equal to `expect_sss` when given) as this
        applies: a set changed since the choice was made changes nothing. The SyncStateSet keeps
        the old one's other members: each has everything acknowledged so far, and the new master
        acknowledges only what each of them has too."""
        g = self.data.get(key)
        if g is None or g["epoch"] != expect_epoch or new_master not in g["members"]:
            return False
        if g["master"] and new_master not in g["sss"]:
            return False  # anyone outside the set may lack acknowledged messages
        if expect_sss is not None and list(g["sss"]) != list(expect_sss):
            return False
        old = g["master"]
        g["sss"] = [new_master] + [a for a in g["sss"] if a not in (old, new_master)]
        g["master"] = new_master
        g["epoch"] += 1
        return True

    def alter(self, key: str, master: str, epoch: int, sss: list[str]) -> bool:
        """The master of `epoch` replaces its SyncStateSet (itself included, members only)."""
        g = self.data.get(key)
        if (g is None or g["master"] != master or g["epoch"] != epoch or master not in sss
                or any(a not in g["members"] for a in sss)):
            return False
        g["sss"] = list(dict.fromkeys(sss))
        return True

    def assignment(self, key: str, addr: str, lease_ms: int, term: int = 0) -> ControllerAssignment:
        """What `addr` is now, as the answering leader of `term` says it."""
        g = self.data.get(key)
        m = g["members"].get(addr) if g else None
        if m is None or not g["master"]:
            return ControllerAssignment(role="none", epoch=g["epoch"] if g else 0, lease_ms=lease_ms, term=term)
        master = g["master"]
        return ControllerAssignment(role="master" if master == addr else "slave", epoch=g["epoch"],
                                    master_addr=master, master_ha_addr=g["members"][master]["ha"], broker_id=m["id"],
                                    sync_state_set=list(g["sss"]), lease_ms=lease_ms, term=term)


@dataclass
class Beat:
    at: float          # time.monotonic() of the last heartbeat
    max_offset: int
    epoch: int


class Liveness:
    """The last heartbeat of every broker address (memory only, this controller's view)."""

    def __init__(self, timeout_s: float, clock=time.monotonic):
        self.timeout_s = timeout_s
        self.clock = clock
        self.beats: dict[str, Beat] = {}

    def beat(self, addr: str, max_offset: int, epoch: int) -> None:
        self.beats[addr] = Beat(self.clock(), max_offset, epoch)

    def forget(self, addr: str) -> None:
        """`addr` resigned (it is stopping): not alive until its next heartbeat."""
        self.beats.pop(addr, None)

    def alive(self, addr: str) -> bool:
        b = self.beats.get(addr)
        return b is not None and self.clock() - b.at <= self.timeout_s

    def silent_s(self, addr: str) -> float | None:
        b = self.beats.get(addr)
        return None if b is None else self.clock() - b.at


def pick_master(g: dict, live: Liveness) -> str | None:
    """Who should lead `g` now, or None to leave it as it is.

    A group that never had a master takes its live member with the most data. A
    group whose master stopped beating takes a live member of its SyncStateSet,
    the one with the most data; with none alive it waits (no unclean election:
    anyone else may lack acknowledged messages)."""
    if g["master"] and live.alive(g["master"]):
        return None
    if g["master"]:
        pool = [a for a in g["sss"] if a != g["master"]]
    else:
        pool = list(g["members"])
    alive = [a for a in pool if live.alive(a)]
    if not alive:
        return None
    return max(alive, key=lambda a: (live.beats[a].epoch, live.beats[a].max_offset, a))
