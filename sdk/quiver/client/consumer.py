"""PullConsumer: subscribe, poll, commit, seek, seek_to_timestamp.

Each assigned queue keeps one long-polling pull in flight (queue_puller.py:
where it goes, failover, the decoded answer); pulled messages go into a local
buffer that `poll()` drains. The tag expression is checked on the broker by
hash and again here by string. A queue whose buffered messages reach
`cached_msgs_per_queue` pauses until `poll()` has taken half of them.
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
the idle queues on its own thread's sockets (direct_poll.py) and reads their
answers itself; the IO thread then only fetches what is stored (suspend 0) and
leaves a caught-up queue to the next poll(). A held pull its thread does not
read in time (the thread stopped polling) is taken back: its answer is dropped
and the IO thread pulls the queue again from the same offset.
Settings: options.py's ConsumerOptions.
"""

import collections
import logging
import threading
import time
from typing import Any, Self

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
from quiver.client.options import ConsumerOptions
from quiver.client.process_queue import DelayedCalls
from quiver.client.direct_poll import DirectPolls, HeldPulls
from quiver.client.queue_puller import FOUND, NO_FILTER_RETRY_S, NO_NEW_MSG, OFFSET_ILLEGAL, BadRecords, Pulled, \
    QueuePuller
from quiver.wire.transport import Transport
from quiver.client.rebalance import RebalanceLoop, Rebalancer
from quiver.client.producer import client_tracer
from quiver.client.tracing import enabled as trace_enabled

log = logging.getLogger(__name__)

HELD_GRACE_S = 1.0   # direct_poll: a held pull not read this long after its suspend ends is taken back


def _caught_up(pulled: Pulled) -> bool:
    """Nothing stored past this answer (a pull now would find nothing new)."""
    return pulled.status is NO_NEW_MSG or (pulled.status is FOUND and pulled.next >= pulled.max)


