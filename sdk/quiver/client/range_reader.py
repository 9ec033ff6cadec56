"""Bounded reads of one message queue: the records of offsets [start, end), straight from a broker.

Owns the "pull a fixed range" loop the Spark source runs on executors, and
that anything else needing a replayable slice of a queue can use: no consumer
group, no heartbeats, no rebalance, no commit. A `QueueRange` is plain data
(picklable); `read_range(transport, rng)` yields lists of `record.Record` in
queue order, each offset at most once, none outside [start, end) (or what its
`decode` makes of each answer: the Spark source's Arrow batches).

Without a filter several pulls of consecutive chunks are in flight at once
(a chunk answered short, e.g. by the reply byte cap, is re-asked from where it
stopped). A tag expression is checked on the broker (hash) and again here
(string). A SQL92 expression is pulled through a filter server of the queue's
broker, one pull at a time (a filter server scans ahead until it finds a
match, so parallel chunks would rescan the same records); an unusable one
(filter_route.should_fail_over) hands over to the next, until every one has
failed in a row. Requests and answers are queue_puller.py's.

Offsets below the queue's min offset (deleted by retention) are data loss:
`DataLossError` when `fail_on_data_loss`, else a logged warning and the read
goes on from the min offset. Does not own planning (which ranges to read:
quiver.spark), the pull request and its answer (queue_puller.py) nor the wire
(protocol.py).
"""

import collections
import logging
import time
from dataclasses import dataclass, field

from quiver.client import queue_puller
from quiver.errors import ClientError, QuiverError
from quiver.client.filter_route import should_fail_over
from quiver.client.message import MessageSelector
from quiver.client.queue_puller import FOUND, OFFSET_ILLEGAL

log = logging.getLogger(__name__)

MAX_PULL = 1024            # the broker answers at most this many records per pull
PIPELINE_DEPTH = 4         # chunks in flight per queue when nothing is filtered
MISSING_WAIT_S = 10.0      # how long an offset below the planned end may stay invisible (flush lag)


class DataLossError(ClientError):
    """Offsets of a planned range are gone from the broker (retention) and failOnDataLoss is set."""


@dataclass(frozen=True, slots=True)
class QueueRange:
    topic: str
    broker: str
    queue_id: int
    start: int
    end: int
    addr: str                                     # the broker's address
    filter_addrs: tuple[str, ...] = field(default=())   # SQL92: filter servers of that broker

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


@dataclass(slots=True)
class RangeStats:
    records: int = 0
    lost: int = 0          # offsets skipped because retention deleted them
    pulls: int = 0


def records_in(pulled, selector, lo: int, end: int) -> tuple[list, int, int | None]:
    """The records of a FOUND answer in [lo, end) of the selector's tags: (the list, how many,
    the last one's queue offset or None). read_range's default `decode`."""
    recs = [r for r in pulled.records(selector) if lo <= r.queue_offset < end]
    return recs, len(recs), recs[-1].queue_offset if recs else None


def read_range(transport, rng: QueueRange, batch_size: int = MAX_PULL, subscription: str = "*",
               sql: str | None = None, fail_on_data_loss: bool = True, timeout_s: float = 30.0,
               stats: RangeStats | None = None, decode=records_in):
    """The records of rng.topic/queue in [rng.start, rng.end), in offset order: for each answer
    holding any, the batch `decode(pulled, selector, lo, end)` makes of them (a list of records
    by default, records_in; a decode keeps only offsets in [lo, end) and the selector's tags)."""
    stats = stats if stats is not None else RangeStats()
    if rng.size == 0:
        return
    batch_size = max(1, min(int(batch_size), MAX_PULL))
    if sql is not None:
        selector = MessageSelector.sql(sql)
        vias = list(rng.filter_addrs)
        if not vias:
            raise ClientError(f"no filter server for broker {rng.broker} ({rng.addr}): SQL92 subscriptions "
                              f"need one (python -m quiver_filter --broker {rng.addr})")
        depth = 1
    else:
        selector = subscription or "*"
        vias = [rng.addr]
        depth = PIPELINE_DEPTH
    via_i = failures = 0

    def ask(lo: int, hi: int):
        stats.pulls += 1
        # a filter server may serve any broker of the cluster: name the one meant
        req = queue_puller.request(rng.topic, rng.queue_id, lo, max_msgs=min(batch_size, hi - lo), selector=selector,
                                   broker_addr=rng.addr if sql is not None else None)
        return transport.call_future(vias[via_i], req, timeout=timeout_s)

    pending = collections.deque()   # [lo, hi, future], consecutive, in offset order
    issued = rng.start
    missing_since = None
    while True:
        while len(pending) < depth and issued < rng.end:
            hi = min(issued + batch_size, rng.end)
            pending.append([issued, hi, ask(issued, hi)])
            issued = hi
        if not pending:
            return
        lo, hi, fut = pending[0]
        try:
            pulled = queue_puller.read(fut.result(timeout_s + 2))   # FieldError (a QuiverError) if garbled
        except QuiverError as exc:
            failures += 1
            if sql is not None and len(vias) > 1 and failures < len(vias) and should_fail_over(exc):
                log.warning("filter server %s failed (%s); trying another", vias[via_i], exc)
                via_i = (via_i + 1) % len(vias)
                pending[0][2] = ask(lo, hi)
                continue
            raise
        failures = 0
        nxt = pulled.next
        if pulled.status is FOUND:
            missing_since = None
            # a filtered reply may run past this chunk: keep all of [lo, end); covered chunks are dropped below
            batch, count, last = decode(pulled, selector, lo, rng.end)
            if count:
                stats.records += count
                yield batch
                nxt = max(nxt, last + 1)
        elif pulled.status is not OFFSET_ILLEGAL:   # nothing here (yet)
            if nxt <= lo:   # nothing visible at lo although it was below max when planned: flush lag
                missing_since = missing_since or time.monotonic()
                if time.monotonic() - missing_since > MISSING_WAIT_S:
                    raise ClientError(f"{rng.topic}:{rng.broker}:{rng.queue_id} has no message at offset {lo} "
                                      f"although it was planned below {rng.end}")
                time.sleep(0.05)
        else:
            low = pulled.min
            if lo >= low:          # beyond the queue's max: the queue lost its tail
                nxt = hi
                low = hi
            lost = min(low, rng.end) - lo
            if lost > 0:
                msg = (f"{lost} messages of {rng.topic} on {rng.broker} queue {rng.queue_id} (offsets {lo}.."
                       f"{lo + lost - 1}) are gone from the broker (retention moved its min offset to {low})")
                if fail_on_data_loss:
                    raise DataLossError(msg + "; set failOnDataLoss=false to skip them")
                log.warning("%s; skipping them (failOnDataLoss=false)", msg)
                stats.lost += lost
            nxt = max(nxt, low)
        pending.popleft()
        if nxt >= hi:
            # past this chunk: drop later chunks the answer already covered (filters, retention)
            while pending and pending[0][1] <= nxt:
                pending.popleft()
            if pending and pending[0][0] < nxt:
                pending[0] = [nxt, pending[0][1], ask(nxt, pending[0][1])]
            if not pending:
                issued = max(issued, min(nxt, rng.end))
        else:
            pending.appendleft([max(nxt, lo), hi, ask(max(nxt, lo), hi)])
