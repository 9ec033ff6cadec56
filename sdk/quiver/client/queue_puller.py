"""The one pull engine: a PULL_MESSAGE request, where it goes, and what its answer means.

Every reader of a queue builds its pull and reads the answer here, so the
request shape, the answer codes and the decode exist once:

    req = request(topic, queue_id, offset, group=..., max_msgs=..., suspend_ms=..., selector=...)
    pulled = read(envelope)                  # or fetch(client, addr, req): the same, blocking
    pulled.status, pulled.next, pulled.min, pulled.max
    pulled.messages(broker, selector)        # MessageExt, one pass (record.decode_fields)
    pulled.records(selector)                 # record.Record (scheduler, range reader)
    pulled.body                              # the raw reply bytes (filter server scanning)

`read` raises, never returns a half answer: the transport's exception, the
error the server meant (`errors.error_for`) for a refusal, `FieldError` for a
garbled position. A reply's status is RocketMQ's PullStatus: FOUND (records
in the body), NO_NEW_MSG, NO_MATCHED_MSG (nothing to hand over, the position
still moves) and OFFSET_ILLEGAL (the offset moved: `next` is where to go).

`QueuePuller` is the consumers' asynchronous cycle around it (PullConsumer and
PushConsumer): one pull per call, sent on the transport's IO thread to the
queue's target, answered once through `done(pulled, retry_in_s)` (whatever
goes wrong reading the answer is a failed pull: the consumer pulls again), and
`decode(q, pulled, ...)`, its `Readable` messages. A body that does not decode
in one pass is decoded record by record (`salvage`): what cannot be read is
skipped and reported (`BadRecords`: a log line naming topic, queue and offset,
a count, the consumer's `on_bad_record`), everything else is delivered, and
when the rest of a body cannot even be walked the consumer pulls it again one
record at a time, so one bad record never stops a queue. The target
is the queue's broker for a tag subscription - its master, or while the
master's reads fail its lowest-id slave (`ClientBase._read_addr`); an
unreachable broker is marked (`read_failed`) and the next pull goes to the
slave - or, for SQL92, the nearest filter server (one of that broker's own,
else any live one of its cluster, the pull naming the broker: filter_route.py),
failing over to another one when it is unusable and back when it returns.

Does not own: what a reader does with the records (caching, offsets, flow
control, re-puts), the record layout (record.py), which queues a consumer
owns (rebalance.py), nor filter-server choice itself (filter_route.py).
"""

import dataclasses
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from quiver.wire import record
from quiver.wire import tags
from quiver.wire import requests as rq
from quiver.wire.codes import ResponseCode
from quiver.wire.properties import TAGS
from quiver.wire.property_string import get_property
from quiver.errors import ClientError, QuiverError, error_for
from quiver.client.filter_route import FilterServers, NoFilterServerError, is_sql, should_fail_over
from quiver.client.message import MessageExt, PullStatus, decode_messages

log = logging.getLogger(__name__)

FOUND, NO_NEW_MSG, NO_MATCHED_MSG, OFFSET_ILLEGAL = (PullStatus.FOUND, PullStatus.NO_NEW_MSG,
                                                     PullStatus.NO_MATCHED_MSG, PullStatus.OFFSET_ILLEGAL)
# the answers that carry a queue position (rq.PullReply); any other code is a refusal
_STATUS = {ResponseCode.SUCCESS: FOUND, ResponseCode.PULL_NOT_FOUND: NO_NEW_MSG,
           ResponseCode.PULL_RETRY_IMMEDIATELY: NO_MATCHED_MSG, ResponseCode.PULL_OFFSET_MOVED: OFFSET_ILLEGAL}
ANSWERS = frozenset(_STATUS)

READ_FAILED_RETRY_S = 0.2    # broker unreachable: its slave (or itself) again this soon
NO_FILTER_RETRY_S = 1.0      # no live filter server for a SQL92 queue: after a route refresh
REPLY_GRACE_S = 15.0         # a held pull's timeout: its suspend time plus this
_MAX_BYTES = next(f.default for f in dataclasses.fields(rq.PullMessage) if f.name == "max_bytes")  # the schema's


# ---- request and answer ----------------------------------------------------------------

