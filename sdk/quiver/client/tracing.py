"""What a traced client records, and the queue that sends it without ever failing or blocking
a send or a consume.

A traced client (`trace=True` or QUIVER_TRACE=1) hands each request's facts to
its `ClientTrace` (one tuple appended under a lock: no encoding, no I/O on the
caller's thread). `TraceQueue` keeps them in a bounded in-memory queue
(`max_pending_msgs` traced messages; past it an event is dropped and counted,
never waited for) and its thread, woken when the queue stops being empty,
builds the events, packs them into trace messages (trace.pack: KEYS = the msg
ids) and sends them to RMQ_SYS_TRACE_TOPIC with its own Producer's
`send_batch_async`, at most `max_in_flight` batches at once. The Producer is
its own so that a slow or full trace topic never marks a broker unavailable
for the app's sends; it is given (or made by `make_producer`), never imported
here, so the clients' modules import this one and not the other way round
(producer.py's `client_tracer` is the clients' tracer factory).
`flush_step` is the loop's step, callable from a test.

Owns neither the record format (trace.py) nor what a client traces (its hooks
call ClientTrace).
"""

import logging
import os
import threading
import time

from quiver.client.message import Message
from quiver.wire import trace
from quiver.wire.properties import index_fields
from quiver.wire.property_string import NAME_SEP, PROP_SEP

log = logging.getLogger(__name__)


def enabled(option) -> bool:
    """A client's `trace=`: True / False, or None for the QUIVER_TRACE environment variable."""
    if option is None:
        return os.environ.get("QUIVER_TRACE", "").strip().lower() in ("1", "true", "yes", "on")
    return bool(option)


def _now_ms() -> int:
    return int(time.time() * 1000)


