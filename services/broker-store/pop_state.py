"""POP consumption state (no I/O): what each group has in flight per queue, and the revive log records.

One `QueueState` per (group, topic, queue id):

    offsets:  ... acked ... | base ......................... next | never popped ...
                            |  inflight{o: Entry}  done{o: ck}   |
                            |  neither: skipped by a FIFO pop    |

`base` is the group's consumer offset (everything below is acked or filtered out);
`inflight` holds popped, unacked offsets with the delivery that owns them (pop time,
deadline, reconsume count) and `ck`, the revive-log queue offset of the CK record
that popped them; `done` holds acked or filtered-out offsets above base, with their
CK (kept so the replay start never passes a CK still needed). An offset in
[base, next) in neither map was passed over by a FIFO pop (its message group had
one in flight) and is popped later.

Revive log: one record per event, the body of a message in the system topic
`rmq_sys_REVIVE_LOG_<cluster>` queue 0 (the CommitLog record around it owns
length, CRC and durability; RocketMQ keeps its checkpoints and acks there too):

    CK   {"k": "ck",  "g": group, "t": topic, "q": queue, "pt": pop ms, "it": invisible ms,
          "m": max reconsume | null, "o": [[offset, reconsume], ...], "d": [filtered offset, ...]}
    ACK  {"k": "ack", "g": group, "t": topic, "q": queue, "o": [[offset, pop ms], ...]}

A change of invisible duration is a CK of one offset with a new pop time; a move
to the DLQ is an ACK. Replaying the records in order through `apply` rebuilds the
same state the live broker had: an ACK counts only if its pop time is the one in
flight, live and in replay alike. `decode` raises only ValueError.
"""

import re
from dataclasses import dataclass, field

import orjson

REVIVE_TOPIC_PREFIX = "rmq_sys_REVIVE_LOG_"
REVIVE_GROUP = "CID_RMQ_SYS_REVIVE_GROUP"   # its consumer offset of the revive topic: where replay starts
MAX_INFLIGHT_PER_QUEUE = 20_000            # a queue with this many unacked offsets pops nothing new


def revive_topic(cluster: str) -> str:
    """RocketMQ's name; a cluster name may hold "." which a topic may not."""
    return REVIVE_TOPIC_PREFIX + re.sub(r"[^%|a-zA-Z0-9_-]", "_", cluster)[:100]


@dataclass(slots=True)
class Entry:
    pop_ts: int        # epoch ms of the delivery that owns the message now (the handle's)
    deadline: int      # epoch ms at which it becomes visible again
    reconsume: int     # deliveries before this one
    ck: int            # revive-log queue offset of the CK record of this delivery


@dataclass(slots=True)
class QueueState:
    base: int
    next: int
    inflight: dict[int, Entry] = field(default_factory=dict)
    done: dict[int, int] = field(default_factory=dict)

    def popped(self, offsets: list[tuple[int, int]], pop_ts: int, invisible_ms: int, ck: int) -> None:
        for off, rc in offsets:
            if off >= self.base:
                self.inflight[off] = Entry(pop_ts, pop_ts + invisible_ms, rc, ck)
                self.done.pop(off, None)
                self.next = max(self.next, off + 1)

    def filtered(self, offsets: list[int], ck: int) -> None:
        for off in offsets:
            if off >= self.base and off not in self.inflight:
                self.done[off] = ck
                self.next = max(self.next, off + 1)
        self.advance()

    def ack(self, offset: int, pop_ts: int) -> bool:
        """True if `pop_ts` is the delivery in flight at `offset` (then it is acked)."""
        e = self.inflight.get(offset)
        if e is None or e.pop_ts != pop_ts:
            return False
        del self.inflight[offset]
        self.done[offset] = e.ck
        self.advance()
        return True

    def advance(self) -> None:
        while self.base < self.next and self.base in self.done:
            del self.done[self.base]
            self.base += 1
        if not self.inflight and not self.done and self.next < self.base:
            self.next = self.base

    def oldest_ck(self) -> int | None:
        """The lowest CK offset a replay needs for this queue (None: none needed)."""
        cks = [e.ck for e in self.inflight.values()]
        cks.extend(self.done.values())
        return min(cks) if cks else None

    def expired(self, now_ms: int) -> list[int]:
        return sorted(o for o, e in self.inflight.items() if e.deadline <= now_ms)


