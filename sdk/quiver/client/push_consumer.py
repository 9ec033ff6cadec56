"""PushConsumer: a group shares queues; a listener gets messages as they arrive.

Each owned queue has a ProcessQueue with one long-polling pull in flight (IO
thread callbacks, no thread per queue). Pulled messages are cached per queue
and handed to a consume thread pool (with `consume_inline`, consumed on the IO
thread that received them: no hand-off). The committed offset of a queue is its
lowest unfinished message (or the pull position when nothing is cached), kept
in memory, piggy-backed on pulls, persisted every `commit_interval_ms`, on drop
and on shutdown.

Concurrent mode: failures go back to the broker (CONSUMER_SEND_MSG_BACK) and
return through `%RETRY%<group>`, which the consumer subscribes to by itself.
Orderly mode: queues are locked on the broker (LOCK_BATCH_MQ), one thread per
queue, a failing batch is retried in place after a suspend, and past the max
reconsume times it goes to the dead-letter topic. Broadcasting: every client
takes every queue, offsets in a local JSON file, failures are dropped. POP mode
(`pop=True`, pop_push.py): no queues are owned, the broker hands out messages.

A record that cannot be decoded is skipped and reported (queue_puller.py:
log, `stats()["undecodable_records"]`, ConsumerOptions.on_bad_record), and
whatever goes wrong with a pull's answer, the queue is pulled again. An offset
reset by the broker (`Admin.reset_offset` of a running group:
RESET_CONSUMER_CLIENT_OFFSET) replaces the queue's ProcessQueue (what it
cached, its pull under way and its unfinished messages no longer count) and
queues a commit of the new offset; so does a pull answered OFFSET_MOVED while
messages are cached (a reset this member was not told of: the broker moves
the group's pulls until one arrives at the reset offset). The state lock orders it with everything
else that moves or sends an offset: a pull's piggy-backed commit, the
periodic commit and finished messages; commits leave in the order they were
queued, so none of the old position reaches the broker after the new one.

Owns taking and releasing queues, flow control and what a pull's answer does
to a queue; the pulls themselves (target, failover, decode) are
queue_puller.py's, the rebalance loop and allocation rebalance.py's, the
per-queue cache process_queue.py's, listener calls and orderly consumption
consume_service.py's, the orderly queues' broker locks queue_locks.py's, POP
mode pop_push.py's, offset persistence offset_store.py's, settings
options.py's (ConsumerOptions). Each part is given what it uses, never the
consumer.
"""

import contextlib
import logging
import socket
import threading
import time
from typing import Any, Self, Unpack

from quiver.client import filter_route
from quiver.wire import requests as rq
from quiver.client.base import ClientBase, MessageQueue
from quiver.client.consume_service import ConsumeService, Listener
from quiver.wire.codes import RequestCode
from quiver.wire.curve import Credentials
from quiver.wire.protocol import Envelope
from quiver.errors import ClientError, QuiverError, TopicNotExistError
from quiver.client.message import MessageExt, MessageSelector
from quiver.wire.properties import RECONSUME_TIME, RETRY_TOPIC
from quiver.client.offset_store import LocalFileOffsetStore, RemoteOffsetStore, start_offset
from quiver.client.options import ConsumerOptions, ConsumerSettings
from quiver.client.pop_push import PopPushLoop
from quiver.client.popping import Popper
from quiver.client.process_queue import DelayedCalls, ProcessQueue
from quiver.client.queue_locks import QueueLocks
from quiver.client.queue_puller import FOUND, OFFSET_ILLEGAL, BadRecords, Pulled, QueuePuller
from quiver.client.rebalance import RebalanceLoop, Rebalancer
from quiver.client.metrics import ClientMetrics
from quiver.client.producer import client_tracer
from quiver.client.tracing import enabled as trace_enabled
from quiver.wire.validation import RETRY_PREFIX, check_group

log = logging.getLogger(__name__)


