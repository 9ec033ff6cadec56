"""Producer: send, send_async (auto-batched, pipelined), send_oneway, send_batch, send_orderly.

`send_async` keeps at most `batch_in_flight` requests in flight per (broker,
queue); messages that arrive while they all are wait in that queue's buffer and
leave together as one batch when a reply returns: no linger timer, batching
grows with load (bounded by count and bytes). A message that finds a free slot
leaves at once: with one slot it waited for the whole round trip of the request
ahead of it (at 10k msg/s, p50 1.1 ms from send_async to its result instead of
the round trip's 0.3 ms). Failed sends are retried on another broker
(RocketMQ: 2 retries), and the failing broker is avoided for a while.
With `trace=True` (or QUIVER_TRACE=1) every answered send is also recorded as a
Pub trace event (tracing.py), off the send's path. `client_tracer` is every
traced client's tracer factory: its trace queue sends through a Producer of its own.
"""

import itertools
from operator import itemgetter
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from quiver.wire import requests as rq
from quiver.wire.protocol import Envelope
from quiver.wire.transport import Transport
from quiver.wire.curve import Credentials
from quiver.client.base import ClientBase, MessageQueue, Route
from quiver.wire.codes import RequestCode, ResponseCode
from quiver.errors import ClientError, MessageIllegalError, QuiverError, error_for
from quiver.wire.futures import LightFuture, set_results
from quiver.client.tracing import ClientTrace, TraceQueue, enabled as trace_enabled
from quiver.client.message import Message, SendResult, SendStatus, UniqueIdMaker, send_results
from quiver.client.request_reply import Requesting
from quiver.client.metrics import ClientMetrics
from quiver.wire.properties import (DELAY, KEYS, RESERVED_PROPERTIES, TAGS, TIMER_DELIVER_MS, TRACE_ON, UNIQ_KEY,
                                    java_hash)
from quiver.wire.property_string import NAME_SEP, PROP_SEP, format_properties
from quiver.wire.ids import host_bytes
from quiver.wire.validation import DEFAULT_MAX_MESSAGE_BYTES, check_body, check_properties_size, check_topic

log = logging.getLogger(__name__)

# RocketMQ's MessageQueueSelector: fn(writable queues of the topic, message, arg) -> the queue to use
QueueSelector = Callable[[list[MessageQueue], Message, object], MessageQueue]

# what a send's reply becomes: build(reply, queue, broker address)
Build = Callable[[Envelope, MessageQueue, str], Any]
# one message of send_async waiting in a queue's buffer: (msg id, properties, body, flag, its Future, attempt)
_Item = tuple[str, str, bytes, int, Future[SendResult], int]
_ID, _PROPS, _BODY, _FLAG, _FUTURE = (itemgetter(i) for i in range(5))

RETRYABLE = {ResponseCode.TOPIC_NOT_EXIST, ResponseCode.SERVICE_NOT_AVAILABLE, ResponseCode.SYSTEM_ERROR,
             ResponseCode.SYSTEM_BUSY, ResponseCode.NO_PERMISSION, ResponseCode.GO_AWAY}
_STATUS: dict[int, SendStatus] = {
           ResponseCode.SUCCESS: SendStatus.SEND_OK, ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
           ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
           ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE}


MASTERLESS_ROUTE_S = 1.0   # a route whose brokers have no master is asked for again after this long
_SCHEDULED_AT = DELAY + NAME_SEP
_TIMER_AT = TIMER_DELIVER_MS + NAME_SEP
_UNIQ_AT = UNIQ_KEY + NAME_SEP


def _retryable(exc: Exception) -> bool:
    """Worth another attempt on another broker: no answer came, or its code is in RETRYABLE."""
    return isinstance(exc, ClientError) or getattr(exc, "code", None) in RETRYABLE


class _Batcher:
    """One queue's send buffer and its requests in flight (at most the producer's batch_in_flight)."""
    __slots__ = ("lock", "in_flight", "items", "bytes")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.in_flight = 0
        self.items: list[_Item] = []
        self.bytes = 0