class _QueueState:
    __slots__ = ("mq", "_addr", "next", "consumed", "committed", "in_flight", "buffered", "paused", "gen",
                 "narrow_until", "held_id")

    def __init__(self, mq: MessageQueue, addr: str, offset: int) -> None:
        self.mq, self._addr = mq, addr
        self.next = offset          # next offset to pull
        self.consumed = offset      # next offset the app has not polled yet
        self.committed: int | None = None
        self.in_flight = False
        self.buffered = 0
        self.paused = False
        self.gen = 0                # bumped by seek, reset and drop: replies of older pulls are dropped
        self.narrow_until = 0       # below this offset pull one record at a time (after an unwalkable answer)
        self.held_id: int | None = None   # direct_poll: the pull a poll() thread holds for it

    @property
    def addr(self) -> str:
        """The broker address reads and commits go to (the master, or a slave while it is down)."""
        return self._addr

    @addr.setter
    def addr(self, addr: str) -> None:
        if addr != self._addr:
            self._addr, self.committed = addr, None   # the new address has not stored our offset


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
    _direct: DirectPolls | None = None   # direct_poll on a real transport (start())

    def __init__(self, group: str, namesrv: str | list[str] | None = None, *,
                 options: ConsumerOptions | None = None, credentials: str | Credentials | None = None,
                 trace: bool | None = None, **settings: Any) -> None:
        super().__init__(namesrv, credentials=credentials,   # SubBefore / SubAfter when poll() hands messages over
                         tracer_factory=client_tracer if trace_enabled(trace) else None)
        check_group(group)
        self.options = opts = ConsumerOptions.build(options, **settings)
        if opts.broadcast:
            raise ValueError("PullConsumer does not broadcast: use PushConsumer(broadcast=True)")
        self.group = group
        self.heartbeat_interval_s = opts.heartbeat_interval_ms / 1000
        self.subscriptions: dict[str, MessageSelector] = {}
        self._queues: dict[MessageQueue, _QueueState] = {}
        # (queue, its pulled messages, the offset after them), in pull order
        self._buffer: collections.deque[tuple[_QueueState, list[MessageExt], int]] = collections.deque()
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._commit_lock = threading.Lock()   # commits and offset resets, one at a time
        self._bad = BadRecords(opts.on_bad_record)
        self._resets = 0
        self._rebalancer = Rebalancer(self, group, opts.allocate)   # .missing: subscribed topics not there yet
        self._rebalance = RebalanceLoop(self._rebalancer, opts.rebalance_interval_ms / 1000,
                                        lambda: list(self.subscriptions), self._queues, self._take, self._drop)

    def subscribe(self, topic: str, expression: str | MessageSelector = "*") -> None:
        """Consume `topic`'s messages that match `expression`: a tag expression ("*", "TagA ||
        TagB") or MessageSelector.sql(...). Allowed while running (the group rebalances at once);
        an SQL92 expression is checked then (SubscriptionParseError), else at start()."""
        sel = filter_route.as_selector(expression)
        if self._started:
            filter_route.check_subscription(self, topic, sel, self.group)
        self.subscriptions[topic] = sel
        if self._started:
            self._resubscribed()

    def unsubscribe(self, topic: str) -> None:
        """Stop consuming `topic`, as RocketMQ's lite pull consumer does: nothing more of it is
        handed out, its queues' consumed offsets are committed and the queues given up, and the
        group rebalances. Allowed before start() and while running; an unknown topic is ignored."""
        if self._forget(topic) and self._started:
            self._resubscribed()

    def _forget(self, topic: str) -> bool:
        if self.subscriptions.pop(topic, None) is None:   # else its buffer goes, its queues pause until released
            return False
        with self._cond:
            self._buffer = collections.deque(m for m in self._buffer if m[0].mq.topic != topic)
            for st in self._queues.values():
                if st.mq.topic == topic:
                    st.gen += 1   # a pull under way is ignored
                    st.buffered, st.paused, st.in_flight = 0, True, False
        return True

    def _resubscribed(self) -> None:
        self.send_heartbeats()   # brokers learn the subscriptions; a queue given up commits first
        self.rebalance()

    def _change_soon(self, topic: str, expression: str | MessageSelector | None) -> None:
        """subscribe (`expression`) or unsubscribe (None) without waiting for the brokers: the
        rebalance runs on a thread of its own (AsyncPullConsumer, on an event loop)."""
        if expression is None:
            if not self._forget(topic):
                return
        else:
            self.subscriptions[topic] = filter_route.as_selector(expression)   # SQL92: checked by its pulls
        threading.Thread(target=self._resubscribed, name="pull-consumer-subscribe", daemon=True).start()

    def start(self) -> Self:
        """Connect, check SQL92 subscriptions (SubscriptionParseError), take this client's share
        of the queues and start pulling; returns the consumer. Again: does nothing."""
        if self._started:
            return self
        super().start()
        try:
            for topic, sel in self.subscriptions.items():
                filter_route.check_subscription(self, topic, sel, self.group)
        except QuiverError:
            super().shutdown()
            raise
        self._stop.clear()
        self._timer = DelayedCalls(f"pull-consumer-{self.group}")
        self._puller = QueuePuller(self, self.group, self.options, self._timer.call_later, self._bad)
        # quiver.testing's fake network has no sockets to hold pulls on: there the IO thread holds them
        self._direct = (DirectPolls(credentials_from(self.credentials))
                        if self.options.direct_poll and isinstance(self.transport, Transport) else None)
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

    def heartbeat_payload(self) -> rq.HeartBeat:
        """The group's heartbeat: its subscriptions, what brokers rebalance and filter by."""
        me = rq.ConsumerData(group=self.group, subscriptions=filter_route.wire_subscriptions(self.subscriptions),
                             consume_type="PULL", model="CLUSTERING", consume_from=str(self.options.consume_from))
        return rq.HeartBeat(client_id=self.client_id, consumers=[me])

    def _on_ids_changed(self, addr: str, env: Envelope) -> None:
        self._rebalance.notified(addr, env)

    def _on_reset(self, addr: str, env: Envelope) -> None:
        req = rq.ResetConsumerClientOffset.decode(env.ext)
        if req.group == self.group:
            self._reset({MessageQueue(req.topic, req.broker, q): off for q, off in req.offsets})

    push_handlers = {RequestCode.NOTIFY_CONSUMER_IDS_CHANGED: _on_ids_changed,
                     RequestCode.RESET_CONSUMER_CLIENT_OFFSET: _on_reset}

    def rebalance(self) -> None:
        """Take this client's share of every subscribed topic's queues; give up the rest."""
        self._rebalance.step()

    def _take(self, mq: MessageQueue, notified_at: float | None = None) -> bool:
        try:
            addr = self.read_addr(mq.topic, mq.broker)   # a slave while the master is down
            if addr is None:
                raise ClientError(f"broker {mq.broker!r} of topic {mq.topic!r} has no address")
            offset = query_offset(self, self.group, mq, addr)
            if offset is None:
                offset = start_offset(self, mq, addr, self.options.consume_from)
        except (QuiverError, KeyError) as exc:
            log.warning("cannot take %s: %s", mq, exc)
            return False
        st = self._queues[mq] = _QueueState(mq, addr, offset)
        self._pull(st)
        return True

    def _drop(self, mq: MessageQueue) -> None:
        with self._commit_lock:
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

    def seek(self, mq: MessageQueue, offset: int) -> None:
        """Consume `mq` from `offset` on: what is buffered of it is dropped, the next poll starts
        there (commit() stores it). ClientError if the queue is not assigned to this consumer."""
        st = self._queues.get(mq)
        if st is None:
            raise ClientError(f"{mq} is not assigned to this consumer")
        self._restart_at(st, offset)

    def _restart_at(self, st: _QueueState, offset: int) -> None:
        """Drop what is buffered of the queue and its pull under way; pull again from `offset`."""
        with self._cond:
            st.gen += 1
            self._buffer = collections.deque(m for m in self._buffer if m[0] is not st)
            st.buffered = 0
            st.next = st.consumed = offset
            st.in_flight = st.paused = False
            st.narrow_until = 0
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
                    self.call_broker(st.addr, rq.UpdateConsumerOffset(group=self.group, topic=mq.topic,
                                                                      queue_id=mq.queue_id, offset=offset))
                    st.committed = offset
                except QuiverError as exc:
                    st.committed = None   # the next commit stores it
                    log.warning("commit of the reset offset of %s failed: %s", mq, exc)

    def seek_to_timestamp(self, ts_ms: int) -> None:
        """`seek` every assigned queue to its first message stored at or after `ts_ms` (epoch ms)."""
        for mq, st in list(self._queues.items()):
            req = rq.SearchOffsetByTimestamp(topic=mq.topic, queue_id=mq.queue_id, timestamp=int(ts_ms))
            self.seek(mq, rq.OffsetReply.decode(self.call_broker(st.addr, req).ext).offset)

    def seek_to_begin(self) -> None:
        """`seek` every assigned queue to its first stored message."""
        for mq, st in list(self._queues.items()):
            req = rq.GetMinOffset(topic=mq.topic, queue_id=mq.queue_id)
            self.seek(mq, rq.OffsetReply.decode(self.call_broker(st.addr, req).ext).offset)

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
        # IO thread, timer and poll() all start pulls: claiming the queue's one pull is
        # atomic, or two pulls at the same offset would deliver its messages twice
        with self._cond:
            if not self._started or st.in_flight or st.paused:
                return
            if st.buffered >= self.options.cached_msgs_per_queue:
                st.paused = True
                return
            st.in_flight = True
            gen, offset = st.gen, st.next
            single = offset < st.narrow_until
        try:   # direct_poll: the IO thread only fetches what is stored, poll() holds the waiting pulls
            self._puller.pull(st, offset, self.subscriptions.get(st.mq.topic),
                              lambda pulled, retry_s: self._pulled(st, gen, offset, single, pulled, retry_s),
                              single=single, suspend_ms=0 if self._direct is not None else None)
        except Exception:
            log.exception("pull of %s not sent: trying again", st.mq)
            self._pulled(st, gen, offset, single, None, self._puller.error_delay_s)

    def _pulled(self, st: _QueueState, gen: int, offset: int, single: bool, pulled: Pulled | None,
                retry_s: float) -> None:
        if pulled is not None:
            try:
                if not self._apply(st, gen, offset, single, pulled):
                    return
                retry_s = 0.0
            except Exception:   # the queue must not stop: what went wrong is logged, the pull repeated
                log.exception("answer to the pull of %s from offset %d not taken: pulling again", st.mq, offset)
                pulled, retry_s = None, self._puller.error_delay_s
        with self._cond:
            if gen != st.gen:
                return  # seek, reset or drop restarted the queue, in_flight included
            st.in_flight = False  # only now: st.next has moved, so the next pull starts past this batch
            st.held_id = None
        if pulled is not None and self._direct is not None and _caught_up(pulled):
            self._direct.wake()   # nothing more stored: the next poll() holds its pull
        elif pulled is not None:
            self._pull(st)
        elif self._started:
            self._timer.call_later(retry_s, self._pull, st)

    def _apply(self, st: _QueueState, gen: int, offset: int, single: bool, pulled: Pulled) -> bool:
        """Move the queue by a pull's answer; False when a seek, reset or drop superseded it."""
        if pulled.status is FOUND:
            got = self._puller.decode(st, pulled, self.subscriptions.get(st.mq.topic), offset, single)
            nxt, msgs = got.next, got.msgs
            with self._cond:
                if gen != st.gen:
                    return False
                st.next = nxt
                st.narrow_until = max(st.narrow_until, got.narrow_until)
                if msgs:
                    self._buffer.append((st, msgs, nxt))
                    st.buffered += len(msgs)
                    self._cond.notify_all()
                    if self._direct is not None:
                        self._direct.wake()
                elif st.consumed < nxt and st.buffered == 0:
                    st.consumed = nxt  # all filtered out (or undecodable): still consumed
            return True
        # nothing to hand over (NO_NEW_MSG, NO_MATCHED_MSG) or the offset moved: the position moves
        nxt = pulled.next
        moved = pulled.status is OFFSET_ILLEGAL
        if moved:
            log.info("offset of %s moved from %d to %d", st.mq, offset, nxt)
        with self._cond:
            if gen != st.gen:
                return False
            st.next = nxt
            if moved:
                st.narrow_until = 0
                if st.buffered:   # what is buffered lies elsewhere (the group's offset was reset meanwhile)
                    self._buffer = collections.deque(m for m in self._buffer if m[0] is not st)
                    st.buffered = 0
            if st.buffered == 0 and (moved or st.consumed < nxt):
                st.consumed = nxt
        return True

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
        if (self._direct is not None and timeout > 0 and not self._buffer
                and not (raising and self._missing_topics(every=True))):
            self._poll_direct(self._direct, time.monotonic() + timeout)
            timeout = 0
        out: list[MessageExt] = []
        resume: list[_QueueState] = []
        with self._cond:
            if not self._buffer:
                if not (raising and self._missing_topics(every=True)):
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
                if st.paused and st.buffered < self.options.cached_msgs_per_queue // 2:
                    st.paused = False
                    resume.append(st)
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

    def _poll_direct(self, direct: DirectPolls, deadline: float) -> None:
        """Until something is buffered or `deadline`: hold the pulls of idle queues on this
        thread's sockets (direct_poll.py), reading their answers as they come."""
        held = direct.mine()
        if held is None:
            return   # shut down
        try:
            while True:
                for entry, env in direct.wait(held, 0):
                    self._held_answered(entry, env)
                left = deadline - time.monotonic()
                with self._cond:
                    if self._buffer or not self._started or left <= 0:
                        return
                    claims = self._claim_idle()   # each claim is held or handed back below
                for claim in claims:
                    self._hold(direct, held, claim, left)
                for entry, env in direct.wait(held, left):
                    self._held_answered(entry, env)
        finally:
            direct.release(held)

    def _claim_idle(self) -> list[tuple[_QueueState, int, int, bool]]:
        """Queues no pull is under way for (caller holds _cond): claimed, as `_pull` claims them."""
        claims = []
        for st in self._queues.values():
            if st.in_flight or st.paused:
                continue
            if st.buffered >= self.options.cached_msgs_per_queue:
                st.paused = True
                continue
            st.in_flight = True
            claims.append((st, st.gen, st.next, st.next < st.narrow_until))
        return claims

    def _hold(self, direct: DirectPolls, held: HeldPulls, claim: tuple[_QueueState, int, int, bool],
              left_s: float) -> None:
        """Send a claimed queue's pull on this thread's socket, held by the broker at most until
        this poll's deadline; without a live connection the IO thread pulls it instead."""
        st, gen, offset, single = claim
        suspend_ms = max(1, min(self.options.suspend_ms, int(left_s * 1000)))
        try:
            prepared = self._puller.prepare(st, offset, self.subscriptions.get(st.mq.topic), single=single,
                                            suspend_ms=suspend_ms)
        except Exception:
            log.exception("pull of %s not prepared: trying again", st.mq)
            prepared = None
        if prepared is None:
            self._pulled(st, gen, offset, single, None, NO_FILTER_RETRY_S)
            return
        via, sql, req = prepared
        req_id = direct.send(held, via, req, (st, gen, offset, single, via, sql))
        with self._cond:
            if gen != st.gen:
                return
            if req_id is None:
                st.in_flight = False
            else:
                st.held_id = req_id
        if req_id is None:
            self._pull(st)
        else:   # not read by its thread in time (it stopped polling): the IO thread takes the queue back
            self._timer.call_later(suspend_ms / 1000 + HELD_GRACE_S, self._take_back, st, gen, req_id)

    def _held_answered(self, entry: tuple[_QueueState, int, int, bool, str, bool], env: Envelope) -> None:
        st, gen, offset, single, via, sql = entry
        pulled, retry_s = self._puller.answer(st, via, sql, env)
        self._pulled(st, gen, offset, single, pulled, retry_s)

    def _take_back(self, st: _QueueState, gen: int, req_id: int) -> None:
        with self._cond:
            if st.gen != gen or st.held_id != req_id or self._queues.get(st.mq) is not st:
                return
            st.gen += 1   # the held answer, if its thread reads it after all, is dropped
            st.in_flight, st.held_id = False, None
        self._pull(st)

    def _missing_topics(self, every: bool = False) -> list[str]:
        """Subscribed topics known not to exist (all of them, or none, with `every`); the
        rebalance loop looks for them every second."""
        missing = sorted(t for t in list(self._rebalancer.missing) if t in self.subscriptions)
        if every and len(missing) < len(self.subscriptions):
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
        if self.options.auto_commit:
            try:
                self.commit()
            except QuiverError as exc:
                log.warning("final commit failed: %s", exc)
        self._timer.stop()
        if self._direct is not None:
            self._direct.close()
        super().shutdown()
