"""PullConsumer: subscribe, poll, commit, seek, seek_to_timestamp.

Each assigned queue keeps one long-polling pull in flight (queue_puller.py:
where it goes, failover, the decoded answer); pulled messages go into a local
buffer that `poll()` drains (pull_buffer.py: the queues' positions and the
buffer). The tag expression is checked on the broker by hash and again here by
string. A queue whose buffered messages reach `cached_msgs_per_queue` pauses
until `poll()` has taken half of them.
Offsets: `poll()` advances the consumed position, `commit()` stores it on the
broker (also every `commit_interval_ms` with auto_commit, and on shutdown).
Consumers of one group share the queues like push consumers (rebalance.py's
RebalanceLoop): heartbeats carry the subscriptions, a NOTIFY_CONSUMER_IDS_CHANGED
from a broker rebalances at once, and a queue given up is committed first.
`subscribe` and `unsubscribe` work while running (RocketMQ's lite pull
consumer); a subscribed topic that does not exist yet is waited for (see poll).
SQL92 subscriptions (`MessageSelector.sql(...)`) are checked at subscribe /
start time and pulled through a filter server of each queue's broker
(filter_route.py); offsets are still committed to the broker.
A record that cannot be decoded is skipped and reported (queue_puller.py:
log, `stats()["undecodable_records"]`, ConsumerOptions.on_bad_record), and
whatever goes wrong with a pull's answer, the queue is pulled again.
An offset reset by the broker (`Admin.reset_offset` of a running group:
RESET_CONSUMER_CLIENT_OFFSET) works like `seek` on the queues it names, and
the new offset is committed at once, under the lock every commit takes, so
no commit of the old position can reach the broker after it. A pull answered
OFFSET_MOVED (also how the broker moves a member not told of a reset) drops
what is buffered of the queue.
With `direct_poll`, a poll() that finds nothing buffered holds the pulls of
the idle queues on its own thread's sockets and reads their answers itself
(pull_direct.py); the IO thread then only fetches what is stored (suspend 0)
and leaves a caught-up queue to the next poll().
Settings: options.py's ConsumerOptions.
"""

import logging
import threading
import time
from typing import Any, Self, Unpack

from quiver.client import filter_route
from quiver.wire import requests as rq
from quiver.client.base import ClientBase, MessageQueue
from quiver.wire.codes import RequestCode
from quiver.wire.curve import Credentials, credentials_from
from quiver.wire.protocol import Envelope
from quiver.errors import ClientError, QuiverError, TopicNotExistError
from quiver.client.message import MessageExt, MessageSelector
from quiver.wire.names import check_group
from quiver.client.offset_store import query_offset, start_offset
from quiver.client.options import ConsumerOptions, ConsumerSettings
from quiver.client.process_queue import DelayedCalls
from quiver.client.direct_poll import DirectPolls
from quiver.client.pull_buffer import PullBuffer, QueueState
from quiver.client.pull_direct import DirectPoller
from quiver.client.queue_puller import FOUND, NO_NEW_MSG, OFFSET_ILLEGAL, BadRecords, Pulled, QueuePuller
from quiver.wire.transport import Transport
from quiver.client.rebalance import RebalanceLoop, Rebalancer
from quiver.client.producer import client_tracer
from quiver.client.tracing import enabled as trace_enabled

log = logging.getLogger(__name__)

def _caught_up(pulled: Pulled) -> bool:
    """Nothing stored past this answer (a pull now would find nothing new)."""
    return pulled.status is NO_NEW_MSG or (pulled.status is FOUND and pulled.next >= pulled.max)


