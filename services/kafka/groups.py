"""JoinGroup, SyncGroup, Heartbeat, LeaveGroup: Kafka's classic group membership, kept by the gateway.

Kafka's protocol, in memory: a join (of a new member, or of a member told REBALANCE_IN_PROGRESS
by its heartbeat) opens a round; the round ends when every member has joined it, or at the
longest rebalance timeout, dropping the members that did not. The new generation's leader gets
the members' metadata, computes the assignment on the client (range, roundrobin, cooperative-sticky:
the client's own assignors) and hands it over in its SyncGroup; each member gets its part there.
A member not heard of within its session timeout is dropped and the others rebalance.

Membership is this gateway's: run one gateway for the group's consumers (several gateways each
keep their own members). The offsets are the brokers' (offsets.py), so they survive a gateway
restart; the members rejoin then. Joins and syncs wait on a condition, holding their
connection's reader thread as a Kafka broker holds the connection's next request.
"""

import itertools
import threading
import time
import uuid
from dataclasses import dataclass, field

from quiver.wire.names import group_problem

from .protocol import (DESCRIBE_GROUPS, FENCED_INSTANCE_ID, HEARTBEAT, LIST_GROUPS, ILLEGAL_GENERATION, INCONSISTENT_GROUP_PROTOCOL, INVALID_GROUP_ID,
                       INVALID_SESSION_TIMEOUT, JOIN_GROUP, LEAVE_GROUP, NONE, REBALANCE_IN_PROGRESS, SYNC_GROUP,
                       UNKNOWN_MEMBER_ID)

MIN_SESSION_MS, MAX_SESSION_MS = 1000, 300_000
MAX_MEMBERS = 1000


@dataclass
class Member:
    member_id: str
    protocols: list                  # [(name, metadata)], the member's preference order
    session_s: float
    rebalance_s: float
    seen: float
    joined_round: int = -1           # the round this member last joined
    assignment: bytes = b""
    instance_id: str | None = None   # group.instance.id: a static member


@dataclass
class Group:
    name: str
    protocol_type: str = ""
    members: dict = field(default_factory=dict)
    generation: int = 0
    protocol: str = ""
    leader: str = ""
    round: int = 0                   # the round being joined (== generation + 1 while joining)
    joining: bool = False
    deadline: float = 0.0
    synced: bool = False             # the leader's assignment for this generation has come
    static: dict = field(default_factory=dict)   # group.instance.id -> its member id now