def request(topic: str, queue_id: int, offset: int, *, max_msgs: int = 32, group: str | None = None,
            suspend_ms: int = 0, selector=None, commit_offset: int | None = None,
            broker_addr: str | None = None, max_bytes: int | None = None) -> rq.PullMessage:
    """The PULL_MESSAGE of `max_msgs` records of a queue from `offset`.

    `selector`: None (every record), a tag expression, or a MessageSelector; a
    SQL92 one is only served by a filter server, `broker_addr` naming the broker
    meant. `commit_offset` piggy-backs the group's consumed position."""
    if selector is None:
        expression = expression_type = None
    elif isinstance(selector, str):
        expression, expression_type = selector or "*", None
    else:
        expression = selector.expression or "*"
        expression_type = "SQL92" if is_sql(selector) else None
    return rq.PullMessage(topic=topic, queue_id=queue_id, offset=offset, group=group, commit_offset=commit_offset,
                          max_msgs=max_msgs, suspend_ms=suspend_ms, expression=expression,
                          expression_type=expression_type, broker_addr=broker_addr,
                          max_bytes=_MAX_BYTES if max_bytes is None else max_bytes)


def wanted_tags(selector) -> frozenset[str] | None:
    """The tags a selector keeps (checked here by string; the broker checked their hashes), None for all."""
    if selector is None:
        return None
    if isinstance(selector, str):
        return tags.parse(selector)
    return tags.parse(selector.expression) if selector.type == "TAG" else None


class Pulled:
    """One pull answer: its status, where the next pull starts, the queue's bounds, the records."""

    __slots__ = ("status", "next", "min", "max", "body")

    def __init__(self, status: PullStatus, next_offset: int, min_offset: int, max_offset: int, body=None):
        self.status, self.next, self.min, self.max, self.body = status, next_offset, min_offset, max_offset, body

    def __repr__(self) -> str:
        size = len(self.body) if self.body is not None else 0
        return f"Pulled({self.status.name}, next={self.next}, min={self.min}, max={self.max}, {size} bytes)"

    def messages(self, broker: str, selector=None) -> list:
        """The records as MessageExt of `broker`, those of other tags left out."""
        if self.body is None:
            return []
        msgs = decode_messages(self.body, broker)
        wanted = wanted_tags(selector)
        return msgs if wanted is None else [m for m in msgs if m.tags in wanted]

    def records(self, selector=None) -> list:
        """The records as record.Record, those of other tags left out."""
        if self.body is None:
            return []
        recs = record.decode_many(self.body)
        wanted = wanted_tags(selector)
        return recs if wanted is None else [r for r in recs if get_property(r.props, TAGS) in wanted]


def read(env) -> Pulled:
    """The answer to a pull (an envelope, or the exception the transport gave instead).

    Raises that exception, the server's error for a refusal, or FieldError for a
    garbled position (read as 0 it would rewind a consumer to the queue's start)."""
    if isinstance(env, BaseException):
        raise env
    status = _STATUS.get(env.code)
    if status is None:
        raise error_for(env.code, env.remark or "")
    pos = rq.PullReply.decode(env.ext)
    body = None
    if status is FOUND:
        if env.bodies:
            body = env.bodies[0]
        else:
            status = NO_MATCHED_MSG   # nothing to hand over; the position still moves
    return Pulled(status, pos.next, pos.min, pos.max, body)


def fetch(client, addr: str, req: rq.PullMessage, timeout: float | None = None) -> Pulled:
    """A blocking pull through `client.call_broker` (a BrokerAccess: txn-checker, admin)."""
    return read(client.call_broker(addr, req, timeout=timeout, ok=ANSWERS))


# ---- what a consumer can read of an answer -----------------------------------------------

@dataclass(slots=True)
class Readable:
    """The messages of a FOUND answer a consumer can use. `next`: where its next pull starts
    (the answer's, or the first offset not reached when the rest of the body could not be
    walked); below `narrow_until` it pulls one record at a time (0: no need)."""
    msgs: list
    next: int
    narrow_until: int = 0


