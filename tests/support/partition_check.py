"""The partition suite's checker, plain functions over the records the clients wrote:

  acks        {id, q, o, b (storing broker), body, ts (sent), tr (answer)}: every SEND_OK
  final       {queue id: [[offset, id, body], ...]}: the log read back after the heal
  deliveries  {g, q, o, id, t}: every message each consumer group got, in the order it got them

and what it finds: acked messages lost, changed (another queue/offset or body) or stored twice;
windows in which two brokers both acknowledged; and, per group, acked messages it never got
(skipped) and acked messages it got out of queue order."""

from collections import defaultdict
from dataclasses import dataclass, field

GAP_S = 2.0   # a broker's acks further apart than this start a new window: a master that lost
              # its role and got it back went through two failovers, each longer than this


@dataclass
class GroupReport:
    delivered: int = 0
    skipped: list = field(default_factory=list)     # acked ids the group never got
    passed_over: int = 0                            # of those, how many lie below an offset it got later
    out_of_order: int = 0                           # acked messages got after a later one of their queue
    phantom: int = 0                                # deliveries of ids not in the final log


@dataclass
class Report:
    acked: int = 0
    stored: int = 0
    lost: list = field(default_factory=list)
    changed: list = field(default_factory=list)
    duplicated: list = field(default_factory=list)
    overlaps: list = field(default_factory=list)    # (broker, broker, seconds both acknowledged)
    groups: dict = field(default_factory=dict)      # group -> GroupReport
    acked_at: dict = field(default_factory=dict)    # id -> (queue, offset) of the acked messages kept

    @property
    def overlap_ms(self) -> float:
        return round(1000 * sum(s for _, _, s in self.overlaps), 1)

    def summary(self) -> str:
        gs = ", ".join(f"{g}: {r.delivered} delivered, {len(r.skipped)} skipped ({r.passed_over} passed over, "
                       f"per queue {per_queue(r.skipped, self.acked_at)}), {r.out_of_order} out of order, "
                       f"{r.phantom} phantom" for g, r in sorted(self.groups.items()))
        return (f"{self.acked} acked, {self.stored} stored; lost {len(self.lost)}, changed {len(self.changed)}, "
                f"duplicated {len(self.duplicated)}; masters overlap {self.overlap_ms} ms "
                f"{[(a, b, round(s * 1000)) for a, b, s in self.overlaps]}; {gs}")


def per_queue(ids, acked_at) -> dict:
    out = defaultdict(int)
    for i in ids:
        out[acked_at[i][0]] += 1
    return dict(sorted(out.items()))


def windows(acks: list[dict], gap_s: float = GAP_S) -> dict[str, list[tuple[float, float]]]:
    """Per broker, the spans it certainly acknowledged through: for each run of its acks (sorted
    by send time, split where they pause longer than gap_s), from the first one's answer to the
    last one's send. An ack happened somewhere between its send and its answer, so two brokers'
    spans intersect only if both acknowledged within that time (the clock is one machine's)."""
    by_broker = defaultdict(list)
    for a in acks:
        by_broker[a["b"]].append(a)
    out = {}
    for b, rows in by_broker.items():
        rows.sort(key=lambda a: a["ts"])
        spans, first, last = [], rows[0], rows[0]
        for a in rows[1:]:
            if a["ts"] - last["ts"] > gap_s:
                spans.append((first["tr"], last["ts"]))
                first = a
            last = a
        spans.append((first["tr"], last["ts"]))
        out[b] = [s for s in spans if s[0] < s[1]]
    return out


def overlaps(acks: list[dict], gap_s: float = GAP_S) -> list[tuple[str, str, float]]:
    """(broker, broker, seconds) for every pair of spans of two brokers that intersect."""
    w = windows(acks, gap_s)
    brokers = sorted(w)
    out = []
    for i, a in enumerate(brokers):
        for b in brokers[i + 1:]:
            for s1, e1 in w[a]:
                for s2, e2 in w[b]:
                    both = min(e1, e2) - max(s1, s2)
                    if both > 0:
                        out.append((a, b, both))
    return out


def check_group(acked_at: dict, deliveries: list[dict], in_log: set, ordered: bool) -> GroupReport:
    """Replay one group's deliveries against the acked history: `acked_at` id -> (queue, offset)
    as the final log holds it."""
    r = GroupReport(delivered=len(deliveries))
    first = {}
    for pos, d in enumerate(deliveries):
        first.setdefault(d["id"], pos)
        if d["id"] not in in_log:
            r.phantom += 1
    r.skipped = sorted(i for i in acked_at if i not in first)
    reached = defaultdict(lambda: -1)   # per queue, the highest offset of an acked message it got
    for i, (q, o) in acked_at.items():
        if i in first:
            reached[q] = max(reached[q], o)
    r.passed_over = sum(1 for i in r.skipped if acked_at[i][1] < reached[acked_at[i][0]])
    if ordered:
        rows_of = defaultdict(list)
        for i, (q, o) in acked_at.items():
            if i in first:
                rows_of[q].append((o, first[i]))
        for rows in rows_of.values():
            latest = -1
            for _, pos in sorted(rows):
                if pos < latest:
                    r.out_of_order += 1
                latest = max(latest, pos)
    return r


def check(acks: list[dict], final: dict, deliveries: list[dict], groups=(), ordered_groups=()) -> Report:
    """`groups`: every group that consumed (one that got nothing still skipped everything)."""
    rep = Report(acked=len(acks))
    where = defaultdict(list)   # id -> [(queue, offset, body)] in the final log
    for q, rows in final.items():
        for o, i, body in rows:
            where[i].append((int(q), o, body))
    rep.stored = sum(len(v) for v in where.values())
    rep.duplicated = sorted(i for i, v in where.items() if len(v) > 1)
    acked_at = rep.acked_at
    for a in acks:
        got = where.get(a["id"])
        if not got:
            rep.lost.append(a["id"])
        elif (a["q"], a["o"], a["body"]) not in got:
            rep.changed.append(a["id"])
        else:
            acked_at[a["id"]] = (a["q"], a["o"])
    rep.overlaps = overlaps(acks)
    by_group = {g: [] for g in groups}
    for d in deliveries:
        by_group.setdefault(d["g"], []).append(d)
    for g, ds in by_group.items():
        rep.groups[g] = check_group(acked_at, ds, set(where), g in ordered_groups)
    return rep
