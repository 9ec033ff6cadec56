"""PullConsumer: subscribe, poll, commit, seek, seek_to_timestamp.

Each assigned queue keeps one long-polling pull in flight; replies are decoded
(one struct format per record) into a local buffer that `poll()` drains. The
tag expression is checked on the broker by hash and again here by string.
Offsets: `poll()` advances the consumed position, `commit()` stores it on the
broker (also every 5 s with auto_commit, and on shutdown).
Consumers of one group share the queues like push consumers (rebalance.py):
heartbeats carry the subscriptions, a NOTIFY_CONSUMER_IDS_CHANGED from a broker
rebalances at once (else every 20 s), and a queue given up is committed first.
SQL92 subscriptions (`MessageSelector.sql(...)`) are checked at subscribe /
start time and pulled through a filter server of each queue's broker
(filter_route.py); offsets are still committed to the broker.
"""

import collections
import logging
import threading
import time

from . import filter_route, tags
from . import requests as rq
from .client import ClientBase, MessageQueue
from .rebalance import Rebalancer
from .codes import RequestCode, ResponseCode
from .errors import ClientError, FieldError, QueryNotFoundError, QuiverError, TopicNotExistError
from .message import MessageExt, MessageSelector, decode_messages

log = logging.getLogger(__name__)

_PULL_OK = (ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY,
            ResponseCode.PULL_OFFSET_MOVED)


class _QueueState:
    __slots__ = ("mq", "addr", "next", "consumed", "committed", "in_flight", "buffered", "paused", "gen", "via")

    def __init__(self, mq, addr, offset):
        self.mq, self.addr = mq, addr
        self.next = offset          # next offset to pull
        self.consumed = offset      # next offset the app has not polled yet
        self.committed = None
        self.in_flight = False
        self.buffered = 0
        self.paused = False
        self.gen = 0                # bumped by seek: replies of older pulls are dropped
        self.via = addr             # where pulls go: the broker, or a filter server (SQL92)


