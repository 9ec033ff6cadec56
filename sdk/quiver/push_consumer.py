"""PushConsumer: a group shares queues; a listener gets messages as they arrive.

Each owned queue has a ProcessQueue with one long-polling pull in flight (IO
thread callbacks, no thread per queue). Pulled messages are cached per queue
and handed to a consume thread pool. The committed offset of a queue is its
lowest unfinished message (or the pull position when nothing is cached), kept
in memory, piggy-backed on pulls, persisted every 5 s, on drop and on shutdown.

Concurrent mode: failures go back to the broker (CONSUMER_SEND_MSG_BACK) and
return through `%RETRY%<group>`, which the consumer subscribes to by itself.
Orderly mode: queues are locked on the broker (LOCK_BATCH_MQ), one thread per
queue, a failing batch is retried in place after a suspend, and past the max
reconsume times it goes to the dead-letter topic. Broadcasting: every client
takes every queue, offsets in a local JSON file, failures are dropped.

Owns membership, pulling and flow control; the per-queue cache is
process_queue.py, listener calls and orderly locking consume_service.py,
allocation rebalance.py, offset persistence offset_store.py.
"""

import logging
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from . import filter_route, tags
from . import requests as rq
from .client import ClientBase, MessageQueue
from .consume_service import ConsumeService
from .codes import RequestCode, ResponseCode
from .errors import ClientError, FieldError, QuiverError, TopicNotExistError
from .message import RETRY_TOPIC, MessageExt, MessageSelector, decode_messages
from .offset_store import LocalFileOffsetStore, RemoteOffsetStore
from .process_queue import DelayedCalls, ProcessQueue
from .rebalance import Rebalancer
from .validation import RETRY_PREFIX, check_group

log = logging.getLogger(__name__)

_PULL_OK = (ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY,
            ResponseCode.PULL_OFFSET_MOVED)