class PullConsumer(ClientBase):
    """Settings by keyword are ConsumerOptions fields (consume_from, pull_batch_size, suspend_ms,
    auto_commit, commit_interval_ms, allocate ...); `options=ConsumerOptions(...)` gives them at once.
    `trace=True` (or QUIVER_TRACE=1): SubBefore/SubAfter trace events when poll() hands messages over.
    `namesrv` and `credentials` as for Producer. ValueError for a bad setting or broadcast=True.

        c = PullConsumer("cg", namesrv="127.0.0.1:9876", consume_from="first", auto_commit=False)
        c.subscribe("Orders", "TagA || TagB")
        with c:
            for msg in c.poll(timeout=1.0):
                handle(msg)
            c.commit()                  # at-least-once: commit after handling
    """

    _timer: DelayedCalls     # built by start()
    _puller: QueuePuller
    _direct: DirectPolls | None = None   # direct_poll on a real transport (start()) ...
    _poller: DirectPoller | None = None  # ... and what holds poll()'s pulls on them

    def __init__(self, group: str, namesrv: str | list[str] | None = None, *,
                 options: ConsumerOptions | None = None, credentials: str | Credentials | None = None,
                 trace: bool | None = None, **settings: Unpack[ConsumerSettings]) -> None:
        super().__init__(namesrv, credentials=credentials,   # SubBefore / SubAfter when poll() hands messages over
                         tracer_factory=client_tracer if trace_enabled(trace) else None)
        check_group(group)
        self.options = opts = ConsumerOptions.build(options, **settings)
        if opts.broadcast:
            raise ValueError("PullConsumer does not broadcast: use PushConsumer(broadcast=True)")
        self.group = group
        self._heartbeat_interval_s = opts.heartbeat_interval_ms / 1000
        self._subscriptions: dict[str, MessageSelector] = {}
        self._pulled_buf = PullBuffer(opts.cached_msgs_per_queue)
        self._queues = self._pulled_buf.queues
        self._cond = self._pulled_buf.cond
        self._stop = threading.Event()
        self._commit_lock = threading.Lock()   # commits and offset resets, one at a time
        self._bad = BadRecords(opts.on_bad_record)
        self._resets = 0
        self._rebalancer = Rebalancer(self._brokers, group, opts.allocate)   # .missing: subscribed topics not there yet
        self._rebalance = RebalanceLoop(self._rebalancer, opts.rebalance_interval_ms / 1000,
                                        lambda: list(self._subscriptions), self._queues, self._take, self._drop,
                                        listener=opts.rebalance_listener)

    def subscribe(self, topic: str, expression: str | MessageSelector = "*") -> None:
        """Consume `topic`'s messages that match `expression`: a tag expression ("*", "TagA ||
        TagB") or MessageSelector.sql(...). Allowed while running (the group rebalances at once);
        an SQL92 expression is checked then (SubscriptionParseError), else at start()."""
        sel = filter_route.as_selector(expression)
        if self._started:
            filter_route.check_subscription(self._brokers, topic, sel, self.group)
        self._subscriptions[topic] = sel
        if self._started:
            self._resubscribed()

    def unsubscribe(self, topic: str) -> None:
        """Stop consuming `topic`, as RocketMQ's lite pull consumer does: nothing more of it is
        handed out, its queues' consumed offsets are committed and the queues given up, and the
        group rebalances. Allowed before start() and while running; an unknown topic is ignored."""
        if self._forget(topic) and self._started:
            self._resubscribed()

    def _forget(self, topic: str) -> bool:
        if self._subscriptions.pop(topic, None) is None:
            return False
        self._pulled_buf.forget(topic)
        return True

    def _resubscribed(self) -> None:
        self._send_heartbeats()   # brokers learn the subscriptions; a queue given up commits first
        self._rebalance_now()

    def _change_soon(self, topic: str, expression: str | MessageSelector | None) -> None:
        """subscribe (`expression`) or unsubscribe (None) without waiting for the brokers: the
        rebalance runs on a thread of its own (AsyncPullConsumer, on an event loop)."""
        if expression is None:
            if not self._forget(topic):
                return
        else:
            self._subscriptions[topic] = filter_route.as_selector(expression)   # SQL92: checked by its pulls
        threading.Thread(target=self._resubscribed, name="pull-consumer-subscribe", daemon=True).start()

    def start(self) -> Self:
        """Connect, check SQL92 subscriptions (SubscriptionParseError), take this client's share
        of the queues and start pulling; returns the consumer. Again: does nothing."""
        if self._started:
            return self
        super().start()
        try:
            for topic, sel in self._subscriptions.items():
                filter_route.check_subscription(self._brokers, topic, sel, self.group)
        except QuiverError:
            super().shutdown()
            raise
        self._stop.clear()
        self._timer = DelayedCalls(f"pull-consumer-{self.group}")
        self._puller = QueuePuller(self._brokers, self.group, self.options, self._timer.call_later, self._bad)
        # quiver.testing's fake network has no sockets to hold pulls on: there the IO thread holds them
        if self.options.direct_poll and isinstance(self._transport, Transport):
            self._direct = DirectPolls(credentials_from(self.credentials))
            self._poller = DirectPoller(self._direct, self._pulled_buf, self._puller, self.options.suspend_ms,
                                        selector=self._subscriptions.get, started=lambda: self._started,
                                        pulled=self._pulled, pull=self._pull, call_later=self._timer.call_later)
        self._rebalance.start("pull-consumer-rebalance")
        if self.options.auto_commit:
            threading.Thread(target=self._auto_commit, name="pull-consumer-commit", daemon=True).start()
        return self

    def assignment(self) -> list[MessageQueue]:
        """The queues this consumer owns now (they change as group members come and go)."""
        return sorted(self._queues)

    def stats(self) -> dict[str, Any]:
        """Counters: records skipped as undecodable, offset resets applied; and the subscribed
        topics that do not exist yet (waited for: `wait_for_topic`)."""
        return {"undecodable_records": self._bad.count, "offset_resets": self._resets,
                "missing_topics": self._missing_topics()}

    # ---- assignment and offsets ---------------------------------------------------

    def _heartbeat_payload(self) -> rq.HeartBeat:
        """The group's heartbeat: its subscriptions, what brokers rebalance and filter by."""
        me = rq.ConsumerData(group=self.group, subscriptions=filter_route.wire_subscriptions(self._subscriptions),
                             consume_type="PULL", model="CLUSTERING", consume_from=str(self.options.consume_from))
        return rq.HeartBeat(client_id=self.client_id, consumers=[me])

    def _on_ids_changed(self, addr: str, env: Envelope) -> None:
        self._rebalance.notified(addr, env)

    def _on_reset(self, addr: str, env: Envelope) -> None:
        req = rq.ResetConsumerClientOffset.decode(env.ext)
        if req.group == self.group:
            self._reset({MessageQueue(req.topic, req.broker, q): off for q, off in req.offsets})

    _push_handlers = {RequestCode.NOTIFY_CONSUMER_IDS_CHANGED: _on_ids_changed,
                     RequestCode.RESET_CONSUMER_CLIENT_OFFSET: _on_reset}

    def _rebalance_now(self) -> None:
        """Take this client's share of every subscribed topic's queues; give up the rest."""
        self._rebalance.step()

    def _take(self, mq: MessageQueue, notified_at: float | None = None) -> bool:
        try:
            addr = self._read_addr(mq.topic, mq.broker)   # a slave while the master is down
            if addr is None:
                raise ClientError(f"broker {mq.broker!r} of topic {mq.topic!r} has no address")
            offset = query_offset(self._brokers, self.group, mq, addr)
            if offset is None:
                offset = start_offset(self._brokers, mq, addr, self.options.consume_from)
        except (QuiverError, KeyError) as exc:
            log.warning("cannot take %s: %s", mq, exc)
            return False
        st = self._queues[mq] = QueueState(mq, addr, offset)
        self._pull(st)
        return True

    def _drop(self, mq: MessageQueue) -> None:
        with self._commit_lock:
            st = self._pulled_buf.remove(mq)
            if st is None:
                return
            if st.committed != st.consumed:
                try:
                    self._store(st, st.consumed)
                except QuiverError as exc:
                    log.warning("commit of released %s failed: %s", mq, exc)
        log.info("released %s at offset %d", mq, st.consumed)

    def seek(self, mq: MessageQueue, offset: int) -> None:
        """Consume `mq` from `offset` on: what is buffered of it is dropped, the next poll starts
        there (commit() stores it). ClientError if the queue is not assigned to this consumer."""
        st = self._queues.get(mq)
        if st is None:
            raise ClientError(f"{mq} is not assigned to this consumer")
        self._restart_at(st, offset)

    def _restart_at(self, st: QueueState, offset: int) -> None:
        """Drop what is buffered of the queue and its pull under way; pull again from `offset`."""
        self._pulled_buf.restart(st, offset)
        self._pull(st)

    def _reset(self, offsets: dict[MessageQueue, int]) -> None:
        """The broker reset the group's offsets (RESET_CONSUMER_CLIENT_OFFSET): each owned queue
        named restarts at its new offset, which is committed again at once. Under the commit
        lock: a commit of the old position (it may have reached the broker after the reset
        stored the new one) is answered before this one is sent."""
        with self._commit_lock:
            for mq, offset in offsets.items():
                st = self._queues.get(mq)
                if st is None:
                    continue
                dropped = st.buffered
                self._resets += 1   # before the restart: a poll may drain the queue at once
                self._restart_at(st, offset)
                log.info("%s reset to offset %d by its broker (%d buffered message(s) dropped)", mq, offset, dropped)
                try:
                    self._store(st, offset)
                except QuiverError as exc:
                    st.committed = None   # the next commit stores it
                    log.warning("commit of the reset offset of %s failed: %s", mq, exc)

    def seek_to_timestamp(self, ts_ms: int) -> None:
        """`seek` every assigned queue to its first message stored at or after `ts_ms` (epoch ms)."""
        for mq, st in list(self._queues.items()):
            req = rq.SearchOffsetByTimestamp(topic=mq.topic, queue_id=mq.queue_id, timestamp=int(ts_ms))
            self.seek(mq, rq.OffsetReply.decode(self._call_broker(st.addr, req).ext).offset)

    def seek_to_begin(self) -> None:
        """`seek` every assigned queue to its first stored message."""
        for mq, st in list(self._queues.items()):
            req = rq.GetMinOffset(topic=mq.topic, queue_id=mq.queue_id)
            self.seek(mq, rq.OffsetReply.decode(self._call_broker(st.addr, req).ext).offset)

    def seek_to_end(self) -> None:
        """`seek` every assigned queue past its last stored message: only what arrives from now
        on is consumed (Kafka's seek_to_end)."""
        for mq, st in list(self._queues.items()):
            req = rq.GetMaxOffset(topic=mq.topic, queue_id=mq.queue_id)
            self.seek(mq, rq.OffsetReply.decode(self._call_broker(st.addr, req).ext).offset)

    def committed(self, mq: MessageQueue) -> int | None:
        """The offset this consumer last stored for `mq`, None if none yet or not assigned."""
        st = self._queues.get(mq)
        return st.committed if st else None

    def commit(self) -> None:
        """Store the consumed position of every queue on its broker."""
        with self._commit_lock:
            self._commit()

    def _commit(self) -> None:
        for st in list(self._queues.values()):
            if st.committed != st.consumed:
                self._store(st, st.consumed)

    def _store(self, st: QueueState, offset: int) -> None:
        """Store a queue's offset on its broker (commit, release, reset); QuiverError if it fails."""
        req = rq.UpdateConsumerOffset(group=self.group, topic=st.mq.topic, queue_id=st.mq.queue_id, offset=offset)
        try:
            self._call_broker(st.addr, req)
        except ClientError:  # its master is unreachable: the slave keeps it meanwhile
            self._read_failed(st.addr)
            addr = self._read_addr(st.mq.topic, st.mq.broker, wait=False)
            if not addr or addr == st.addr:
                raise
            self._call_broker(addr, req)
        st.committed = offset

    # ---- pulling (IO-thread callbacks) --------------------------------------------------

    def _pull(self, st: QueueState) -> None:
        # IO thread, timer and poll() all start pulls: the buffer hands out the queue's one pull
        claim = self._pulled_buf.claim(st) if self._started else None
        if claim is None:
            return
        _, gen, offset, single = claim
        try:   # direct_poll: the IO thread only fetches what is stored, poll() holds the waiting pulls
            self._puller.pull(st, offset, self._subscriptions.get(st.mq.topic),
                              lambda pulled, retry_s: self._pulled(st, gen, offset, single, pulled, retry_s),
                              single=single, suspend_ms=0 if self._direct is not None else None)
        except Exception:
            log.exception("pull of %s not sent: trying again", st.mq)
            self._pulled(st, gen, offset, single, None, self._puller.error_delay_s)

    def _pulled(self, st: QueueState, gen: int, offset: int, single: bool, pulled: Pulled | None,
                retry_s: float) -> None:
        if pulled is not None:
            try:
                if not self._apply(st, gen, offset, single, pulled):
                    return
                retry_s = 0.0
            except Exception:   # the queue must not stop: what went wrong is logged, the pull repeated
                log.exception("answer to the pull of %s from offset %d not taken: pulling again", st.mq, offset)
                pulled, retry_s = None, self._puller.error_delay_s
        if not self._pulled_buf.answered(st, gen):
            return
        if pulled is not None and self._direct is not None and _caught_up(pulled):
            self._direct.wake()   # nothing more stored: the next poll() holds its pull
        elif pulled is not None:
            self._pull(st)
        elif self._started:
            self._timer.call_later(retry_s, self._pull, st)

    def _apply(self, st: QueueState, gen: int, offset: int, single: bool, pulled: Pulled) -> bool:
        """Move the queue by a pull's answer; False when a seek, reset or drop superseded it."""
        if pulled.status is FOUND:
            got = self._puller.decode(st, pulled, self._subscriptions.get(st.mq.topic), offset, single)
            buffered = self._pulled_buf.found(st, gen, got)
            if buffered and self._direct is not None:
                self._direct.wake()
            return buffered is not None
        # nothing to hand over (NO_NEW_MSG, NO_MATCHED_MSG) or the offset moved: the position moves
        moved = pulled.status is OFFSET_ILLEGAL
        if moved:
            log.info("offset of %s moved from %d to %d", st.mq, offset, pulled.next)
        return self._pulled_buf.moved(st, gen, pulled.next, moved)

    # ---- app side ---------------------------------------------------------------------

    def poll(self, timeout: float = 1.0, max_messages: int | None = None) -> list[MessageExt]:
        """Messages pulled so far (waits up to timeout for the first).

        A subscribed topic that a name server answered TOPIC_NOT_EXIST for (at
        start, subscribe or a rebalance; not merely unreachable name servers) is
        waited for, as RocketMQ's lite pull consumer and Kafka do: logged once,
        listed in `stats()["missing_topics"]`, looked for every second and
        consumed once created (a dead-letter topic before the first dead
        letter). With `wait_for_topic=False` it is reported by raising
        TopicNotExistError naming it, only when there is nothing to return: at
        once if no subscribed topic exists, else after the wait."""
        self._need_started()
        raising = not self.options.wait_for_topic
        if (self._poller is not None and timeout > 0 and not self._pulled_buf.items
                and not (raising and self._missing_topics(every=True))):
            self._poller.poll(time.monotonic() + timeout)
            timeout = 0
        with self._cond:
            if not self._pulled_buf.items:
                if not (raising and self._missing_topics(every=True)):
                    self._cond.wait(timeout)
            out, resume = self._pulled_buf.drain(max_messages)
        for st in resume:
            self._pull(st)
        tracer = self.tracer
        if out and tracer is not None:   # as RocketMQ's lite pull consumer: handed over counts as consumed
            tracer.sub_after(out, tracer.sub_before(out), True)
        if not out and raising:
            missing = self._missing_topics()
            if missing:
                raise TopicNotExistError(f"topic {', '.join(map(repr, missing))} does not exist (the name server "
                                         "has no route): create it, or fix the subscription")
        return out

    def _missing_topics(self, every: bool = False) -> list[str]:
        """Subscribed topics known not to exist (all of them, or none, with `every`); the
        rebalance loop looks for them every second."""
        missing = sorted(t for t in list(self._rebalancer.missing) if t in self._subscriptions)
        if every and len(missing) < len(self._subscriptions):
            return []
        return missing

    def _auto_commit(self) -> None:
        # its own thread: a commit waits on brokers, and must not hold up pull retries
        while not self._stop.wait(self.options.commit_interval_ms / 1000):
            try:
                self.commit()
            except QuiverError as exc:
                log.warning("auto commit failed: %s", exc)

    def shutdown(self) -> None:
        """Stop pulling, commit (with auto_commit; a failure is logged) and leave the group."""
        if not self._started:
            return
        self._stop.set()
        self._rebalance.stop()
        self._rebalance.telling_revoked()   # the listener may commit, as on a rebalance
        if self.options.auto_commit:
            try:
                self.commit()
            except QuiverError as exc:
                log.warning("final commit failed: %s", exc)
        self._timer.stop()
        if self._direct is not None:
            self._direct.close()
        super().shutdown()