class PullConsumer(ClientBase):
    def __init__(self, group: str, namesrv=None, consume_from="last", pull_batch_size: int = 32,
                 suspend_ms: int = 15_000, auto_commit: bool = True, auto_commit_interval_s: float = 5.0,
                 buffer_per_queue: int = 1000, allocate="averagely", rebalance_interval_s: float = 20.0):
        super().__init__(namesrv)
        self.group = group
        self.consume_from = consume_from
        self.pull_batch_size = pull_batch_size
        self.suspend_ms = suspend_ms
        self.auto_commit = auto_commit
        self.auto_commit_interval_s = auto_commit_interval_s
        self.buffer_per_queue = buffer_per_queue
        self.subscriptions: dict[str, MessageSelector] = {}
        self._queues: dict[MessageQueue, _QueueState] = {}
        self._buffer = collections.deque()
        self._cond = threading.Condition()
        self._timer: threading.Thread | None = None
        self._stop = threading.Event()
        self._filters = filter_route.FilterServers(self.client_id)
        self._stale_routes: set[str] = set()
        self._rebalancer = Rebalancer(self, group, allocate)
        self.rebalance_interval_s = rebalance_interval_s
        self._wake = threading.Event()
        self._rebalance_lock = threading.Lock()
        self._pull_lock = threading.Lock()
        self._missing: dict[str, float] = {}  # topic -> when a name server said TOPIC_NOT_EXIST

    def subscribe(self, topic: str, expression="*") -> None:
        sel = expression if isinstance(expression, MessageSelector) else MessageSelector.tags(expression)
        if sel.type not in ("TAG", "SQL92"):
            raise ClientError(f"unknown selector type {sel.type!r}: use MessageSelector.tags or .sql")
        if self._started:
            filter_route.check_subscription(self, topic, sel, self.group)
        self.subscriptions[topic] = sel
        if self._started:
            self.send_heartbeats()
            self.rebalance()

    def start(self):
        super().start()
        try:
            for topic, sel in self.subscriptions.items():
                filter_route.check_subscription(self, topic, sel, self.group)
        except QuiverError:
            super().shutdown()
            raise
        self._stop.clear()
        self.rebalance()
        self._timer = threading.Thread(target=self._housekeeping, name="pull-consumer-tasks", daemon=True)
        self._timer.start()
        threading.Thread(target=self._rebalance_loop, name="pull-consumer-rebalance", daemon=True).start()
        return self

    def assignment(self) -> list[MessageQueue]:
        return sorted(self._queues)

    # ---- assignment and offsets ---------------------------------------------------

    def heartbeat_payload(self) -> rq.HeartBeat:
        subs = {t: rq.Subscription(type=s.type, expression=s.expression) for t, s in self.subscriptions.items()}
        me = rq.ConsumerData(group=self.group, subscriptions=subs, consume_type="PULL", model="CLUSTERING",
                             consume_from=str(self.consume_from))
        return rq.HeartBeat(client_id=self.client_id, consumers=[me])

    def _on_ids_changed(self, addr, env):
        try:
            group = rq.NotifyConsumerIdsChanged.decode(env.ext).group
        except FieldError as exc:
            log.warning("ignoring a malformed consumer-ids notification from %s: %s", addr, exc)
            return None
        if group in (None, self.group):
            self._wake.set()
        return None

    push_handlers = {RequestCode.NOTIFY_CONSUMER_IDS_CHANGED: _on_ids_changed}

    def _rebalance_loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.rebalance_interval_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.rebalance()
            except QuiverError as exc:
                if self._stop.is_set():
                    return  # shut down meanwhile: its calls fail by design, nothing to report
                log.warning("rebalance of %s failed: %s", self.group, exc)
            except Exception:
                log.exception("rebalance of %s failed", self.group)

    def route(self, topic: str, refresh: bool = False):
        """The route, remembering which subscribed topics a name server says do not exist (poll)."""
        try:
            route = super().route(topic, refresh)
        except TopicNotExistError:
            self._missing[topic] = time.monotonic()
            raise
        self._missing.pop(topic, None)
        return route

    def rebalance(self) -> None:
        """Take this client's share of every subscribed topic's queues; give up the rest."""
        with self._rebalance_lock:
            for topic, mqs in self._rebalancer.assignment(list(self.subscriptions)).items():
                if mqs is None:
                    continue  # unknown right now: keep what we have
                want = set(mqs)
                for mq in [m for m in list(self._queues) if m.topic == topic and m not in want]:
                    self._drop(mq)
                if any(mq not in self._queues for mq in want):
                    route = self.route(topic)
                    for mq in sorted(want - set(self._queues)):
                        addr = self.read_addr(topic, mq.broker, route)  # a slave while the master is down
                        st = _QueueState(mq, addr, self._initial_offset(mq, addr))
                        st.addr = st.via = self.read_addr(topic, mq.broker, route)
                        self._queues[mq] = st
                        self._pull(st)

    def _drop(self, mq: MessageQueue) -> None:
        with self._cond:
            st = self._queues.pop(mq, None)
            if st is None:
                return
            st.gen += 1  # replies of pulls under way are ignored
            st.paused = True
            self._buffer = collections.deque(m for m in self._buffer if m[0] is not st)
        if st.committed != st.consumed:
            try:
                self.call_broker(st.addr, rq.UpdateConsumerOffset(group=self.group, topic=mq.topic,
                                                                  queue_id=mq.queue_id, offset=st.consumed))
            except QuiverError as exc:
                log.warning("commit of released %s failed: %s", mq, exc)
        log.info("released %s at offset %d", mq, st.consumed)

    def _read_offset(self, mq: MessageQueue, req: rq.Schema) -> int:
        """An offset from the master, or a slave while the master is unreachable."""
        return rq.OffsetReply.decode(self.call_read(mq.topic, mq.broker, req).ext).offset

    def _initial_offset(self, mq: MessageQueue, addr: str) -> int:
        try:
            return self._read_offset(mq, rq.QueryConsumerOffset(group=self.group, topic=mq.topic,
                                                                queue_id=mq.queue_id))
        except QueryNotFoundError:
            pass
        if self.consume_from == "first":
            return self._read_offset(mq, rq.GetMinOffset(topic=mq.topic, queue_id=mq.queue_id))
        if isinstance(self.consume_from, int) and not isinstance(self.consume_from, bool):
            return self._read_offset(mq, rq.SearchOffsetByTimestamp(topic=mq.topic, queue_id=mq.queue_id,
                                                                    timestamp=self.consume_from))
        return self._read_offset(mq, rq.GetMaxOffset(topic=mq.topic, queue_id=mq.queue_id))

    def seek(self, mq: MessageQueue, offset: int) -> None:
        st = self._queues.get(mq)
        if st is None:
            raise ClientError(f"{mq} is not assigned to this consumer")
        with self._cond:
            st.gen += 1
            self._buffer = collections.deque(m for m in self._buffer if m[0] is not st)
            st.buffered = 0
            st.next = st.consumed = offset
            st.in_flight = False
        self._pull(st)

    def seek_to_timestamp(self, ts_ms: int) -> None:
        for mq, st in list(self._queues.items()):
            req = rq.SearchOffsetByTimestamp(topic=mq.topic, queue_id=mq.queue_id, timestamp=int(ts_ms))
            self.seek(mq, rq.OffsetReply.decode(self.call_broker(st.addr, req).ext).offset)

    def seek_to_begin(self) -> None:
        for mq, st in list(self._queues.items()):
            req = rq.GetMinOffset(topic=mq.topic, queue_id=mq.queue_id)
            self.seek(mq, rq.OffsetReply.decode(self.call_broker(st.addr, req).ext).offset)

    def committed(self, mq: MessageQueue) -> int | None:
        st = self._queues.get(mq)
        return st.committed if st else None

    def commit(self) -> None:
        """Store the consumed position of every queue on its broker."""
        for st in list(self._queues.values()):
            off = st.consumed
            if st.committed == off:
                continue
            req = rq.UpdateConsumerOffset(group=self.group, topic=st.mq.topic, queue_id=st.mq.queue_id, offset=off)
            try:
                self.call_broker(st.addr, req)
            except ClientError:  # its master is unreachable: the slave keeps it meanwhile
                self.read_failed(st.addr)
                addr = self.read_addr(st.mq.topic, st.mq.broker, wait=False)
                if not addr or addr == st.addr:
                    raise
                self.call_broker(addr, req)
            st.committed = off

    # ---- pulling (IO-thread callbacks) --------------------------------------------------

    def _pull(self, st: _QueueState) -> None:
        # IO thread, housekeeping and poll() all start pulls: claiming the queue's one pull
        # is atomic, or two pulls at the same offset would deliver its messages twice
        with self._pull_lock:
            if not self._started or st.in_flight or st.paused:
                return
            if st.buffered >= self.buffer_per_queue:
                st.paused = True
                return
            st.in_flight = True
        sel = self.subscriptions.get(st.mq.topic)
        sql = filter_route.is_sql(sel)
        if sql:
            cached = self._routes.get(st.mq.topic)  # never block here: this may run on the IO thread
            try:
                if cached is None:
                    raise filter_route.NoFilterServerError(f"no route for {st.mq.topic} yet")
                st.via = self._filters.pull_address(cached[1], st.mq, sel)
            except QuiverError as exc:
                self._filters.log_unavailable(exc)
                self._stale_routes.add(st.mq.topic)
                st.in_flight = False  # housekeeping retries after refreshing the route
                return
        else:
            addr = self.read_addr(st.mq.topic, st.mq.broker, wait=False) or st.addr
            if addr != st.addr:  # master down (or back): reads and commits follow
                log.info("%s: reading from %s instead of %s", st.mq, addr, st.addr)
                st.addr, st.committed = addr, None
            st.via = st.addr
        gen = st.gen
        via = st.via
        # SQL92: `broker_addr` names the broker meant (a filter server attached elsewhere refuses)
        req = rq.PullMessage(group=self.group, topic=st.mq.topic, queue_id=st.mq.queue_id, offset=st.next,
                             max_msgs=self.pull_batch_size, suspend_ms=self.suspend_ms,
                             expression=(sel.expression if sel else None) or "*",
                             expression_type="SQL92" if sql else None, broker_addr=st.addr if sql else None)
        try:
            self.transport.send(via, req, None, (), lambda r: self._pulled(st, gen, r, via),
                                timeout=self.suspend_ms / 1000 + 15)
        except QuiverError:
            st.in_flight = False

    def _pulled(self, st: _QueueState, gen: int, env, via: str | None = None) -> None:
        if gen != st.gen:
            return
        if isinstance(env, Exception) or env.code not in _PULL_OK:
            st.in_flight = False
            if not self._started:
                return
            if via != st.addr and filter_route.should_fail_over(env):
                self._filters.failed(via)  # a dead filter server: the next pull goes to another one
                self._pull(st)
                return
            if via == st.addr and isinstance(env, ClientError):  # broker unreachable: its slave next
                self.read_failed(via)
                threading.Timer(0.2, self._pull, (st,)).start()
                return
            log.warning("pull %s failed: %s", st.mq, env if isinstance(env, Exception) else env.remark)
            threading.Timer(1.0, self._pull, (st,)).start()
            return
        try:
            nxt = rq.PullReply.decode(env.ext).next
        except FieldError as exc:  # a garbled answer: ask again later rather than move anywhere
            log.warning("pull %s: %s", st.mq, exc)
            st.in_flight = False
            threading.Timer(1.0, self._pull, (st,)).start()
            return
        if env.code == ResponseCode.SUCCESS and env.bodies:
            sel = self.subscriptions.get(st.mq.topic)
            wanted = tags.parse(sel.expression) if sel is not None and sel.type == "TAG" else None
            broker = st.mq.broker
            msgs = decode_messages(env.bodies[0], broker)
            if wanted is not None:
                msgs = [m for m in msgs if m.tags in wanted]
            with self._cond:
                if gen != st.gen:
                    return  # seek or drop reset the queue, in_flight included
                st.next = nxt
                if msgs:
                    self._buffer.append((st, msgs, nxt))
                    st.buffered += len(msgs)
                    self._cond.notify_all()
                elif st.consumed < nxt and st.buffered == 0:
                    st.consumed = nxt  # all filtered out: still consumed
        elif env.code == ResponseCode.PULL_OFFSET_MOVED:
            log.info("offset of %s moved from %d to %d", st.mq, st.next, nxt)
            with self._cond:
                st.next = nxt
                if st.buffered == 0:
                    st.consumed = nxt
        else:  # NO_NEW_MSG or NO_MATCHED_MSG: nothing to hand over, position still moves
            with self._cond:
                st.next = nxt
                if st.buffered == 0 and st.consumed < nxt:
                    st.consumed = nxt
        st.in_flight = False  # only now: st.next has moved, so the next pull starts past this batch
        self._pull(st)

    # ---- app side ---------------------------------------------------------------------

    def poll(self, timeout: float = 1.0, max_messages: int | None = None) -> list[MessageExt]:
        """Messages pulled so far (waits up to timeout for the first).

        A subscribed topic that a name server answered TOPIC_NOT_EXIST for (at
        start, subscribe or a rebalance; not merely unreachable name servers) is
        reported by raising TopicNotExistError naming it, where RocketMQ's client
        only logs "topic route not exist" and returns nothing forever. It is
        raised only when there is nothing to return: at once if no subscribed
        topic exists, else after the wait. Once the topic is created, the next
        rebalance (asked for by the raise, at most once a second) clears it."""
        self._need_started()
        out: list[MessageExt] = []
        resume = []
        with self._cond:
            if not self._buffer:
                if not self._missing_topics(every=True):
                    self._cond.wait(timeout)
            while self._buffer and (max_messages is None or len(out) < max_messages):
                st, msgs, nxt = self._buffer[0]
                room = len(msgs) if max_messages is None else max_messages - len(out)
                take = msgs[:room]
                out.extend(take)
                st.buffered -= len(take)
                if len(take) == len(msgs):
                    self._buffer.popleft()
                    st.consumed = nxt
                else:
                    self._buffer[0] = (st, msgs[room:], nxt)
                    st.consumed = take[-1].queue_offset + 1
                if st.paused and st.buffered < self.buffer_per_queue // 2:
                    st.paused = False
                    resume.append(st)
        for st in resume:
            self._pull(st)
        if not out:
            missing = self._missing_topics()
            if missing:
                raise TopicNotExistError(f"topic {', '.join(map(repr, missing))} does not exist (the name server "
                                         "has no route): create it, or fix the subscription")
        return out

    def _missing_topics(self, every: bool = False) -> list[str]:
        """Subscribed topics known not to exist (all of them, or none, with `every`)."""
        known = dict(self._missing)  # a copy: the rebalance thread updates it
        missing = sorted(t for t in known if t in self.subscriptions)
        if every and len(missing) < len(self.subscriptions):
            return []
        if missing and time.monotonic() - min(known[t] for t in missing) >= 1.0:
            self._wake.set()  # look again: the topic may have been created meanwhile
        return missing

    def _housekeeping(self) -> None:
        last_commit = time.monotonic()
        while not self._stop.wait(0.5):
            for topic, sel in list(self.subscriptions.items()):  # new filter servers show up in routes
                cached = self._routes.get(topic)
                if filter_route.is_sql(sel) and (cached is None or time.monotonic() - cached[0] > self.route_refresh_s):
                    self._stale_routes.add(topic)
            for topic in list(self._stale_routes):
                self._stale_routes.discard(topic)
                try:
                    self.route(topic, refresh=True)
                except QuiverError as exc:
                    log.warning("route refresh for %s failed: %s", topic, exc)
            if self.auto_commit and time.monotonic() - last_commit >= self.auto_commit_interval_s:
                last_commit = time.monotonic()
                try:
                    self.commit()
                except QuiverError as exc:
                    log.warning("auto commit failed: %s", exc)
            for st in list(self._queues.values()):
                if not st.in_flight and not st.paused:
                    self._pull(st)

    def shutdown(self) -> None:
        if not self._started:
            return
        self._stop.set()
        self._wake.set()
        if self.auto_commit:
            try:
                self.commit()
            except QuiverError as exc:
                log.warning("final commit failed: %s", exc)
        super().shutdown()
