"""Driver side of the "quiver" source: options, which queues to read, and offset ranges.

Owns option parsing (named like Spark's Kafka source), the offsets JSON of
options and checkpoints ({"topic": {"broker": {"queueId": offset}}}, -2 =
earliest, -1 = latest), asking the brokers for queue bounds and timestamps,
data-loss checks, splitting ranges into partitions (minPartitions) and the
rate-limit cap (maxOffsetsPerTrigger). Runs in the driver's Python process
only; executors get `Options` and `QueueRange`s (plain, picklable data). Does
not own reading (reader.py) nor Spark's reader classes (source.py).
"""

import json
import logging
import math
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace

from quiver.client import filter_route
from quiver.client.access import broker_access
from quiver.client.admin import Admin
from quiver.client.message import MessageSelector
from quiver.client.range_reader import DataLossError, QueueRange
from quiver.errors import ClientError, error_for
from quiver.wire import requests as rq
from quiver.wire.codes import ResponseCode

log = logging.getLogger(__name__)

EARLIEST, LATEST = -2, -1
Queue = tuple[str, str, int]                     # (topic, broker, queue id)
Offsets = dict[str, dict[str, dict[str, int]]]    # the offsets JSON: {topic: {broker: {"queueId": offset}}}
_SYSTEM_TOPIC = re.compile(r"^(%RETRY%|%DLQ%|RMQ_SYS_|SCHEDULE_TOPIC_XXXX|TBW102|SELF_TEST_TOPIC)")


# ---- options ------------------------------------------------------------------------------

def _bool(v: str | None, default: bool) -> bool:
    if v is None:
        return default
    s = str(v).strip().lower()
    if s not in ("true", "false"):
        raise ClientError(f"expected true or false, got {v!r}")
    return s == "true"


def _int(v: str | None, name: str) -> int | None:
    if v is None or v == "":
        return None
    try:
        return int(v)
    except ValueError:
        raise ClientError(f"option {name} must be an integer, got {v!r}") from None


@dataclass(frozen=True)
class Options:
    namesrv: str
    topics: tuple[str, ...] = ()
    topic_pattern: str | None = None
    starting: str | None = None
    ending: str | None = None
    starting_ts: int | None = None
    ending_ts: int | None = None
    max_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    subscription: str = "*"
    sql: str | None = None
    pull_batch_size: int = 1024
    min_partitions: int | None = None
    credentials: str | None = None   # auth on: a key file path every executor can read

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> "Options":
        o = {str(k).lower(): v for k, v in dict(options).items()}
        topics = tuple(t.strip() for t in (o.get("topic") or o.get("subscribe") or "").split(",") if t.strip())
        pattern = o.get("topicpattern") or o.get("subscribepattern")
        if bool(topics) == bool(pattern):
            raise ClientError("give exactly one of the options 'topic' (comma list) and 'topicPattern' (regex)")
        sub = (o.get("subscription") or "*").strip()
        sql = sub[4:].strip() if sub.lower().startswith("sql:") else None
        mpt = _int(o.get("maxoffsetspertrigger"), "maxOffsetsPerTrigger")
        if mpt is not None and mpt <= 0:
            raise ClientError("maxOffsetsPerTrigger must be positive")
        return cls(namesrv=o.get("namesrv") or o.get("nameserver") or "127.0.0.1:9876", topics=topics,
                   topic_pattern=pattern, starting=o.get("startingoffsets"), ending=o.get("endingoffsets"),
                   starting_ts=_int(o.get("startingtimestamp"), "startingTimestamp"),
                   ending_ts=_int(o.get("endingtimestamp"), "endingTimestamp"), max_per_trigger=mpt,
                   fail_on_data_loss=_bool(o.get("failondataloss"), True),
                   subscription="*" if sql is not None else sub, sql=sql,
                   pull_batch_size=_int(o.get("pullbatchsize"), "pullBatchSize") or 1024,
                   min_partitions=_int(o.get("minpartitions"), "minPartitions"),
                   credentials=o.get("credentials") or os.environ.get("QUIVER_CREDENTIALS") or None)