class Producer(Requesting, ClientBase):
    """Sends messages to a topic's queues (round robin over the writable queues, avoiding a
    broker that failed lately). `namesrv`: "host:port;host:port" (None: QUIVER_NAMESRV or
    127.0.0.1:9876); `send_timeout` in seconds; `retries`: further attempts on another broker
    for a retryable error; `auto_batch`: send_async groups what waits for a queue into one
    request (at most `batch_max_messages` / `batch_max_bytes`, with up to `batch_in_flight`
    requests under way per queue: 1 batches the most, more answers sooner); `max_message_bytes`: the body
    limit checked before sending; `credentials`: a key file path or Credentials when auth is on
    (None: QUIVER_CREDENTIALS); `trace`: record Pub trace events (None: QUIVER_TRACE=1); `metrics`: a
    quiver.client.metrics.ClientMetrics to record sends into (None: none recorded).
    ClientError if no name server is given; a bad credentials path fails here.

        with Producer("pg", namesrv="127.0.0.1:9876") as p:
            r = p.send(Message("Orders", b"o-1", keys=["o-1"]))
            futs = [p.send_async(Message("Orders", b"%d" % i)) for i in range(1000)]
            results = [f.result() for f in futs]
    """

    def __init__(self, group: str = "DEFAULT_PRODUCER", namesrv: str | list[str] | None = None,
                 send_timeout: float = 3.0, retries: int = 2, auto_batch: bool = True,
                 batch_max_messages: int = 512, batch_max_bytes: int = 1 << 20,
                 max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES, credentials: str | Credentials | None = None,
                 trace: bool | None = None, batch_in_flight: int = 2, metrics: ClientMetrics | None = None) -> None:
        super().__init__(namesrv, send_timeout, credentials,   # trace None: QUIVER_TRACE=1 turns it on
                         tracer_factory=client_tracer if trace_enabled(trace) else None)
        self.group = group
        self.metrics = metrics
        self.send_timeout = send_timeout
        self.retries = retries
        self._auto_batch = auto_batch
        self._batch_max_messages = batch_max_messages
        self._batch_max_bytes = batch_max_bytes
        if not isinstance(batch_in_flight, int) or batch_in_flight < 1:
            raise ValueError(f"batch_in_flight must be an int >= 1, got {batch_in_flight!r}")
        self._batch_in_flight = batch_in_flight
        self.max_message_bytes = max_message_bytes
        self._ids = UniqueIdMaker()
        self._rr = itertools.count()
        self._batchers: dict[MessageQueue, _Batcher] = {}
        self._batchers_lock = threading.Lock()
        self._batcher_of: dict[int, tuple[MessageQueue, _Batcher]] = {}
        self._valid_topics: set[str] = set()

    # ---- message -> wire ------------------------------------------------------------

    def _encode(self, msg: Message, system: dict[str, str] | None = None) -> tuple[str, str]:
        """(msg id, properties string) after validating the message; `system`: reserved properties
        the SDK itself sets (request-reply's)."""
        if msg.topic not in self._valid_topics:
            check_topic(msg.topic, for_send=True)
            if len(self._valid_topics) < 4096:
                self._valid_topics.add(msg.topic)
        if type(msg.body) is not bytes or not 0 < len(msg.body) <= self.max_message_bytes:
            check_body(msg.body, self.max_message_bytes, tombstone=bool(msg.keys))
        msg_id = self._ids.next()
        if not (msg.tags or msg.keys or msg.properties or msg.delay_level or system or self._traced
                or msg.deliver_at is not None or msg.delay_ms is not None):
            return msg_id, f"{_UNIQ_AT}{msg_id}{PROP_SEP}"   # most sends: the id alone, no map to format
        parts: dict[str, Any] = {UNIQ_KEY: msg_id}
        if msg.tags:
            parts[TAGS] = msg.tags
        keys = msg.key_list()
        if keys:
            parts[KEYS] = " ".join(keys)
        if msg.delay_level:
            parts[DELAY] = int(msg.delay_level)
        due = msg.deliver_at
        if due is None and msg.delay_ms is not None:
            due = int(time.time() * 1000) + int(msg.delay_ms)
        if due is not None and not msg.delay_level:
            parts[TIMER_DELIVER_MS] = int(due)
        for k, v in msg.properties.items():
            if k in RESERVED_PROPERTIES:
                raise MessageIllegalError(f"property {k!r} is reserved by Quiver: use another name")
            if not k or NAME_SEP in k or PROP_SEP in k or NAME_SEP in str(v) or PROP_SEP in str(v):
                raise MessageIllegalError(f"property {k!r} has an empty name or a control character")
            parts[k] = v
        if system:
            parts.update(system)
        if self._traced:  # services add their events only for messages marked so
            parts[TRACE_ON] = "true"
        props = format_properties(parts)
        if len(props) > 8000:
            check_properties_size(len(props.encode()))
        return msg_id, props

    def _result(self, env: Envelope, mq: MessageQueue, addr: str, msg_ids: list[str]) -> list[SendResult]:
        status = _STATUS.get(env.code)
        if status is None:
            raise error_for(env.code, env.remark or "")
        sent = rq.SendReply.decode(env.ext)
        return send_results(status, msg_ids, mq.broker, sent.queue_id, sent.queue_offset, sent.topic,
                            self._store_host(addr), sent.phys_offsets)

    _host_cache: dict[str, bytes] = {}

    def _store_host(self, addr: str) -> bytes:
        h = self._host_cache.get(addr)
        if h is None:
            host, port = addr.rsplit(":", 1)
            h = self._host_cache[addr] = host_bytes(host, int(port))
        return h

    # ---- queue selection ----------------------------------------------------------------

    def _pick(self, topic: str, avoid: str | None = None, key: str | None = None) -> tuple[MessageQueue, str]:
        cached = self._routes.get(topic)  # the common case, inline: this runs for every message
        if cached is not None and time.monotonic() - cached[0] < self._route_refresh_s:
            route = cached[1]
        else:
            route = self._route(topic)
        queues = route.write_queues
        if not queues:
            raise error_for(ResponseCode.TOPIC_NOT_EXIST, f"topic {topic!r} has no writable queue")
        if key is not None:
            mq = queues[abs(java_hash(key)) % len(queues)]
            return mq, route.addr(mq.broker)
        n = len(queues)
        start = next(self._rr)
        if not self._avoid and avoid is None:   # no broker failed or was slow lately: the next queue
            mq = queues[start % n]
            return mq, route.addrs[mq.broker]  # type: ignore[return-value]  # write queues have one
        fallback = None
        for i in range(n):
            mq = queues[(start + i) % n]
            if mq.broker == avoid:
                fallback = fallback or mq
                continue
            if self._available(mq.broker):
                return mq, route.addr(mq.broker)
            fallback = fallback or mq
        mq = fallback or queues[start % n]
        return mq, route.addr(mq.broker)

    def _route(self, topic: str, refresh: bool = False) -> Route:
        """`topic`'s route (see ClientBase._route); a topic no name server knows yet gets every
        registered broker's default queues (the broker auto-creates it if allowed).
        TopicNotExistError when no broker is registered."""
        try:
            route = super()._route(topic, refresh)
        except QuiverError as exc:
            if getattr(exc, "code", None) != ResponseCode.TOPIC_NOT_EXIST:
                raise
            return self._default_route(topic)
        cached = self._routes.get(topic)
        if not route.write_queues and cached is not None and cached[1] is route:
            # no master in it (a failover under way): asked again soon, not after route_refresh_s
            self._routes[topic] = (min(cached[0], time.monotonic() - self._route_refresh_s + MASTERLESS_ROUTE_S), route)
        return route

    def _default_route(self, topic: str) -> Route:
        """No route yet: offer every broker (it auto-creates the topic if allowed)."""
        brokers = [{"broker_name": n, "addrs": {"0": a}} for n, a in self._all_broker_addrs().items()]
        if not brokers:
            raise error_for(ResponseCode.TOPIC_NOT_EXIST, f"no route for {topic!r} and no broker is registered")
        return Route(topic, {"brokers": brokers, "queues": [
            {"broker_name": b["broker_name"], "read": 4, "write": 4, "perm": 6} for b in brokers]})

    # ---- sync --------------------------------------------------------------------------------

    def send(self, msg: Message, timeout: float | None = None, *, queue: MessageQueue | None = None,
             selector: QueueSelector | None = None, arg: object = None) -> SendResult:
        """Send one message and wait for the broker's answer; retried on another broker while
        the error is retryable. `queue=MessageQueue(...)` sends to that queue, `selector=fn`
        to the queue `fn(write_queues, msg, arg)` returns (RocketMQ's MessageQueueSelector);
        a chosen queue is never retried elsewhere.

            p.send(Message("Orders", b"o-1"), selector=lambda mqs, msg, arg: mqs[arg % len(mqs)], arg=42)
        """
        if self.metrics is not None:
            return self.metrics.timed_send(msg.topic, 1, lambda: self._send(msg, timeout, queue, selector, arg))
        return self._send(msg, timeout, queue, selector, arg)

    def _send(self, msg: Message, timeout: float | None, queue: MessageQueue | None, selector: QueueSelector | None,
              arg: object) -> SendResult:
        self._need_started()
        if queue is not None or selector is not None:
            mq, addr = self._chosen_queue(msg, queue, selector, arg)
            return self._send_to(mq, addr, msg, timeout)
        msg_id, props = self._encode(msg)
        return self._send_sync(msg.topic, [msg_id], [props], [msg.body], [msg.flag],
                               RequestCode.SEND_MESSAGE, timeout)[0]

    def send_orderly(self, msg: Message, sharding_key: str, timeout: float | None = None) -> SendResult:
        """Same key -> same queue (no retry on another queue: that would break order).
        The key is required: without one there is no order to keep (MessageIllegalError)."""
        self._need_started()
        if self.metrics is not None:
            return self.metrics.timed_send(msg.topic, 1, lambda: self._send_to(*self._orderly_queue(msg, sharding_key),
                                                                              msg, timeout))
        mq, addr = self._orderly_queue(msg, sharding_key)
        return self._send_to(mq, addr, msg, timeout)

    def _orderly_queue(self, msg: Message, sharding_key: str) -> tuple[MessageQueue, str]:
        """(queue, broker address) of `sharding_key`: the same key, the same queue."""
        if sharding_key is None or not str(sharding_key).strip():
            raise MessageIllegalError(f"send_orderly needs a sharding key (got {sharding_key!r}): messages with the "
                                      "same key go to the same queue, in order; use send() for unordered messages")
        return self._pick(msg.topic, key=str(sharding_key))

    def _chosen_queue(self, msg: Message, queue: MessageQueue | None = None, selector: QueueSelector | None = None,
                     arg: object = None) -> tuple[MessageQueue, str]:
        """(queue, broker address) given by `queue` or by `selector(write_queues, msg, arg)`;
        MessageIllegalError if it is not a writable queue of the message's topic."""
        if (queue is None) == (selector is None):
            raise ClientError("give queue= or selector=, not both")
        route = self._route(msg.topic)
        if selector is not None:
            queue = selector(list(route.write_queues), msg, arg)
        if not isinstance(queue, MessageQueue) or queue not in route.write_queues:
            raise MessageIllegalError(f"{queue!r} is not a writable queue of topic {msg.topic!r}")
        return queue, route.addr(queue.broker)

    def _send_to(self, mq: MessageQueue, addr: str, msg: Message, timeout: float | None) -> SendResult:
        msg_id, props = self._encode(msg)
        req, frames = self._request(mq, [props], [msg.flag], [msg.body])
        t0 = time.monotonic()
        env = self._call_broker(addr, req, None, frames, timeout or self.send_timeout, ok=tuple(_STATUS))
        results = self._result(env, mq, addr, [msg_id])
        tracer = self.tracer
        if tracer is not None:
            tracer.pub(results, [props], t0)
        return results[0]

    def send_batch(self, msgs: list[Message], timeout: float | None = None) -> list[SendResult]:
        """Send messages of one topic as one request to one queue and wait: one SendResult each,
        in order. MessageIllegalError for an empty batch, mixed topics, a delayed message or a
        batch over `max_message_bytes`; retried on another broker like `send`."""
        self._need_started()
        topic, ids, props, bodies, flags = self._encode_batch(msgs)
        if self.metrics is not None:
            return self.metrics.timed_send(topic, len(ids), lambda: self._send_sync(
                topic, ids, props, bodies, flags, RequestCode.SEND_BATCH_MESSAGE, timeout))
        return self._send_sync(topic, ids, props, bodies, flags, RequestCode.SEND_BATCH_MESSAGE, timeout)

    def send_batch_async(self, msgs: list[Message]) -> Future[list[SendResult]]:
        """One batch request without waiting: Future[list[SendResult]] (retried elsewhere on failure)."""
        self._need_started()
        topic, ids, props, bodies, flags = self._encode_batch(msgs)
        fut = LightFuture()
        tracer, t0 = self.tracer, time.monotonic()

        def build(env: Envelope, mq: MessageQueue, addr: str) -> list[SendResult]:
            results = self._result(env, mq, addr, ids)
            if tracer is not None:
                tracer.pub(results, props, t0)
            return results
        if self.metrics is not None:
            self.metrics.watch_send(topic, len(ids), fut)
        self._call_async(fut, topic, props, bodies, flags, RequestCode.SEND_BATCH_MESSAGE, build)
        return fut

    def _call_async(self, fut: Future[Any], topic: str, props: list[str], bodies: list[bytes], flags: list[int],
                   code: int, build: Build, sys_flag: int = 0, avoid: str | None = None, attempt: int = 0,
                   queue: tuple[MessageQueue, str] | None = None) -> None:
        """The non-blocking twin of `_call_with_retry`: completes `fut` with `build(reply, queue,
        broker address)`, retried on another broker while the error is retryable (not when
        `queue` names the (queue, broker address) to use). Callbacks run on the IO thread."""
        try:
            mq, addr = queue or self._pick(topic, avoid)
        except QuiverError as exc:
            fut.set_exception(exc)
            return
        req, frames = self._request(mq, props, flags, bodies, sys_flag=sys_flag)
        t0 = time.monotonic()

        def done(env: Envelope | Exception) -> None:
            try:
                if isinstance(env, Exception):
                    raise env
                if env.code not in _STATUS:
                    raise error_for(env.code, env.remark or "")
                result = build(env, mq, addr)
            except QuiverError as exc:
                self._note_latency(mq.broker, 0, failed=True)
                if queue is None and attempt < self.retries and _retryable(exc):
                    self._call_async(fut, topic, props, bodies, flags, code, build, sys_flag, mq.broker, attempt + 1)
                else:
                    fut.set_exception(exc)
                return
            self._note_latency(mq.broker, (time.monotonic() - t0) * 1000)
            fut.set_result(result)
        try:
            self._io().send(addr, code, req.ext(), frames, done, self.send_timeout)
        except QuiverError as exc:
            done(exc)

    def _encode_batch(self, msgs: list[Message]) -> tuple[str, list[str], list[str], list[bytes], list[int]]:
        if not msgs:
            raise MessageIllegalError("batch is empty")
        topic = msgs[0].topic
        ids: list[str] = []
        props: list[str] = []
        bodies: list[bytes] = []
        flags: list[int] = []
        for m in msgs:
            if m.topic != topic:
                raise MessageIllegalError(f"a batch goes to one topic: {m.topic!r} != {topic!r}")
            if m.delay_level or m.deliver_at is not None or m.delay_ms is not None:
                raise MessageIllegalError("a batch cannot carry a delay or delivery time: send delayed messages one by one")
            mid, p = self._encode(m)
            ids.append(mid); props.append(p); bodies.append(m.body); flags.append(m.flag)
        if sum(map(len, bodies)) > self.max_message_bytes:
            raise MessageIllegalError(f"batch is {sum(map(len, bodies))} bytes; the limit is {self.max_message_bytes}: split it")
        return topic, ids, props, bodies, flags

    def _request(self, mq: MessageQueue, props: list[str], flags: list[int], bodies: list[bytes],
                 wait: bool = True, sys_flag: int = 0) -> tuple[rq.SendMessage, list[bytes]]:
        """The send of these messages to `mq` and its body frames (several bodies: one packed frame).
        The schema is SEND_MESSAGE's; a batch goes as SEND_BATCH_MESSAGE with its `ext()`."""
        lengths, frames = rq.pack_bodies(bodies)
        return rq.SendMessage(topic=mq.topic, queue_id=mq.queue_id, metas=(flags, props), lengths=lengths,
                              group=self.group, born_ts=int(time.time() * 1000), sys_flag=sys_flag,
                              wait=wait), frames

    def _send_sync(self, topic: str, ids: list[str], props: list[str], bodies: list[bytes], flags: list[int],
                   code: int, timeout: float | None) -> list[SendResult]:
        t0 = time.monotonic()
        env, mq, addr = self._call_with_retry(topic, props, bodies, flags, code, timeout)
        results = self._result(env, mq, addr, ids)
        tracer = self.tracer
        if tracer is not None:
            tracer.pub(results, props, t0)
        return results

    def _call_with_retry(self, topic: str, props: list[str], bodies: list[bytes], flags: list[int], code: int,
                         timeout: float | None, sys_flag: int = 0) -> tuple[Envelope, MessageQueue, str]:
        """(reply, queue, broker address) of a blocking send, retried on another broker while the
        error is retryable and time is left (RocketMQ's retryTimesWhenSendFailed)."""
        deadline = time.monotonic() + (timeout or self.send_timeout)
        avoid: str | None = None
        last: QuiverError | None = None
        for attempt in range(self.retries + 1):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            mq, addr = self._pick(topic, avoid)
            t0 = time.monotonic()
            try:
                req, frames = self._request(mq, props, flags, bodies, sys_flag=sys_flag)
                env = self._io().call(addr, code, req.ext(), frames, left, ok=tuple(_STATUS))
                self._note_latency(mq.broker, (time.monotonic() - t0) * 1000)
                return env, mq, addr
            except QuiverError as exc:
                last = exc
                if not _retryable(exc):
                    raise
                self._note_latency(mq.broker, 0, failed=True)
                avoid = mq.broker
                self._route(topic, refresh=True)
                log.info("send to %s failed (%s); retrying elsewhere", mq.broker, exc)
        raise last or ClientError(f"send to {topic!r} timed out")

    # ---- oneway ----------------------------------------------------------------------------------

    def send_oneway(self, msg: Message) -> None:
        """Send without asking for an answer (no result, no retry: a lost message is not
        noticed). Raises only what is known before sending (an invalid message, no route)."""
        self._need_started()
        msg_id, props = self._encode(msg)
        mq, addr = self._pick(msg.topic)
        req, frames = self._request(mq, [props], [msg.flag], [msg.body], wait=False)
        self._io().oneway(addr, req, None, frames)

    # ---- async, auto-batched -------------------------------------------------------------------------

    def send_async(self, msg: Message, callback: Callable[[Future[SendResult]], object] | None = None, *,
                   queue: MessageQueue | None = None, selector: QueueSelector | None = None,
                   arg: object = None) -> Future[SendResult]:
        """Future[SendResult] without waiting; `callback(future)` runs on the IO thread when it
        completes. `queue` / `selector` / `arg` as in `send` (a chosen queue is not batched)."""
        self._need_started()
        chosen = self._chosen_queue(msg, queue, selector, arg) if queue is not None or selector is not None else None
        msg_id, props = self._encode(msg)
        fut: Future[SendResult] = LightFuture(callback)
        if self.metrics is not None:
            self.metrics.watch_send(msg.topic, 1, fut)
        if chosen is None:
            self._enqueue(msg.topic, (msg_id, props, msg.body, msg.flag, fut, 0), None)
        else:  # starts at the last attempt: a chosen queue is never retried on another
            self._dispatch(*chosen, [(msg_id, props, msg.body, msg.flag, fut, self.retries)])
        return fut

    def _enqueue(self, topic: str, item: _Item, avoid: str | None) -> None:
        try:
            mq, addr = self._pick(topic, avoid)
        except QuiverError as exc:
            item[4].set_exception(exc)
            return
        if not self._auto_batch or _SCHEDULED_AT in item[1] or _TIMER_AT in item[1]:
            self._dispatch(mq, addr, [item])  # a delayed message travels alone: batches carry no delay
            return
        # by the queue object's id: a frozen dataclass hashes its three fields in Python, per message
        hit = self._batcher_of.get(id(mq))
        if hit is not None and hit[0] is mq:
            b = hit[1]
        else:
            with self._batchers_lock:
                b = self._batchers.setdefault(mq, _Batcher())
                if len(self._batcher_of) >= 4096:   # routes refreshed many times over: start again
                    self._batcher_of.clear()
                self._batcher_of[id(mq)] = (mq, b)   # holding mq keeps its id from being reused
        with b.lock:
            if b.in_flight >= self._batch_in_flight:
                b.items.append(item)
                b.bytes += len(item[2])
                return
            b.in_flight += 1
        self._dispatch(mq, addr, [item], b)

    def _dispatch(self, mq: MessageQueue, addr: str, items: list[_Item], batcher: _Batcher | None = None) -> None:
        code = RequestCode.SEND_BATCH_MESSAGE if len(items) > 1 else RequestCode.SEND_MESSAGE
        req, frames = self._request(mq, list(map(_PROPS, items)), list(map(_FLAG, items)), list(map(_BODY, items)))
        t0 = time.monotonic()

        def done(env: Envelope | Exception) -> None:
            if batcher is not None:
                self._next_batch(mq, addr, batcher)
            self._complete(mq, addr, items, env, t0)
        try:
            self._io().send(addr, code, req.ext(), frames, done, self.send_timeout)
        except QuiverError as exc:
            done(exc)

    def _next_batch(self, mq: MessageQueue, addr: str, b: _Batcher) -> None:
        with b.lock:
            if not b.items:
                b.in_flight -= 1
                return
            if len(b.items) <= self._batch_max_messages and b.bytes <= self._batch_max_bytes:
                take, b.items, b.bytes = b.items, [], 0   # all of it fits: no walk over the items
            else:
                take, size = [], 0
                for item in b.items:
                    if len(take) >= self._batch_max_messages or (take and size + len(item[2]) > self._batch_max_bytes):
                        break
                    take.append(item)
                    size += len(item[2])
                del b.items[:len(take)]
                b.bytes -= size
        self._dispatch(mq, addr, take, b)

    def _complete(self, mq: MessageQueue, addr: str, items: list[_Item], env: Envelope | Exception,
                  t0: float) -> None:
        if isinstance(env, Exception):
            exc = env
        else:
            try:
                results = self._result(env, mq, addr, list(map(_ID, items)))
            except QuiverError as e:
                exc = e
            else:
                self._note_latency(mq.broker, (time.monotonic() - t0) * 1000)
                tracer = self.tracer
                if tracer is not None:   # one tuple queued per batch: the encoding is the dispatcher's
                    tracer.pub(results, list(map(_PROPS, items)), t0)
                set_results(list(map(_FUTURE, items)), results)
                return
        self._note_latency(mq.broker, 0, failed=True)
        for msg_id, props, body, flag, fut, attempt in items:
            if attempt < self.retries and _retryable(exc):
                self._enqueue(mq.topic, (msg_id, props, body, flag, fut, attempt + 1), mq.broker)
            elif not fut.done():
                fut.set_exception(exc)

    def cancel_scheduled(self, msg_id: str, topic: str | None = None, *, group: str = "SCHEDULE_CONSUMER",
                         timeout: float = 3.0) -> bool:
        """Cancel a delayed/timer message not yet delivered: True if cancelled, False if too late
        (QueryNotFoundError: no such message). `topic`: the message's topic; with auth on PUB on
        it is the right to cancel. See `quiver.client.scheduled.cancel`."""
        from quiver.client import scheduled
        self._need_started()
        return scheduled.cancel(self._brokers, msg_id, topic, group, timeout)

    def _pick_queue(self, topic: str, avoid: str | None = None) -> tuple[MessageQueue, str]:
        """(queue, broker address) the next send of `topic` goes to, avoiding broker `avoid`."""
        return self._pick(topic, avoid)

    _retryable = staticmethod(_retryable)

    def _send_prepared(self, msg: Message, mq: MessageQueue, addr: str, system: dict[str, str],
                      code: int = RequestCode.SEND_MESSAGE) -> Future[SendResult]:
        """One message with SDK-set reserved properties to a chosen queue, not retried elsewhere."""
        msg_id, props = self._encode(msg, system)
        fut: Future[SendResult] = LightFuture()
        self._call_async(fut, msg.topic, [props], [msg.body], [msg.flag], code,
                        lambda env, q, a: self._result(env, q, a, [msg_id])[0], queue=(mq, addr))
        return fut

    def shutdown(self) -> None:
        """Waits (bounded) for in-flight async sends before closing."""
        self._fail_requests()
        deadline = time.monotonic() + self.send_timeout
        while time.monotonic() < deadline and any(b.in_flight for b in list(self._batchers.values())):
            time.sleep(0.01)
        super().shutdown()


TRACE_PRODUCER_GROUP = "_INNER_TRACE_PRODUCER"


def trace_producer(namesrv: str | list[str], credentials: str | Credentials | None,
                   transport_factory: type[Transport] | None = None) -> Producer:
    """A started, untraced Producer for trace records (on `transport_factory` when given)."""
    p = Producer(TRACE_PRODUCER_GROUP, namesrv=namesrv, credentials=credentials, trace=False)
    if transport_factory is not None:
        p._transport_factory = transport_factory
    return p.start()


def client_tracer(client: ClientBase) -> ClientTrace:
    """The tracer factory of traced clients: their events go through a trace queue with a
    Producer of its own, on the client's name servers and transport factory."""
    queue = TraceQueue(make_producer=lambda: trace_producer(client.namesrvs, client.credentials,
                                                            client._transport_factory))
    return ClientTrace(queue, getattr(client, "group", None), client.client_id)