def salvage(body, broker: str, start: int, nxt: int, single: bool = False):
    """Decode a pull body record by record: (messages, [(queue offset, reason)] of the records
    that cannot be decoded, the offset to pull again from or None).

    `start` is the pull's offset and `nxt` the answer's next: the records lie in [start, nxt).
    A record whose head checks (record.check_head) but whose fields do not (record.decode_at
    with its body CRC) is skipped at the queue offset it names, or at the first one it can have
    when that is out of range. A head that does not check hides where the records behind it
    start: the walk stops, and the returned offset (just past the last record read) is pulled
    again one record at a time; the one record of such a `single` pull is at `nxt - 1`."""
    msgs: list[MessageExt] = []
    bad: list[tuple[int, str]] = []
    last = start - 1           # queue offset of the last record read or skipped
    pos, end = 0, len(body)
    while pos < end:
        try:
            size, blank = record.check_head(body, pos)
        except record.BadRecord as exc:
            if single and not msgs and not bad:
                bad.append((nxt - 1, str(exc)))
                return msgs, bad, None
            return msgs, bad, last + 1
        if not blank:
            try:
                m = MessageExt.from_record(record.decode_at(body, pos, check_crc=True), broker)
            except Exception as exc:   # whatever a garbled record makes the decoder raise
                qoff = nxt - 1 if single else record.queue_offset_at(body, pos)
                last = qoff if last < qoff < nxt else last + 1
                bad.append((last, str(exc)))
            else:
                last = m.queue_offset if last < m.queue_offset < nxt else last + 1
                msgs.append(m)
        pos += size
    return msgs, bad, None


class BadRecords:
    """Records a consumer could not decode and skipped: each logged naming topic, queue and
    offset, counted (`count`), and handed to `callback(topic, queue_id, offset, reason)` (the
    consumer's on_bad_record) when there is one; what the callback raises is logged."""

    def __init__(self, callback: Callable[[str, int, int, str], object] | None = None) -> None:
        self.callback = callback
        self.count = 0
        self._lock = threading.Lock()

    def report(self, mq, offset: int, reason: str) -> None:
        with self._lock:
            self.count += 1
        log.error("undecodable record skipped: %s queue %d offset %d on %s: %s", mq.topic, mq.queue_id, offset,
                  mq.broker, reason)
        if self.callback is not None:
            try:
                self.callback(mq.topic, mq.queue_id, offset, reason)
            except Exception:
                log.exception("on_bad_record callback failed for %s offset %d", mq, offset)


# ---- the consumers' asynchronous pulls ----------------------------------------------------