def offset_spec(spec: str | None, default: str) -> str | Offsets:
    """"earliest" / "latest" / parsed JSON {"topic": {"broker": {"queueId": offset}}}."""
    spec = (spec or default).strip()
    if spec.lower() in ("earliest", "latest"):
        return spec.lower()
    try:
        parsed: Offsets = json.loads(spec)
    except ValueError:
        raise ClientError(f"offsets must be 'earliest', 'latest' or JSON like "
                          f'{{"topic": {{"broker-a": {{"0": 42}}}}}}, got {spec!r}') from None
    if not isinstance(parsed, dict) or not all(isinstance(b, dict) and all(isinstance(q, dict) for q in b.values())
                                               for b in parsed.values()):
        raise ClientError(f"offsets JSON must be {{topic: {{broker: {{queueId: offset}}}}}}, got {spec!r}")
    return parsed


# ---- planning ------------------------------------------------------------------------------------

def get_offset(offsets: Offsets, topic: str, broker: str, queue_id: int) -> int | None:
    return offsets.get(topic, {}).get(broker, {}).get(str(queue_id))


def put_offset(offsets: Offsets, topic: str, broker: str, queue_id: int, value: int) -> None:
    offsets.setdefault(topic, {}).setdefault(broker, {})[str(queue_id)] = int(value)


def flatten_offsets(offsets: Offsets) -> Iterator[tuple[Queue, int]]:
    for topic, brokers in offsets.items():
        for broker, queues in brokers.items():
            for qid, off in queues.items():
                yield (topic, broker, int(qid)), int(off)


class Planner:
    """Driver-side: which queues exist and their offsets. Holds an Admin; close() it."""

    def __init__(self, opts: Options):
        self.opts = opts
        self.admin = Admin(namesrv=opts.namesrv, credentials=opts.credentials)
        self.addrs: dict[str, str] = {}          # broker -> address
        self.filters: dict[str, tuple[str, ...]] = {}      # broker -> filter server addresses
        self._checked_sql: set[str] = set()

    def close(self) -> None:
        self.admin.shutdown()

    def topics(self) -> list[str]:
        if self.opts.topics:
            return list(self.opts.topics)
        assert self.opts.topic_pattern is not None   # parse() gives topics or a pattern
        rx = re.compile(self.opts.topic_pattern)
        return sorted(t for t in self.admin.topic_list() if rx.fullmatch(t) and not _SYSTEM_TOPIC.match(t))

    def queues(self) -> list[Queue]:
        """Every readable (topic, broker, queue id), routes refreshed (new queues and brokers show up)."""
        out: list[Queue] = []
        for topic in self.topics():
            route = broker_access(self.admin).route(topic, refresh=True)
            for mq in route.read_queues:
                addr = route.addrs[mq.broker]
                assert addr is not None   # Route reads only brokers with an address
                self.addrs[mq.broker] = addr
                # any filter server of the cluster may serve this broker: its own first (filter_route tiers)
                self.filters[mq.broker] = tuple(a for tier in filter_route.candidates(route, addr) for a in tier)
                out.append((mq.topic, mq.broker, mq.queue_id))
            if self.opts.sql is not None and topic not in self._checked_sql:
                filter_route.check_subscription(broker_access(self.admin), topic, MessageSelector.sql(self.opts.sql))
                self._checked_sql.add(topic)
        return out

    def ask(self, queues: Iterable[Queue], kind: type[rq.Schema], **fields: int) -> dict[Queue, int]:
        """One offset request per queue (`kind`: its schema), all in flight at once: {(topic, broker, qid): offset}."""
        t, timeout = broker_access(self.admin).transport, self.admin.request_timeout
        if t is None:
            raise ClientError("the planner's Admin is not started")
        futs = {q: t.call_future(self.addrs[q[1]], kind(topic=q[0], queue_id=q[2], **fields), timeout=timeout)
                for q in queues}
        out: dict[Queue, int] = {}
        for q, fut in futs.items():
            env = fut.result(timeout + 1)
            if env.code != ResponseCode.SUCCESS:
                raise error_for(env.code, f"{q}: {env.remark}")
            out[q] = rq.OffsetReply.decode(env.ext).offset
        return out

    def bounds(self, queues: list[Queue]) -> tuple[dict[Queue, int], dict[Queue, int]]:
        return self.ask(queues, rq.GetMinOffset), self.ask(queues, rq.GetMaxOffset)

    def resolve(self, queues: list[Queue], spec: str | Offsets, ts: int | None, lows: dict[Queue, int],
                highs: dict[Queue, int], default_missing: int) -> dict[Queue, int]:
        """Offsets per queue for a startingOffsets/endingOffsets spec or a timestamp."""
        if ts is not None:
            return self.ask(queues, rq.SearchOffsetByTimestamp, timestamp=int(ts))
        out: dict[Queue, int] = {}
        for q in queues:
            if isinstance(spec, dict):
                got = get_offset(spec, *q)
                v = default_missing if got is None else int(got)
            else:   # offset_spec's "earliest" or "latest"
                v = EARLIEST if spec == "earliest" else LATEST
            out[q] = lows[q] if v == EARLIEST else highs[q] if v == LATEST else v
        return out

    def check_loss(self, q: Queue, start: int, low: int) -> int:
        """The start to use when `start` may be below the min offset (retention)."""
        if start >= low:
            return start
        msg = (f"offsets {start}..{low - 1} of {q[0]} on {q[1]} queue {q[2]} were deleted by retention "
               f"before they were read (min offset is now {low})")
        if self.opts.fail_on_data_loss:
            raise DataLossError(msg + "; set failOnDataLoss=false to skip them")
        log.warning("%s; skipping them (failOnDataLoss=false)", msg)
        return low

    def ranges(self, starts: dict[Queue, int], ends: dict[Queue, int]) -> list[QueueRange]:
        out: list[QueueRange] = []
        for q, end in ends.items():
            start = starts.get(q)
            if start is None or end <= start or q[1] not in self.addrs:
                continue
            out.append(QueueRange(q[0], q[1], q[2], start, end, self.addrs[q[1]], self.filters.get(q[1], ())))
        return out