class TraceQueue:
    """The bounded queue and the thread that sends it. `producer`: what sends (a started
    Producer), or `make_producer()` builds one of its own at the first send (closed with it)."""

    def __init__(self, producer=None, *, make_producer=None, max_pending_msgs: int = 50_000, interval_s: float = 0.2,
                 max_in_flight: int = 4, ids_per_message: int = 400, batch_messages: int = 32, name: str = "trace"):
        if (producer is None) == (make_producer is None):
            raise ValueError("give a started producer, or make_producer to build one")
        self.max_pending_msgs = max_pending_msgs
        self.interval_s = interval_s
        self.max_in_flight = max_in_flight
        self.ids_per_message = ids_per_message
        self.batch_messages = batch_messages
        self.counts = {"queued": 0, "dropped": 0, "sent": 0, "failed": 0, "unencodable": 0}
        self._producer, self._make_producer, self._own_producer = producer, make_producer, producer is None
        self._items: list = []
        self._pending = 0
        self._in_flight = 0
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"{name}-dispatcher", daemon=True)
        self._thread.start()

    # ---- callers' side: never blocks beyond a lock held for an append ------------------------

    def add(self, n_msgs: int, build, *args) -> bool:
        """Queue `build(*args) -> [event, ...]` (run later on the dispatcher thread) for `n_msgs`
        traced messages; False (and counted as dropped) when the queue is full or closed."""
        with self._lock:
            if self._pending + n_msgs > self.max_pending_msgs or self._stop.is_set():
                self.counts["dropped"] += n_msgs
                return False
            was_empty = not self._items
            self._items.append((build, args))
            self._pending += n_msgs
            self.counts["queued"] += n_msgs
        if was_empty:
            self._wake.set()
        return True

    def add_events(self, events: list) -> bool:
        """Queue events built already (a service's)."""
        return self.add(sum(len(e[9]["id"]) for e in events), _given, events)

    def stats(self) -> dict:
        with self._lock:
            return {**self.counts, "pending": self._pending, "in_flight": self._in_flight}

    # ---- the dispatcher thread ----------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait()
            if self._stop.wait(self.interval_s):   # a short linger: more events per trace message
                break
            self._wake.clear()
            try:
                self.flush_step()
            except Exception:   # the thread must go on: what failed is logged, the events counted
                log.exception("trace dispatch failed")

    def flush_step(self) -> int:
        """Build, pack and send what is queued; returns how many queued items it took.
        With `max_in_flight` batches unanswered it sends nothing (the queue fills, then drops)."""
        with self._lock:
            if self._in_flight >= self.max_in_flight or not self._items:
                if self._items:
                    self._wake.set()   # look again after the next linger
                return 0
            items, self._items, self._pending = self._items, [], 0
            self._in_flight += 1   # taken, not yet sent: still under way for stats() and close()
        try:
            self._build_and_send(items)
        finally:
            with self._lock:
                self._in_flight -= 1
        return len(items)

    def _build_and_send(self, items: list) -> None:
        events = []
        for build, args in items:
            try:
                events.extend(build(*args))
            except Exception:
                self.counts["unencodable"] += 1
                log.exception("a trace event could not be built: dropped")
        packed = trace.pack(events, self.ids_per_message)
        for i in range(0, len(packed), self.batch_messages):
            self._send(packed[i:i + self.batch_messages])

    def _send(self, packed: list) -> None:
        msgs = [Message(trace.TRACE_TOPIC, body, keys=keys) for body, keys in packed]
        n = sum(len(keys) for _, keys in packed)   # counted in traced messages, as queued and dropped
        try:
            fut = self._get_producer().send_batch_async(msgs)
        except Exception as exc:   # no route, not started ...: these events are lost, counted
            self._done(n, exc)
            return
        with self._lock:
            self._in_flight += 1
        fut.add_done_callback(lambda f: self._finished(f, n))

    def _finished(self, fut, n: int) -> None:
        with self._lock:
            self._in_flight -= 1
        exc = fut.exception()
        self._done(n, exc)

    def _done(self, n: int, exc) -> None:
        with self._lock:
            self.counts["failed" if exc is not None else "sent"] += n
        if exc is not None:
            log.debug("trace batch of %d not stored: %s", n, exc)

    def _get_producer(self):
        if self._producer is None:
            self._producer = self._make_producer()
        return self._producer

    def close(self, timeout_s: float = 2.0) -> None:
        """Send what is queued (waiting at most `timeout_s` for the answers), then stop."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and (self._items or self._in_flight):
            if not self.flush_step():
                time.sleep(0.01)
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout_s)
        if self._own_producer and self._producer is not None:
            self._producer.shutdown()
            self._producer = None


def _given(events: list) -> list:
    return events


class ClientTrace:
    """A traced client's hooks: each records one request's facts in its dispatcher."""

    def __init__(self, dispatcher: TraceQueue, group: str | None, client: str):
        self.dispatcher, self.group, self.client = dispatcher, group, client

    def pub(self, results: list, props: list[str], started: float, extra: dict | None = None) -> None:
        """A send answered: SendResults, the messages' properties, time.monotonic() at the send.
        Queued: the ids, the first result's facts and the properties, all strings and ints, so no
        SendResult outlives the send's callbacks (thousands queued would be old objects every
        garbage collection walks)."""
        cost = (time.monotonic() - started) * 1000
        r0 = results[0]
        self.dispatcher.add(len(results), _pub_events, self.group, self.client, [r.msg_id for r in results],
                            (r0.status.value, r0.topic, r0.broker, r0.queue_id, r0.queue_offset), props,
                            _now_ms() - round(cost), round(cost, 3), extra)

    def sub_before(self, msgs: list) -> float:
        """A listener is about to get `msgs`; returns the start (time.monotonic()) for sub_after."""
        self.dispatcher.add(len(msgs), _sub_events, trace.SUB_BEFORE, self.group, self.client, _snapshot(msgs),
                            _now_ms(), None, "CONSUMING")
        return time.monotonic()

    def sub_after(self, msgs: list, started: float, ok: bool) -> None:
        cost = round((time.monotonic() - started) * 1000, 3)
        self.dispatcher.add(len(msgs), _sub_events, trace.SUB_AFTER, self.group, self.client, _snapshot(msgs),
                            _now_ms(), cost, "SUCCESS" if ok else "FAILED")

    def end_transaction(self, topic: str, broker: str | None, ids_states: list[tuple[str, str]],
                        from_check: bool) -> None:
        """END_TRANSACTION sent: (msg id, COMMIT | ROLLBACK | UNKNOWN) of each half."""
        self.dispatcher.add(len(ids_states), _end_events, self.group, self.client, topic, broker, ids_states,
                            from_check, _now_ms())


_KEYS_OR_TAGS = "S" + NAME_SEP   # how both "KEYS\x01" and "TAGS\x01" end: one scan finds either


def _pub_events(group, client, ids, first, props, time_ms, cost, extra) -> list:
    # by column: the ids list is all a batch without keys or tags costs (one join and one scan,
    # both in C, decide; a property whose name ends in S only costs the exact parse below)
    keys = tags = None
    if _KEYS_OR_TAGS in PROP_SEP.join(props):
        fields = [index_fields(p) for p in props]
        keys = [" ".join(f[2]) or None for f in fields]
        tags = [f[0] for f in fields]
    status, topic, broker, queue_id, queue_offset = first
    msgs = {"id": ids, "k": keys, "tg": tags, "q": queue_id, "o": queue_offset, "x": None}
    return [trace.event(trace.PUB, time_ms, cost, status, topic, broker, group, client, extra, msgs)]


def _snapshot(msgs) -> list[tuple]:
    # the facts now: a listener may change its messages afterwards
    return [(m.topic, m.broker, m.msg_id, " ".join(m.keys) or None, m.tags, m.queue_id, m.queue_offset,
             m.reconsume_times) for m in msgs]


def _sub_events(type_, group, client, snap, time_ms, cost, status) -> list:
    by_queue: dict[tuple, list] = {}
    for topic, broker, mid, keys, tags, qid, qoff, reconsume in snap:
        by_queue.setdefault((topic, broker), []).append(
            trace.msg_entry(mid, keys, tags, qid, qoff, {"reconsume_times": reconsume}))
    return [trace.event(type_, time_ms, cost, status, topic, broker, group, client, None, trace.columns(rows))
            for (topic, broker), rows in by_queue.items()]


def _end_events(group, client, topic, broker, ids_states, from_check, time_ms) -> list:
    by_state: dict[str, list] = {}
    for mid, state in ids_states:
        by_state.setdefault(state, []).append(trace.msg_entry(mid))
    return [trace.event(trace.END_TRANSACTION, time_ms, None, state, topic, broker, group, client,
                        {"from_check": from_check}, trace.columns(rows)) for state, rows in by_state.items()]