class PushConsumer(ClientBase):
    """Settings by keyword are ConsumerOptions fields (broadcast, consume_from,
    max_reconsume_times, consume_threads or threads, consume_batch_size or batch_size, allocate,
    pull_batch_size, offset_dir, lock_interval_ms ...); `options=ConsumerOptions(...)` gives them
    at once. `trace=True` (or QUIVER_TRACE=1): SubBefore and
    SubAfter trace events around each listener call (consume_service.py). `metrics`: a
    quiver.client.metrics.ClientMetrics to record listener calls into (messages consumed or failed,
    call time). `namesrv` and `credentials` as for Producer. ValueError for a bad setting.

        def listener(msgs):
            for msg in msgs:
                handle(msg)
            return ConsumeResult.SUCCESS        # or RECONSUME_LATER / ConsumeResult.later(seconds=30)

        c = PushConsumer("cg", namesrv="127.0.0.1:9876", consume_from="first")
        c.subscribe("Orders", "*")
        c.register(listener)                    # register(listener, orderly=True): one queue, one thread
        c.start()
        ...
        c.shutdown()
    """

    _timer: DelayedCalls   # these four are built by start()
    _puller: QueuePuller
    _consume: ConsumeService   # listener calls (consume_service.py)
    _pop_loop: PopPushLoop     # pop=True (pop_push.py)

    def __init__(self, group: str, namesrv: str | list[str] | None = None, *,
                 options: ConsumerOptions | None = None, credentials: str | Credentials | None = None,
                 trace: bool | None = None, metrics: ClientMetrics | None = None,
                 **settings: Unpack[ConsumerSettings]) -> None:
        super().__init__(namesrv, credentials=credentials,   # SubBefore / SubAfter around each listener call
                         tracer_factory=client_tracer if trace_enabled(trace) else None)
        self.metrics = metrics
        check_group(group)
        self.options = opts = ConsumerOptions.build(options, **settings)
        self.group = group
        self.broadcast = opts.broadcast
        self._heartbeat_interval_s = opts.heartbeat_interval_ms / 1000
        self._retry_topic = f"{RETRY_PREFIX}{group}"
        self._subscriptions: dict[str, MessageSelector] = {}
        self._listener: Listener | None = None
        self._orderly = False
        self._pqs: dict[MessageQueue, ProcessQueue] = {}
        self._locks = QueueLocks(group, self.client_id, self._call_broker)   # orderly: broker locks (queue_locks.py)
        self._rebalance = RebalanceLoop(Rebalancer(self._brokers, group, opts.allocate, opts.broadcast),
                                        opts.rebalance_interval_ms / 1000, self._topics, self._pqs, self._add,
                                        self._drop, changed=self._send_heartbeats,  # brokers learn the owners
                                        listener=opts.rebalance_listener)
        self._offsets = (LocalFileOffsetStore(opts.offset_dir, f"{self._client_host}@{opts.instance_name}", group)
                        if opts.broadcast else RemoteOffsetStore(self._brokers, group))
        self._running = False
        self._state_lock = threading.RLock()   # queue state and offsets vs an offset reset (see above)
        self._bad = BadRecords(opts.on_bad_record)
        self._resets = 0
        self._drop_threads: list[threading.Thread] = []
        self._rebalance_latencies_ms: list[float] = []  # notification -> new owner's first pull

    _client_host = socket.gethostname()

    # ---- public API -----------------------------------------------------------------------

    def subscribe(self, topic: str, expression: str | MessageSelector = "*") -> None:
        """Consume `topic`'s messages that match `expression`: a tag expression ("*", "TagA ||
        TagB") or MessageSelector.sql(...). Allowed while running (the group rebalances at once);
        an SQL92 expression is checked then (SubscriptionParseError), else at start()."""
        sel = filter_route.as_selector(expression)
        if self._running:
            self._check_topic(topic)
            filter_route.check_subscription(self._brokers, topic, sel, self.group)  # SQL92: raises SubscriptionParseError
        self._subscriptions[topic] = sel
        if self._running:
            self._send_heartbeats()
            self._rebalance.wake()

    def unsubscribe(self, topic: str) -> None:
        """Stop consuming `topic`: its queues are given up (each commits its offset first) and
        the group rebalances at once. Allowed before start() and while running; an unknown
        topic is ignored."""
        if self._subscriptions.pop(topic, None) is not None and self._running:
            self._send_heartbeats()
            self._rebalance.wake()

    def _check_topic(self, topic: str) -> None:
        """With wait_for_topic=False: TopicNotExistError for a topic no name server knows."""
        if not self.options.wait_for_topic:
            self._route(topic, refresh=True)

    def register(self, fn: Listener, orderly: bool = False) -> None:
        """fn(msgs: list[MessageExt]) -> ConsumeResult; raising counts as RECONSUME_LATER."""
        if self._running:
            raise ClientError("register the listener before start()")
        self._listener = fn
        self._orderly = orderly

    def start(self) -> Self:
        """Connect, check SQL92 subscriptions (SubscriptionParseError), take this client's share
        of the queues (none with pop=True: the broker hands out messages) and start consuming;
        returns the consumer. ClientError without a listener or a subscription. A subscribed
        topic that does not exist yet is waited for (logged once, `stats()["missing_topics"]`);
        with wait_for_topic=False TopicNotExistError instead."""
        if self._running:
            return self
        if self._listener is None:
            raise ClientError("no listener: call register(fn) before start()")
        if not self._subscriptions:
            raise ClientError("no subscription: call subscribe(topic, expression) before start()")
        opts = self.options
        self._timer = DelayedCalls(f"push-consumer-{self.group}")
        self._puller = QueuePuller(self._brokers, self.group, opts, self._timer.call_later, self._bad)
        self._running = True
        super().start()   # the tracer too
        self._consume = ConsumeService(self.group, opts, self._listener, orderly=self._orderly,
                                       broadcast=self.broadcast, timer=self._timer, call_broker=self._call_broker,
                                       commit=self._consumed, relock=self._locks.relock, tracer=self.tracer)
        self._consume.metrics = self.metrics
        if opts.pop:   # POP mode (pop_push.py): no queues owned, no offsets, no retry topic
            popper = Popper(self._brokers, self.group, consume_from="first" if opts.consume_from == "first" else "last",
                            fifo=self._orderly, max_reconsume_times=opts.max_reconsume_times)
            self._pop_loop = PopPushLoop(popper, self._consume, lambda: self._subscriptions, opts, self.request_timeout)
        try:  # SQL92 subscriptions are compiled by a filter server before any message flows
            for topic, sel in list(self._subscriptions.items()):
                self._check_topic(topic)
                filter_route.check_subscription(self._brokers, topic, sel, self.group)
        except QuiverError:
            self.shutdown()
            raise
        if opts.pop:
            self._pop_loop.start()
            return self
        if not self.broadcast:
            self._ensure_retry_topic()
        self._rebalance.start("rebalance")
        self._timer.every(opts.commit_interval_ms / 1000, self._persist_offsets)
        if self._orderly and not self.broadcast:
            self._timer.every(opts.lock_interval_ms / 1000,
                              lambda: self._locks.renew(list(self._pqs.values()), self._consume.kick_orderly))
        return self

    def __enter__(self) -> Self:
        # `with PushConsumer(...) as c: c.subscribe(...); c.register(fn); c.start()` works too
        if self._listener is not None and self._subscriptions:
            return self.start()
        return self

    def assignment(self, include_retry: bool = False) -> list[MessageQueue]:
        """The queues this consumer owns now (with `include_retry`, its %RETRY% queue too)."""
        return sorted(mq for mq in list(self._pqs) if include_retry or mq.topic != self._retry_topic)

    def stats(self) -> dict[str, Any]:
        """Counters: records skipped as undecodable, offset resets applied; and the subscribed
        topics that do not exist yet (waited for, logged once: `wait_for_topic`)."""
        missing = sorted(t for t in list(self._rebalance.rebalancer.missing) if t in self._subscriptions)
        return {"undecodable_records": self._bad.count, "offset_resets": self._resets, "missing_topics": missing}

    def shutdown(self) -> None:
        """Stop pulling, let running listener calls finish, store the offsets and leave the
        group. Calling it again, or before start(), does nothing."""
        if not self._running:
            return
        self._running = False
        self._consume.stop()
        if self.options.pop:
            self._pop_loop.stop()
            self._consume.close(wait_for_pool=True)   # running listeners ack what they finish
            self._timer.stop()
            super().shutdown()
            return
        self._rebalance.stop()
        self._consume.close()   # running listener calls finish and commit
        self._rebalance.release_all()
        for t in self._drop_threads:
            t.join(5.0)
        self._persist_offsets(sync=True)
        self._timer.stop()
        super().shutdown()

    # ---- heartbeats, notifications, shutdown words ---------------------------------------------

    def _topics(self) -> list[str]:
        topics = list(self._subscriptions)
        if not self.broadcast:
            topics.append(self._retry_topic)
        return topics

    def _heartbeat_payload(self) -> rq.HeartBeat:
        """The group's heartbeat: its subscriptions (the retry topic's too) and owned queues."""
        subs = filter_route.wire_subscriptions(self._subscriptions)
        if not self.broadcast:
            subs[self._retry_topic] = rq.Subscription(type="TAG", expression="*")
        me = rq.ConsumerData(group=self.group, subscriptions=subs, consume_type="PUSH",
                             model="BROADCASTING" if self.broadcast else "CLUSTERING",
                             consume_from=str(self.options.consume_from), orderly=self._orderly,
                             queues=[(mq.topic, mq.broker, mq.queue_id) for mq in list(self._pqs)])
        return rq.HeartBeat(client_id=self.client_id, consumers=[me])

    def _on_ids_changed(self, addr: str, env: Envelope) -> None:
        self._rebalance.notified(addr, env)

    def _on_reset(self, addr: str, env: Envelope) -> None:
        req = rq.ResetConsumerClientOffset.decode(env.ext)
        if req.group == self.group and self._running:
            self._reset({MessageQueue(req.topic, req.broker, q): off for q, off in req.offsets})

    _push_handlers = {RequestCode.NOTIFY_CONSUMER_IDS_CHANGED: _on_ids_changed,
                     RequestCode.RESET_CONSUMER_CLIENT_OFFSET: _on_reset}

    def _ensure_retry_topic(self) -> None:
        """The group's retry topic (1 queue) on every broker, as RocketMQ creates it on heartbeat."""
        try:
            self._route(self._retry_topic, refresh=True)
            return
        except TopicNotExistError:
            pass
        except QuiverError as exc:
            log.warning("retry topic route: %s", exc)
            return
        for name, addr in self._all_broker_addrs().items():
            try:
                self._call_broker(addr, rq.CreateTopic(topic=self._retry_topic, read=1, write=1))
            except QuiverError as exc:
                log.warning("creating %s on %s failed: %s", self._retry_topic, name, exc)
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            try:
                self._route(self._retry_topic, refresh=True)
                return
            except QuiverError:
                time.sleep(0.05)

    # ---- rebalance ------------------------------------------------------------------------------

    def _rebalance_now(self) -> None:
        """Take this client's share of every subscribed topic's queues (and its retry queue); give up the rest."""
        self._rebalance.step()

    def _add(self, mq: MessageQueue, notified_at: float | None) -> bool:
        try:
            addr = self._read_addr(mq.topic, mq.broker)   # a slave while the master is down
            if addr is None:
                raise ClientError(f"broker {mq.broker!r} of topic {mq.topic!r} has no address")
            if self._orderly and not self.broadcast and not self._locks.lock(addr, [mq]):
                return False
            off = self._offsets.read(mq, addr)
            if off is None:
                off = start_offset(self._brokers, mq, addr, self.options.consume_from)
        except (QuiverError, KeyError) as exc:
            log.warning("cannot take %s: %s", mq, exc)
            return False
        pq = ProcessQueue(mq, addr, off)
        pq.locked, pq.lock_ts = True, time.monotonic()
        pq.rebalance_t0 = notified_at
        self._offsets.update(mq, off, increase_only=False)
        self._pqs[mq] = pq
        self._pull(pq)
        return True

    def _drop(self, mq: MessageQueue) -> None:
        """Stop consuming a queue and store its offset before anyone else may take it."""
        with self._state_lock:
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
        self._offsets.update(mq, pq.commit_offset())
        self._persist_one(pq)
        self._offsets.remove(mq)

    def _finish_orderly_drop(self, pq: ProcessQueue) -> None:
        with pq.consume_lock:
            self._offsets.update(pq.mq, pq.commit_offset())
            self._persist_one(pq)
            self._offsets.remove(pq.mq)
            self._locks.unlock(pq.addr, [pq.mq])

    def _consumed(self, pq: ProcessQueue, offset: int) -> None:
        """The queue's commit offset moved to `offset` (unless the queue was released or reset)."""
        with self._state_lock:
            if not pq.dropped:
                self._offsets.update(pq.mq, offset)

    def _persist_one(self, pq: ProcessQueue) -> None:
        try:
            self._offsets.persist(pq.mq, pq.addr, sync=True)
        except QuiverError as exc:
            log.warning("offset of dropped %s not stored: %s", pq.mq, exc)

    def _persist_offsets(self, sync: bool = False) -> None:
        """Store every owned queue's offset (its lowest unfinished message) on its broker, or in
        the local file when broadcasting; `sync` waits for the answers. Done every
        commit_interval_ms and on shutdown; a failure is logged."""
        # queued commits under the state lock, in order with piggy-backed ones and a reset's; a
        # blocking one (shutdown) outside it: the IO thread that may deliver its answer (quiver.
        # testing's transport) may be waiting for the lock
        with self._state_lock:
            pqs = list(self._pqs.values())
            for pq in pqs:
                self._offsets.update(pq.mq, pq.commit_offset())
            if not sync:
                self._persist_all({pq.mq: pq.addr for pq in pqs}, sync)
        if sync:
            self._persist_all({pq.mq: pq.addr for pq in pqs}, sync)

    def _persist_all(self, addrs: dict[MessageQueue, str], sync: bool) -> None:
        try:
            self._offsets.persist_all(addrs, sync=sync)
        except (QuiverError, OSError) as exc:
            log.warning("persisting offsets failed: %s", exc)

    def _reset(self, offsets: dict[MessageQueue, int]) -> None:
        """The broker reset the group's offsets (RESET_CONSUMER_CLIENT_OFFSET): each owned queue
        named gets a new ProcessQueue at its new offset, whose commit is queued at once."""
        for mq, offset in offsets.items():
            old = self._pqs.get(mq)
            if old is not None and self._replace(old, offset):
                self._resets += 1

    def _replace(self, old: ProcessQueue, offset: int) -> bool:
        """Consume `old`'s queue from `offset` with a new ProcessQueue: what `old` cached, its pull
        under way and its unfinished messages no longer count; the new offset is committed.
        False if the queue was dropped or replaced meanwhile."""
        mq = old.mq
        # orderly: the batch under way finishes first (it cannot commit once the queue is replaced)
        with old.consume_lock if self._orderly else contextlib.nullcontext(), self._state_lock:
            if self._pqs.get(mq) is not old:
                return False
            old.dropped = True
            pq = self._pqs[mq] = ProcessQueue(mq, old.addr, offset)
            pq.locked, pq.lock_ts = old.locked, old.lock_ts
            self._offsets.update(mq, offset, increase_only=False)
            try:
                self._offsets.persist(mq, pq.addr)
            except (QuiverError, OSError) as exc:
                log.warning("commit of the new offset of %s failed: %s", mq, exc)
        log.info("%s now consumed from offset %d (%d cached message(s) dropped)", mq, offset, len(old.msgs))
        self._pull(pq)
        return True

    # ---- pulling (IO thread callbacks) -----------------------------------------------------------------

    def _pull(self, pq: ProcessQueue) -> None:
        if pq.dropped or not self._running:
            return
        opts = self.options
        if (len(pq.msgs) >= opts.cached_msgs_per_queue or pq.bytes >= opts.cached_bytes_per_queue
                or (not self._orderly and pq.span() > opts.max_offset_span)):
            self._timer.call_later(0.05, self._pull, pq)  # flow control
            return
        if pq.rebalance_t0 is not None:
            self._rebalance_latencies_ms.append((time.monotonic() - pq.rebalance_t0) * 1000)
            pq.rebalance_t0 = None
        try:
            with self._state_lock:   # the piggy-backed commit is queued before a reset's, or is the reset's
                if pq.dropped:
                    return
                commit = None if self.broadcast else self._offsets.get(pq.mq) or None  # 0: nothing to commit
                offset = pq.next_offset
                single = offset < pq.narrow_until
                self._puller.pull(pq, offset, self._subscriptions.get(pq.mq.topic),
                                  lambda pulled, retry_s: self._pulled(pq, offset, single, pulled, retry_s),
                                  commit, single=single)
        except Exception:
            log.exception("pull of %s not sent: trying again", pq.mq)
            self._timer.call_later(self._puller.error_delay_s, self._pull, pq)

    def _pulled(self, pq: ProcessQueue, offset: int, single: bool, pulled: Pulled | None, retry_s: float) -> None:
        if pq.dropped or not self._running:
            return
        msgs = None
        if pulled is not None:
            try:
                msgs = self._apply(pq, offset, single, pulled)
                if msgs is None:
                    return
            except Exception:   # the queue must not stop: what went wrong is logged, the pull repeated
                log.exception("answer to the pull of %s from offset %d not taken: pulling again", pq.mq, offset)
                pulled, retry_s = None, self._puller.error_delay_s
        if pulled is None:
            self._timer.call_later(retry_s, self._pull, pq)
            return
        assert msgs is not None   # a pull answered without an error gave a list
        # An inline listener that takes a while runs after the next pull has left: the pull waits
        # at the broker meanwhile, so what is stored then is answered at once instead of after
        # the listener and a round trip. The batch is cached already: the flow control counts it
        # and the pull starts past it. A quick hand-off (a submit, a fast listener) goes first.
        first = bool(msgs) and self._consume.hand_off_first(len(msgs))
        if first:
            self._dispatch(pq, msgs)
        self._pull(pq)
        if msgs and not first:
            self._dispatch(pq, msgs)

    def _dispatch(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        try:   # outside the state lock: an inline listener must not hold up commits and resets
            self._consume.dispatch(pq, msgs)
        except Exception:   # cached and uncommitted: a rebalance or restart delivers them again
            log.exception("handing %d message(s) of %s to the listener failed", len(msgs), pq.mq)

    def _apply(self, pq: ProcessQueue, offset: int, single: bool, pulled: Pulled) -> list[MessageExt] | None:
        """Cache what a pull found, or move the queue's position: the messages to hand to the
        listener (none for an answer without any), None when the queue is being replaced (its
        new ProcessQueue pulls)."""
        if pulled.status is FOUND:
            got = self._puller.decode(pq, pulled, self._subscriptions.get(pq.mq.topic), offset, single)
            msgs = self._as_delivered(pq, got.msgs)
            with self._state_lock:
                if pq.dropped:
                    return None
                pq.add(msgs, got.next)  # cached before the position moves: the commit offset never skips them
                pq.narrow_until = max(pq.narrow_until, got.narrow_until)
                if not msgs and not pq.msgs:
                    self._offsets.update(pq.mq, got.next)
            return msgs
        nxt = pulled.next
        moved = pulled.status is OFFSET_ILLEGAL
        if moved:
            log.info("offset of %s moved from %d to %d", pq.mq, offset, nxt)
        with self._state_lock:
            if pq.dropped:
                return None
            with pq.lock:
                cached = bool(pq.msgs)
                if not (moved and cached):
                    pq.next_offset = nxt
            if moved and cached:
                # what is cached lies elsewhere (the group's offset was reset before this consumer
                # was told): a new ProcessQueue there, off the IO thread (orderly waits for its batch)
                self._timer.call_later(0, self._replace, pq, nxt)
                return None
            if moved:
                pq.narrow_until = 0
            if not cached:  # nothing cached: the position itself is consumed
                self._offsets.update(pq.mq, nxt, increase_only=not moved)
        return []

    def _as_delivered(self, pq: ProcessQueue, msgs: list[MessageExt]) -> list[MessageExt]:
        if pq.mq.topic == self._retry_topic:   # back under their own topic, with their delivery count
            for m in msgs:
                m.topic = m.properties.get(RETRY_TOPIC) or m.topic
                rt = m.properties.get(RECONSUME_TIME)
                if rt and rt.isdigit() and int(rt) > m.reconsume_times:
                    m.reconsume_times = int(rt)
        return msgs