class PopBook:
    """Every (group, topic, queue)'s QueueState, and what each group asked as its max reconsume
    times. `start(group, topic, queue, consume_from) -> int` gives the base of a queue seen the
    first time ("first" or "last": where a new group begins)."""

    def __init__(self, start):
        self.start = start
        self.queues: dict[tuple[str, str, int], QueueState] = {}
        self.asked_max: dict[str, int] = {}

    def get(self, group: str, topic: str, queue_id: int, consume_from: str = "first") -> QueueState:
        key = (group, topic, queue_id)
        st = self.queues.get(key)
        if st is None:
            base = self.start(group, topic, queue_id, consume_from)
            st = self.queues[key] = QueueState(base, base)
        return st

    def apply(self, rec: dict, ck_offset: int) -> None:
        """One decoded revive-log record, at revive queue offset `ck_offset`."""
        st = self.get(rec["g"], rec["t"], rec["q"])
        if rec["k"] == "ck":
            if rec.get("m") is not None:
                self.asked_max[rec["g"]] = rec["m"]
            st.popped([(o, rc) for o, rc in rec["o"]], rec["pt"], rec["it"], ck_offset)
            st.filtered(rec["d"], ck_offset)
        else:
            for off, pt in rec["o"]:
                st.ack(off, pt)

    def replay_start(self, revive_max: int) -> int:
        """Where a replay must start to rebuild this state: the oldest CK still needed."""
        cks = [c for c in (st.oldest_ck() for st in self.queues.values()) if c is not None]
        return min(cks) if cks else revive_max


# ---- revive-log records: build, encode, decode --------------------------------------------------


def ck_record(group: str, topic: str, queue_id: int, pop_ts: int, invisible_ms: int, max_reconsume: int | None,
              offsets: list[tuple[int, int]], filtered: list[int]) -> dict:
    return {"k": "ck", "g": group, "t": topic, "q": queue_id, "pt": pop_ts, "it": invisible_ms,
            "m": max_reconsume, "o": [list(p) for p in offsets], "d": list(filtered)}


def ack_record(group: str, topic: str, queue_id: int, acked: list[tuple[int, int]]) -> dict:
    return {"k": "ack", "g": group, "t": topic, "q": queue_id, "o": [list(p) for p in acked]}


def encode(rec: dict) -> bytes:
    return orjson.dumps(rec)


def _int(v) -> bool:
    return type(v) is int and 0 <= v < 2 ** 63


def _pairs(v) -> bool:
    return type(v) is list and all(type(p) is list and len(p) == 2 and _int(p[0]) and _int(p[1]) for p in v)


def decode(body: bytes) -> dict:
    """A revive-log body -> its record, every field checked; ValueError for anything else."""
    try:
        rec = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if type(rec) is not dict or rec.get("k") not in ("ck", "ack"):
        raise ValueError("not a CK or ACK record")
    if not (type(rec.get("g")) is str and type(rec.get("t")) is str and _int(rec.get("q"))
            and _pairs(rec.get("o"))):
        raise ValueError("group, topic, queue or offsets malformed")
    if rec["k"] == "ck":
        d, m = rec.get("d"), rec.get("m")
        if not (_int(rec.get("pt")) and _int(rec.get("it")) and type(d) is list and all(map(_int, d))
                and (m is None or (type(m) is int and -1 <= m < 2 ** 31))):
            raise ValueError("CK fields malformed")
    return rec