def split_ranges(ranges: list[QueueRange], min_partitions: int | None) -> list[list[QueueRange]]:
    """One partition per queue range; big ranges split so there are about min_partitions (Kafka's rule)."""
    ranges = [r for r in ranges if r.size > 0]
    total = sum(r.size for r in ranges)
    if not min_partitions or len(ranges) >= min_partitions or total == 0:
        return [[r] for r in ranges]
    out: list[list[QueueRange]] = []
    for r in ranges:
        parts = max(1, math.ceil(r.size * min_partitions / total))
        step = math.ceil(r.size / parts)
        out.extend([replace(r, start=lo, end=min(lo + step, r.end))] for lo in range(r.start, r.end, step))
    return out


def cap_offsets(base: dict[Queue, int], latest: dict[Queue, int], limit: int | None) -> dict[Queue, int]:
    """End offsets that move at most `limit` messages past `base`, split by backlog (Kafka's rateLimit)."""
    backlog = {q: max(0, latest[q] - base.get(q, latest[q])) for q in latest}
    total = sum(backlog.values())
    if limit is None or total <= limit:
        return {q: max(latest[q], base.get(q, latest[q])) for q in latest}
    out = {q: base.get(q, latest[q]) + backlog[q] * limit // total for q in latest}
    moved = sum(out[q] - base.get(q, latest[q]) for q in latest)
    if moved == 0:  # many queues, small limit: still make progress on the biggest backlog
        big = max(backlog, key=backlog.__getitem__)
        out[big] += min(limit, backlog[big])
    return out


def plan_batch(opts: Options) -> list[list[QueueRange]]:
    """A batch query's partitions: every queue's [startingOffsets, endingOffsets) (or timestamps)."""
    planner = Planner(opts)
    try:
        queues = planner.queues()
        lows, highs = planner.bounds(queues)
        start_spec = offset_spec(opts.starting, "earliest")
        end_spec = offset_spec(opts.ending, "latest")
        if end_spec == "earliest":
            raise ClientError("endingOffsets cannot be 'earliest' in a batch query")
        starts = planner.resolve(queues, start_spec, opts.starting_ts, lows, highs, EARLIEST)
        ends = planner.resolve(queues, end_spec, opts.ending_ts, lows, highs, LATEST)
        for q in queues:
            if ends[q] > highs[q]:
                log.warning("endingOffsets %d of %s is past its max offset %d: reading to the max",
                            ends[q], q, highs[q])
                ends[q] = highs[q]
            if starts[q] < ends[q]:
                starts[q] = planner.check_loss(q, starts[q], lows[q])
        return split_ranges(planner.ranges(starts, ends), opts.min_partitions)
    finally:
        planner.close()