class PushConsumer(ConsumeService, ClientBase):
    def __init__(self, group: str, namesrv=None, broadcast: bool = False, consume_from="last",
                 max_reconsume_times: int = 16, threads: int = 20, batch_size: int = 1, *,
                 allocate="averagely", pull_batch_size: int = 32, suspend_ms: int = 15_000,
                 offset_dir: str | None = None, instance_name: str = "DEFAULT",
                 suspend_current_queue_ms: int = 1000, persist_interval_s: float = 5.0,
                 rebalance_interval_s: float = 20.0, heartbeat_interval_s: float = 30.0,
                 lock_interval_s: float = 20.0, pull_threshold_for_queue: int = 1000,
                 pull_threshold_bytes_for_queue: int = 100 << 20, max_span: int = 2000,
                 pull_delay_on_error_s: float = 3.0):
        super().__init__(namesrv)
        check_group(group)
        if consume_from not in ("last", "first") and not (isinstance(consume_from, int)
                                                         and not isinstance(consume_from, bool)
                                                         and 0 <= consume_from <= rq.MAX_OFFSET):
            raise ValueError("consume_from is 'last', 'first' or an epoch-ms timestamp")
        if not 1 <= threads <= 1000 or not 1 <= batch_size <= 1024 or not 1 <= pull_batch_size <= 1024:
            raise ValueError("threads 1-1000, batch_size 1-1024, pull_batch_size 1-1024")
        self.group = group
        self.broadcast = broadcast
        self.consume_from = consume_from
        self.max_reconsume_times = max_reconsume_times
        self.threads = threads
        self._cost_per_msg_s = 0.0  # measured listener cost: decides how a pulled batch is split
        self.batch_size = batch_size
        self.pull_batch_size = pull_batch_size
        self.suspend_ms = suspend_ms
        self.suspend_current_queue_s = suspend_current_queue_ms / 1000
        self.persist_interval_s = persist_interval_s
        self.rebalance_interval_s = rebalance_interval_s
        self.heartbeat_interval_s = heartbeat_interval_s
        self.lock_interval_s = lock_interval_s
        self.pull_threshold_for_queue = pull_threshold_for_queue
        self.pull_threshold_bytes_for_queue = pull_threshold_bytes_for_queue
        self.max_span = max_span
        self.pull_delay_on_error_s = pull_delay_on_error_s
        self.retry_topic = f"{RETRY_PREFIX}{group}"
        self.subscriptions: dict[str, MessageSelector] = {}
        self._listener = None
        self._orderly = False
        self._pqs: dict[MessageQueue, ProcessQueue] = {}
        self._rebalancer = Rebalancer(self, group, allocate, broadcast)
        self.offsets = (LocalFileOffsetStore(offset_dir, f"{self.client_host}@{instance_name}", group)
                        if broadcast else RemoteOffsetStore(self, group))
        self._running = False
        self._wake = threading.Event()
        self._rebalance_lock = threading.Lock()
        self._notified_at: float | None = None
        self._active = 0
        self._active_cond = threading.Condition()
        self._drop_threads: list[threading.Thread] = []
        self.rebalance_latencies_ms: list[float] = []  # notification -> new owner's first pull
        self._filter_servers = filter_route.FilterServers(self.client_id)  # SQL92 pull routing (issue 6)

    client_host = socket.gethostname()

    # ---- public API -----------------------------------------------------------------------

    def subscribe(self, topic: str, expression="*") -> None:
        sel = expression if isinstance(expression, MessageSelector) else MessageSelector.tags(expression)
        if sel.type not in ("TAG", "SQL92"):
            raise ClientError(f"unknown selector type {sel.type!r}: use MessageSelector.tags or .sql")
        if self._running:
            filter_route.check_subscription(self, topic, sel, self.group)  # SQL92: raises SubscriptionParseError
        self.subscriptions[topic] = sel
        if self._running:
            self.send_heartbeats()
            self._wake.set()

    def register(self, fn, orderly: bool = False) -> None:
        """fn(msgs: list[MessageExt]) -> ConsumeResult; raising counts as RECONSUME_LATER."""
        if self._running:
            raise ClientError("register the listener before start()")
        self._listener = fn
        self._orderly = orderly

    def start(self):
        if self._running:
            return self
        if self._listener is None:
            raise ClientError("no listener: call register(fn) before start()")
        if not self.subscriptions:
            raise ClientError("no subscription: call subscribe(topic, expression) before start()")
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix=f"consume-{self.group}")
        self._timer = DelayedCalls(f"push-consumer-{self.group}")
        self._running = True
        super().start()
        try:  # SQL92 subscriptions are compiled by a filter server before any message flows
            for topic, sel in list(self.subscriptions.items()):
                filter_route.check_subscription(self, topic, sel, self.group)
        except QuiverError:
            self.shutdown()
            raise
        if not self.broadcast:
            self._ensure_retry_topic()
        self.rebalance()
        self._rb_thread = threading.Thread(target=self._rebalance_loop, name="rebalance", daemon=True)
        self._rb_thread.start()
        self._timer.every(self.persist_interval_s, self.persist_offsets)
        if self._orderly and not self.broadcast:
            self._timer.every(self.lock_interval_s, self._lock_all)
        return self

    def __enter__(self):
        # `with PushConsumer(...) as c: c.subscribe(...); c.register(fn); c.start()` works too
        if self._listener is not None and self.subscriptions:
            return self.start()
        return self

    def assignment(self, include_retry: bool = False) -> list[MessageQueue]:
        return sorted(mq for mq in list(self._pqs) if include_retry or mq.topic != self.retry_topic)

    def shutdown(self) -> None:
        if not self._running:
            return
        self._running = False
        self._wake.set()
        self._pool.shutdown(wait=False, cancel_futures=True)
        with self._active_cond:  # let running listener calls finish and commit
            self._active_cond.wait_for(lambda: self._active == 0, timeout=5.0)
        with self._rebalance_lock:
            for mq in list(self._pqs):
                self._drop(mq)
        for t in self._drop_threads:
            t.join(5.0)
        self.persist_offsets(sync=True)
        self._timer.stop()
        super().shutdown()

    # ---- heartbeats, notifications, shutdown words ---------------------------------------------

    def _topics(self) -> list[str]:
        topics = list(self.subscriptions)
        if not self.broadcast:
            topics.append(self.retry_topic)
        return topics

    def heartbeat_payload(self) -> rq.HeartBeat:
        subs = {t: rq.Subscription(type=s.type, expression=s.expression) for t, s in self.subscriptions.items()}
        if not self.broadcast:
            subs[self.retry_topic] = rq.Subscription(type="TAG", expression="*")
        me = rq.ConsumerData(group=self.group, subscriptions=subs, consume_type="PUSH",
                             model="BROADCASTING" if self.broadcast else "CLUSTERING",
                             consume_from=str(self.consume_from), orderly=self._orderly,
                             queues=[(mq.topic, mq.broker, mq.queue_id) for mq in list(self._pqs)])
        return rq.HeartBeat(client_id=self.client_id, consumers=[me])

    def _on_ids_changed(self, addr, env):
        try:
            group = rq.NotifyConsumerIdsChanged.decode(env.ext).group
        except FieldError as exc:
            log.warning("ignoring a malformed consumer-ids notification from %s: %s", addr, exc)
            return None
        if group in (None, self.group):
            if self._notified_at is None:
                self._notified_at = time.monotonic()
            self._wake.set()
        return None

    push_handlers = {RequestCode.NOTIFY_CONSUMER_IDS_CHANGED: _on_ids_changed}

    def _ensure_retry_topic(self) -> None:
        """The group's retry topic (1 queue) on every broker, as RocketMQ creates it on heartbeat."""
        try:
            self.route(self.retry_topic, refresh=True)
            return
        except TopicNotExistError:
            pass
        except QuiverError as exc:
            log.warning("retry topic route: %s", exc)
            return
        for name, addr in self.all_broker_addrs().items():
            try:
                self.call_broker(addr, rq.CreateTopic(topic=self.retry_topic, read=1, write=1))
            except QuiverError as exc:
                log.warning("creating %s on %s failed: %s", self.retry_topic, name, exc)
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            try:
                self.route(self.retry_topic, refresh=True)
                return
            except QuiverError:
                time.sleep(0.05)

    # ---- rebalance ------------------------------------------------------------------------------

    def _rebalance_loop(self) -> None:
        while self._running:
            self._wake.wait(self.rebalance_interval_s)
            self._wake.clear()
            if not self._running:
                return
            try:
                self.rebalance()
            except Exception:
                log.exception("rebalance of %s failed", self.group)

    def rebalance(self) -> None:
        with self._rebalance_lock:
            if not self._running:
                return
            t0, self._notified_at = self._notified_at, None
            changed, missing = False, False
            for topic, mqs in self._rebalancer.assignment(self._topics()).items():
                if mqs is None:
                    continue  # unknown right now: keep what we have
                want = set(mqs)
                for mq in [m for m in list(self._pqs) if m.topic == topic and m not in want]:
                    self._drop(mq)
                    changed = True
                for mq in sorted(want - set(self._pqs)):
                    if self._add(mq, t0):
                        changed = True
                    else:
                        missing = True
            if changed:
                log.info("%s now owns %s", self.client_id, [f"{m.topic}:{m.broker}:{m.queue_id}" for m in self.assignment()])
                self.send_heartbeats()  # brokers learn the owners (consumer progress)
            if missing:
                self._timer.call_later(1.0, self._wake.set)  # a lock still held elsewhere

    def _add(self, mq: MessageQueue, t0: float | None) -> bool:
        try:
            for attempt in range(2):  # the master, then (if it is unreachable) a slave
                addr = self.read_addr(mq.topic, mq.broker)
                try:
                    if self._orderly and not self.broadcast and not self._lock_mqs(addr, [mq]):
                        return False
                    off = self.offsets.read(mq, addr)
                    if off is None:
                        off = self._start_offset(mq, addr)
                    break
                except ClientError:
                    self.read_failed(addr)
                    if attempt:
                        raise
        except (QuiverError, KeyError) as exc:
            log.warning("cannot take %s: %s", mq, exc)
            return False
        pq = ProcessQueue(mq, addr, off)
        pq.locked, pq.lock_ts = True, time.monotonic()
        pq.rebalance_t0 = t0
        self.offsets.update(mq, off, increase_only=False)
        self._pqs[mq] = pq
        self._pull(pq)
        return True

    def _start_offset(self, mq: MessageQueue, addr: str) -> int:
        """consume_from, for a queue this group never stored an offset for."""
        retry = mq.topic.startswith(RETRY_PREFIX)
        if self.consume_from == "first" or (retry and self.consume_from == "last"):
            req = rq.GetMinOffset(topic=mq.topic, queue_id=mq.queue_id)
        elif self.consume_from == "last" or retry:
            req = rq.GetMaxOffset(topic=mq.topic, queue_id=mq.queue_id)
        else:
            req = rq.SearchOffsetByTimestamp(topic=mq.topic, queue_id=mq.queue_id, timestamp=self.consume_from)
        return rq.OffsetReply.decode(self.call_broker(addr, req).ext).offset

    def _drop(self, mq: MessageQueue) -> None:
        """Stop consuming a queue and store its offset before anyone else may take it."""
        pq = self._pqs.pop(mq, None)
        if pq is None:
            return
        pq.dropped = True
        if self._orderly and not self.broadcast:
            # the broker lock is released only after the running batch finished and the offset is stored
            t = threading.Thread(target=self._finish_orderly_drop, args=(pq,), name="drop", daemon=True)
            self._drop_threads = [x for x in self._drop_threads if x.is_alive()] + [t]
            t.start()
            return
        self.offsets.update(mq, pq.commit_offset())
        self._persist_one(pq)
        self.offsets.remove(mq)

    def _finish_orderly_drop(self, pq: ProcessQueue) -> None:
        with pq.consume_lock:
            self.offsets.update(pq.mq, pq.commit_offset())
            self._persist_one(pq)
            self.offsets.remove(pq.mq)
            self._unlock_mqs(pq.addr, [pq.mq])

    def _persist_one(self, pq: ProcessQueue) -> None:
        try:
            self.offsets.persist(pq.mq, pq.addr, sync=True)
        except QuiverError as exc:
            log.warning("offset of dropped %s not stored: %s", pq.mq, exc)

    def persist_offsets(self, sync: bool = False) -> None:
        pqs = list(self._pqs.values())
        for pq in pqs:
            self.offsets.update(pq.mq, pq.commit_offset())
        try:
            self.offsets.persist_all({pq.mq: pq.addr for pq in pqs}, sync=sync)
        except (QuiverError, OSError) as exc:
            log.warning("persisting offsets failed: %s", exc)

    # ---- broker locks (orderly) -----------------------------------------------------------------------

    def _lock_mqs(self, addr: str, mqs: list[MessageQueue]) -> set[MessageQueue]:
        req = rq.LockBatchMq(group=self.group, client_id=self.client_id, queues=[(m.topic, m.queue_id) for m in mqs])
        try:
            got = set(rq.LockBatchReply.decode(self.call_broker(addr, req).ext).locked)
        except QuiverError as exc:
            log.warning("locking %d queues on %s failed: %s", len(mqs), addr, exc)
            return set()
        return {m for m in mqs if (m.topic, m.queue_id) in got}

    def _unlock_mqs(self, addr: str, mqs: list[MessageQueue]) -> None:
        req = rq.UnlockBatchMq(group=self.group, client_id=self.client_id, queues=[(m.topic, m.queue_id) for m in mqs])
        try:
            self.call_broker(addr, req)
        except QuiverError as exc:
            log.warning("unlocking on %s failed: %s", addr, exc)

    def _lock_all(self) -> None:
        by_addr: dict[str, list[ProcessQueue]] = {}
        for pq in list(self._pqs.values()):
            by_addr.setdefault(pq.addr, []).append(pq)
        for addr, pqs in by_addr.items():
            got = self._lock_mqs(addr, [pq.mq for pq in pqs])
            now = time.monotonic()
            for pq in pqs:
                was = pq.locked
                pq.locked = pq.mq in got
                if pq.locked:
                    pq.lock_ts = now
                    if not was:
                        self._kick_orderly(pq)

    # ---- pulling (IO thread callbacks) -----------------------------------------------------------------

    def _pull(self, pq: ProcessQueue) -> None:
        if pq.dropped or not self._running:
            return
        if (len(pq.msgs) >= self.pull_threshold_for_queue or pq.bytes >= self.pull_threshold_bytes_for_queue
                or (not self._orderly and pq.span() > self.max_span)):
            self._timer.call_later(0.05, self._pull, pq)  # flow control
            return
        if pq.rebalance_t0 is not None:
            self.rebalance_latencies_ms.append((time.monotonic() - pq.rebalance_t0) * 1000)
            pq.rebalance_t0 = None
        sel = self.subscriptions.get(pq.mq.topic)
        sql = filter_route.is_sql(sel)
        commit = None if self.broadcast else self.offsets.get(pq.mq) or None  # 0: nothing to commit
        if not sql:
            addr = self.read_addr(pq.mq.topic, pq.mq.broker, wait=False) or pq.addr
            if addr != pq.addr:  # master down (or back): pulls and offset commits follow
                log.info("%s: reading from %s instead of %s", pq.mq, addr, pq.addr)
                pq.addr = addr
        via = pq.addr
        if sql:  # SQL92: through a filter server of the queue's broker, never the broker
            try:
                via = self._filter_servers.pull_address(self._routes[pq.mq.topic][1], pq.mq, sel)
            except (QuiverError, KeyError) as exc:
                self._filter_servers.log_unavailable(exc)
                self._timer.call_later(1.0, self._refresh_route_and_pull, pq)
                return
        # SQL92: `broker_addr` names the broker meant (a filter server attached elsewhere refuses)
        req = rq.PullMessage(group=self.group, topic=pq.mq.topic, queue_id=pq.mq.queue_id, offset=pq.next_offset,
                             commit_offset=commit, max_msgs=self.pull_batch_size, suspend_ms=self.suspend_ms,
                             expression=(sel.expression if sel else None) or "*",
                             expression_type="SQL92" if sql else None, broker_addr=pq.addr if sql else None)
        try:
            self.transport.send(via, req, None, (), lambda r: self._pulled(pq, r, via),
                                timeout=self.suspend_ms / 1000 + 15)
        except QuiverError:
            if self._running:
                self._timer.call_later(self.pull_delay_on_error_s, self._pull, pq)

    def _refresh_route_and_pull(self, pq: ProcessQueue) -> None:
        try:
            self.route(pq.mq.topic, refresh=True)
        except QuiverError as exc:
            log.warning("route refresh for %s failed: %s", pq.mq.topic, exc)
        self._pull(pq)

    def _pulled(self, pq: ProcessQueue, env, via: str | None = None) -> None:
        if pq.dropped or not self._running:
            return
        if via and via != pq.addr and filter_route.should_fail_over(env):
            self._filter_servers.failed(via)  # a dead filter server: the next pull goes to another one
            self._pull(pq)
            return
        if via == pq.addr and isinstance(env, ClientError):  # broker unreachable: its slave next
            self.read_failed(via)
            self._timer.call_later(0.2, self._pull, pq)
            return
        if isinstance(env, Exception) or env.code not in _PULL_OK:
            log.warning("pull %s failed: %s", pq.mq, env if isinstance(env, Exception) else env.remark)
            self._timer.call_later(self.pull_delay_on_error_s, self._pull, pq)
            return
        try:
            nxt = rq.PullReply.decode(env.ext).next
        except FieldError as exc:  # a garbled answer: ask again later rather than move anywhere
            log.warning("pull %s: %s", pq.mq, exc)
            self._timer.call_later(self.pull_delay_on_error_s, self._pull, pq)
            return
        if env.code == ResponseCode.SUCCESS and env.bodies:
            msgs = self._decode(pq, env.bodies[0])
            pq.add(msgs, nxt)  # cached before the position moves: the commit offset never skips them
            if msgs:
                self._dispatch(pq, msgs)
            elif not pq.msgs:
                self.offsets.update(pq.mq, nxt)
        else:
            if env.code == ResponseCode.PULL_OFFSET_MOVED:
                log.info("offset of %s moved from %d to %d", pq.mq, pq.next_offset, nxt)
            with pq.lock:
                pq.next_offset = nxt
                empty = not pq.msgs
            if empty:  # nothing cached: the position itself is consumed
                self.offsets.update(pq.mq, nxt, increase_only=env.code != ResponseCode.PULL_OFFSET_MOVED)
        self._pull(pq)

    def _decode(self, pq: ProcessQueue, body) -> list[MessageExt]:
        sel = self.subscriptions.get(pq.mq.topic)
        wanted = tags.parse(sel.expression) if sel is not None and sel.type == "TAG" else None
        retry = pq.mq.topic == self.retry_topic
        out = []
        for m in decode_messages(body, pq.mq.broker):
            if wanted is not None and m.tags not in wanted:
                continue
            if retry:
                m.topic = m.properties.get(RETRY_TOPIC) or m.topic
                rt = m.properties.get("RECONSUME_TIME")
                if rt and rt.isdigit() and int(rt) > m.reconsume_times:
                    m.reconsume_times = int(rt)
            out.append(m)
        return out

    # ---- consuming ------------------------------------------------------------------------------------------