class QueuePuller:
    """A consumer's pulls: target choice, the request, failover, the decoded answer.

    `client` is the consumer (a started ClientBase: transport, cached routes,
    read_addr / read_failed / route); `options` its ConsumerOptions;
    `call_later(delay_s, fn, *args)` its timer thread, where route refreshes run
    (never on the IO thread). A queue `q` is any object with `.mq` and `.addr`
    (the broker address its reads and commits go to, moved here when the master
    goes down or comes back)."""

    def __init__(self, client, group: str, options, call_later, bad_records: BadRecords | None = None):
        self.client, self.group, self.call_later = client, group, call_later
        self.max_msgs = options.pull_batch_size
        self.suspend_ms = options.suspend_ms
        self.error_delay_s = options.pull_delay_on_error_ms / 1000
        self.bad_records = bad_records if bad_records is not None else BadRecords()
        self.filters = FilterServers(client.client_id)
        self._refreshing: set[str] = set()
        self._lock = threading.Lock()

    def pull(self, q, offset: int, selector, done, commit_offset: int | None = None, single: bool = False,
             suspend_ms: int | None = None) -> None:
        """Pull `q` from `offset` (`single`: one record; `suspend_ms`: how long the broker may hold
        it, the consumer's setting by default). `done(pulled, retry_in_s)` runs once (on the IO
        thread, or here when nothing could be sent): a Pulled and 0, or None and how long to
        wait before pulling this queue again."""
        prepared = self.prepare(q, offset, selector, commit_offset, single, suspend_ms)
        if prepared is None:
            done(None, NO_FILTER_RETRY_S)
            return
        via, sql, req = prepared
        try:
            self.client.transport.send(via, req, None, (), lambda env: done(*self.answer(q, via, sql, env)),
                                       timeout=req.suspend_ms / 1000 + REPLY_GRACE_S)
        except QuiverError:   # shut down meanwhile
            done(None, self.error_delay_s)

    def prepare(self, q, offset: int, selector, commit_offset: int | None = None, single: bool = False,
                suspend_ms: int | None = None) -> tuple[str, bool, rq.PullMessage] | None:
        """(where to send it, whether through a filter server, the request) of a pull as `pull`
        makes it, for a caller sending it on a socket of its own; None when no filter server
        can take a SQL92 pull now (try again in NO_FILTER_RETRY_S)."""
        sql = is_sql(selector)
        via = self._filter_server(q, selector) if sql else self._broker(q)
        if via is None:
            return None
        req = request(q.mq.topic, q.mq.queue_id, offset, group=self.group, max_msgs=1 if single else self.max_msgs,
                      suspend_ms=self.suspend_ms if suspend_ms is None else suspend_ms, selector=selector,
                      commit_offset=commit_offset, broker_addr=q.addr if sql else None)
        return via, sql, req

    def answer(self, q, via: str, sql: bool, env) -> tuple[Pulled | None, float]:
        """What the answer `env` (or the exception in its place) to a pull `prepare` made means:
        (a Pulled, 0) or (None, how long to wait before pulling again)."""
        try:
            return read(env), 0.0
        except QuiverError as exc:
            return None, self._failed(q, via, sql, exc)
        except Exception:   # an answer nobody foresaw is a failed pull: the queue is pulled again
            log.exception("answer to a pull of %s from %s unreadable", q.mq, via)
            return None, self.error_delay_s

    def decode(self, q, pulled: Pulled, selector, offset: int, single: bool = False) -> Readable:
        """The messages of a FOUND answer to a pull of `q` from `offset` (`single`: of one record),
        those of other tags left out. What cannot be decoded is skipped and reported."""
        try:
            return Readable(pulled.messages(q.mq.broker, selector), pulled.next)
        except Exception as exc:   # record.BadRecord, or whatever else a garbled body raises
            log.warning("pull of %s from offset %d: body does not decode (%s), reading it record by record",
                        q.mq, offset, exc)
        msgs, bad, again = salvage(pulled.body, q.mq.broker, offset, pulled.next, single)
        for qoff, reason in bad:
            self.bad_records.report(q.mq, qoff, reason)
        wanted = wanted_tags(selector)
        if wanted is not None:
            msgs = [m for m in msgs if m.tags in wanted]
        if again is None or again >= pulled.next:
            return Readable(msgs, pulled.next)
        log.warning("%s: records from offset %d on cannot be located in the answer: pulling them one at a time "
                    "up to %d", q.mq, again, pulled.next)
        return Readable(msgs, again, pulled.next)

    def _failed(self, q, via: str, sql: bool, exc: QuiverError) -> float:
        """How long to wait after a failed pull, having chosen where the next one goes."""
        if sql and should_fail_over(exc):
            self.filters.failed(via)   # a dead filter server: the next pull goes to another one, now
            return 0.0
        if not sql and isinstance(exc, ClientError):
            self.client.read_failed(via)   # broker unreachable: its slave next
            return READ_FAILED_RETRY_S
        log.warning("pull %s from %s failed: %s", q.mq, via, exc)
        return self.error_delay_s

    # ---- targets ------------------------------------------------------------------------

    def _broker(self, q) -> str:
        addr = self.client.read_addr(q.mq.topic, q.mq.broker, wait=False) or q.addr
        if addr != q.addr:   # master down (or back): reads and commits follow
            log.info("%s: reading from %s instead of %s", q.mq, addr, q.addr)
            q.addr = addr
        return addr

    def _filter_server(self, q, selector) -> str | None:
        route = self.client.cached_route(q.mq.topic)   # the cache only: this may run on the IO thread
        try:
            if route is None:
                raise NoFilterServerError(f"no route for {q.mq.topic} yet")
            return self.filters.pull_address(route, q.mq, selector)
        except QuiverError as exc:
            self.filters.log_unavailable(exc)
            self._refresh_route(q.mq.topic)
            return None

    def _refresh_route(self, topic: str) -> None:
        """A new route (new filter servers) on the timer thread, once per topic at a time."""
        with self._lock:
            if topic in self._refreshing:
                return
            self._refreshing.add(topic)
        self.call_later(0.0, self._refresh, topic)

    def _refresh(self, topic: str) -> None:
        try:
            self.client.route(topic, refresh=True)
        except QuiverError as exc:
            log.warning("route refresh for %s failed: %s", topic, exc)
        finally:
            with self._lock:
                self._refreshing.discard(topic)