class Coordinator:
    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.groups: dict[str, Group] = {}
        self.cond = threading.Condition()
        self._ids = itertools.count(1)

    def apis(self) -> dict:
        return {JOIN_GROUP: self.join, SYNC_GROUP: self.sync, HEARTBEAT: self.heartbeat, LEAVE_GROUP: self.leave,
                DESCRIBE_GROUPS: self.describe, LIST_GROUPS: self.list}

    # ---- state ---------------------------------------------------------------------------------

    def _start_round(self, g: Group) -> None:
        if not g.joining:
            g.joining, g.synced, g.round = True, False, g.generation + 1
            g.deadline = self.clock() + max((m.rebalance_s for m in g.members.values()), default=0)
        self.cond.notify_all()

    def _maybe_complete(self, g: Group) -> None:
        if not g.joining:
            return
        waiting = [m for m in g.members.values() if m.joined_round != g.round]
        if waiting and self.clock() < g.deadline:
            return
        for m in waiting:                      # did not rejoin in time: out of the group
            _drop(g, m.member_id)
        g.joining = False
        if not g.members:
            g.generation += 1
            return
        g.generation = g.round
        if g.leader not in g.members:
            g.leader = next(iter(g.members))
        common = [name for name, _ in g.members[g.leader].protocols
                  if all(name in dict(m.protocols) for m in g.members.values())]
        g.protocol = common[0] if common else ""
        for m in g.members.values():
            m.assignment = b""
        self.cond.notify_all()

    def expire(self) -> None:
        """Drop members past their session timeout (a timer calls it; so does every request)."""
        with self.cond:
            now = self.clock()
            for g in self.groups.values():
                gone = [m for m in g.members.values() if now - m.seen > m.session_s]
                for m in gone:
                    _drop(g, m.member_id)
                    if m.member_id == g.leader:
                        g.leader = ""
                if gone and g.members:
                    self._start_round(g)
                self._maybe_complete(g)

    def check_commit(self, group: str, member_id: str, generation: int, instance_id: str | None = None) -> int:
        """Whether a commit of `generation` by `member_id` is current (OffsetCommit)."""
        with self.cond:
            g = self.groups.get(group)
            if _fenced(g, member_id, instance_id):
                return FENCED_INSTANCE_ID
            if g is None or member_id not in g.members:
                return UNKNOWN_MEMBER_ID if g is not None and g.members else ILLEGAL_GENERATION
            if g.joining:
                return REBALANCE_IN_PROGRESS
            return NONE if generation == g.generation else ILLEGAL_GENERATION

    # ---- APIs ----------------------------------------------------------------------------------

    def join(self, body) -> dict:
        out = {"error_code": NONE, "generation_id": -1, "protocol_name": "", "leader": "",
               "member_id": body.member_id or "", "members": []}
        if group_problem(body.group_id):
            return {**out, "error_code": INVALID_GROUP_ID}
        session_ms = int(body.session_timeout.total_seconds() * 1000)
        if not MIN_SESSION_MS <= session_ms <= MAX_SESSION_MS:
            return {**out, "error_code": INVALID_SESSION_TIMEOUT}
        rebalance = getattr(body, "rebalance_timeout", None)
        rebalance_s = min(MAX_SESSION_MS / 1000, rebalance.total_seconds() if rebalance else session_ms / 1000)
        protocols = [(p.name, bytes(p.metadata)) for p in body.protocols]
        instance = getattr(body, "group_instance_id", None)
        self.expire()
        with self.cond:
            g = self.groups.setdefault(body.group_id, Group(body.group_id))
            mid = body.member_id
            if _fenced(g, mid, instance) and mid:
                return {**out, "error_code": FENCED_INSTANCE_ID}
            owner = g.static.get(instance) if instance is not None else None
            if not mid and owner in g.members:   # a static member back: its place, a new id; the old one fenced
                mid = self._new_id()
                m = g.members[mid] = g.members.pop(owner)
                m.member_id, g.static[instance] = mid, mid
                if g.leader == owner:
                    g.leader = mid
            if mid and mid not in g.members:
                return {**out, "error_code": UNKNOWN_MEMBER_ID}
            if g.members and (body.protocol_type != g.protocol_type or not any(
                    all(name in dict(m.protocols) for m in g.members.values()) for name, _ in protocols)):
                return {**out, "error_code": INCONSISTENT_GROUP_PROTOCOL}
            if not mid:
                if len(g.members) >= MAX_MEMBERS:
                    return {**out, "error_code": INVALID_GROUP_ID}
                mid = self._new_id()
            g.protocol_type = body.protocol_type
            m = g.members.get(mid)
            if m is None or m.protocols != protocols:
                self._start_round(g)           # a new member or new metadata: everyone rejoins
            m = g.members[mid] = Member(mid, protocols, session_ms / 1000, rebalance_s, self.clock(),
                                        m.joined_round if m else -1, instance_id=instance)
            if instance is not None:
                g.static[instance] = mid
            self._start_round(g)
            m.joined_round = g.round
            my_round = g.round
            while True:
                self._maybe_complete(g)
                if g.members.get(mid) is not m:
                    return {**out, "member_id": mid,
                            "error_code": FENCED_INSTANCE_ID if _fenced(g, mid, instance) else UNKNOWN_MEMBER_ID}
                if not g.joining and g.generation >= my_round:
                    break
                m.seen = self.clock()          # waiting in a join counts as alive
                self.cond.wait(max(0.01, min(1.0, g.deadline - self.clock())))
            members = [{"member_id": x.member_id, "group_instance_id": x.instance_id,
                        "metadata": dict(x.protocols).get(g.protocol, b"")}
                       for x in g.members.values()] if mid == g.leader else []
            return {**out, "generation_id": g.generation, "protocol_name": g.protocol, "leader": g.leader,
                    "member_id": mid, "members": members}

    def sync(self, body) -> dict:
        out = {"error_code": NONE, "assignment": b""}
        with self.cond:
            g = self.groups.get(body.group_id)
            m = g.members.get(body.member_id) if g else None
            if _fenced(g, body.member_id, getattr(body, "group_instance_id", None)):
                return {**out, "error_code": FENCED_INSTANCE_ID}
            if m is None:
                return {**out, "error_code": UNKNOWN_MEMBER_ID}
            if g.joining:
                return {**out, "error_code": REBALANCE_IN_PROGRESS}
            if body.generation_id != g.generation:
                return {**out, "error_code": ILLEGAL_GENERATION}
            m.seen = self.clock()
            generation = g.generation
            if body.member_id == g.leader:
                given = {a.member_id: bytes(a.assignment) for a in body.assignments}
                for x in g.members.values():
                    x.assignment = given.get(x.member_id, b"")
                g.synced = True
                self.cond.notify_all()
            deadline = self.clock() + m.session_s
            while not g.synced and not g.joining and g.generation == generation and body.member_id in g.members:
                if self.clock() >= deadline:
                    return {**out, "error_code": REBALANCE_IN_PROGRESS}
                self.cond.wait(max(0.01, min(1.0, deadline - self.clock())))
            if g.joining or g.generation != generation or body.member_id not in g.members:
                return {**out, "error_code": REBALANCE_IN_PROGRESS}
            return {**out, "assignment": m.assignment}

    def heartbeat(self, body) -> dict:
        self.expire()
        with self.cond:
            g = self.groups.get(body.group_id)
            m = g.members.get(body.member_id) if g else None
            if _fenced(g, body.member_id, getattr(body, "group_instance_id", None)):
                return {"error_code": FENCED_INSTANCE_ID}
            if m is None:
                return {"error_code": UNKNOWN_MEMBER_ID}
            m.seen = self.clock()
            if g.joining:
                return {"error_code": REBALANCE_IN_PROGRESS}
            return {"error_code": NONE if body.generation_id == g.generation else ILLEGAL_GENERATION}

    def leave(self, body) -> dict:
        ids = ([(x.member_id, x.group_instance_id) for x in body.members] if hasattr(body, "members")
               else [(body.member_id, None)])
        answers = []
        with self.cond:
            g = self.groups.get(body.group_id)
            for mid, instance in ids:
                if g is not None and not mid and instance in g.static:   # a static member leaving by its instance id
                    mid = g.static[instance]
                err = (FENCED_INSTANCE_ID if _fenced(g, mid, instance)
                       else UNKNOWN_MEMBER_ID if g is None or mid not in g.members else NONE)
                if not err:
                    _drop(g, mid)
                answers.append({"member_id": mid, "group_instance_id": instance, "error_code": err})
            if g is not None and any(a["error_code"] == NONE for a in answers):
                if g.leader not in g.members:
                    g.leader = ""
                if g.members:
                    self._start_round(g)
                    self._maybe_complete(g)
                else:
                    g.joining = False
                    self.cond.notify_all()
        err = NONE if len(ids) > 1 or not answers else answers[0]["error_code"]
        return {"error_code": err, "members": answers}

    def list(self, _body) -> dict:
        with self.cond:
            groups = [{"group_id": g.name, "protocol_type": g.protocol_type, "group_state": self._state(g)}
                      for g in self.groups.values() if g.members]
        return {"throttle_time": 0, "error_code": NONE, "groups": groups}

    def describe(self, body) -> dict:
        out = []
        with self.cond:
            for name in body.groups:
                g = self.groups.get(name)
                if group_problem(name):
                    out.append({"error_code": INVALID_GROUP_ID, "group_id": name, "group_state": "Dead"})
                    continue
                if g is None or not g.members:   # Kafka's answer for a group without members
                    out.append({"error_code": NONE, "group_id": name, "group_state": "Dead", "members": []})
                    continue
                stable = self._state(g) == "Stable"
                out.append({"error_code": NONE, "group_id": name, "group_state": self._state(g),
                            "protocol_type": g.protocol_type, "protocol_data": g.protocol, "members": [
                                {"member_id": m.member_id, "group_instance_id": m.instance_id, "client_id": "",
                                 "client_host": "", "member_metadata": dict(m.protocols).get(g.protocol, b""),
                                 "member_assignment": m.assignment if stable else b""}
                                for m in g.members.values()]})
        return {"throttle_time": 0, "groups": out}

    def _new_id(self) -> str:
        return f"quiver-{next(self._ids)}-{uuid.uuid4().hex[:12]}"

    @staticmethod
    def _state(g: Group) -> str:
        if not g.members:
            return "Empty"
        if g.joining:
            return "PreparingRebalance"
        return "Stable" if g.synced else "CompletingRebalance"


def _fenced(g: Group | None, member_id: str, instance_id: str | None) -> bool:
    """A static member's call under a member id its instance id no longer has (another process took it)."""
    return g is not None and instance_id is not None and g.static.get(instance_id, member_id) != member_id


def _drop(g: Group, member_id: str) -> None:
    m = g.members.pop(member_id)
    if m.instance_id is not None and g.static.get(m.instance_id) == member_id:
        del g.static[m.instance_id]
