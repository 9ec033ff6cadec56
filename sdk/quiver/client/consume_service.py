"""The consume side of PushConsumer: listener calls, send-back, orderly queues.

Concurrent mode hands batches to the thread pool; a failed message goes back to
the broker (CONSUMER_SEND_MSG_BACK) and returns through `%RETRY%<group>`.
Orderly mode runs one thread per queue under a broker lock; a failing batch is
retried in place after a suspend and, past the max reconsume times, sent to the
dead-letter topic so the queue moves on. With `consume_inline` a pulled batch
is consumed on the thread its answer arrived on (the IO thread) by the same
code, so results, send-back, retries and orderly locking are the same; only
retries that wait (a suspend, a failed send-back) run on the pool later.
RocketMQ's ConsumeMessageConcurrentlyService / ConsumeMessageOrderlyService.
It gets what it needs from its PushConsumer when that starts (the listener,
the settings, the timer, the broker call, how a queue commits and relocks);
it owns the consume threads, the count of running listener calls and the
measured listener cost. POP mode (pop_push.py) hands it batches too.
"""

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from quiver.wire import requests as rq
from quiver.errors import QuiverError
from quiver.client.message import RECONSUME_DEFAULT, ConsumeResult, MessageExt, ReconsumeLater
from quiver.client.options import ConsumerOptions
from quiver.client.tracing import ClientTrace
from quiver.wire.properties import ORIGIN_MESSAGE_ID
from quiver.client.process_queue import DelayedCalls, ProcessQueue

if TYPE_CHECKING:
    from quiver.client.metrics import ClientMetrics

log = logging.getLogger(__name__)

LOCK_STALE_S = 30.0          # the client's view of its broker lock (broker lease: 60 s)
SPLIT_WORTH_S = 0.002        # split a pulled batch over threads when its listener work exceeds this
PULL_FIRST_S = 0.00005       # inline: a batch whose listener work exceeds this waits for its queue's next pull
MAX_CONSUME_CONTINUOUSLY_S = 60.0

# fn(msgs) -> ConsumeResult.SUCCESS, RECONSUME_LATER or ConsumeResult.later(...); raising counts as RECONSUME_LATER
Listener = Callable[[list[MessageExt]], ConsumeResult | ReconsumeLater]


class ConsumeService:
    """`call_broker(addr, request)`: sends a send-back; `commit(pq, offset)`: a queue's commit
    offset moved; `relock(pq) -> bool`: locks an orderly queue on its broker again. `tracer`:
    SubBefore / SubAfter around each listener call, or None."""

    def __init__(self, group: str, options: ConsumerOptions, listener: Listener, *, orderly: bool, broadcast: bool,
                 timer: DelayedCalls, call_broker: Callable[[str, rq.Schema], Any],
                 commit: Callable[[ProcessQueue, int], None], relock: Callable[[ProcessQueue], bool],
                 tracer: ClientTrace | None = None) -> None:
        self.group, self.options, self._listener = group, options, listener
        self.orderly, self.broadcast = orderly, broadcast
        self._timer, self._call_broker, self._consumed, self._lock_queue = timer, call_broker, commit, relock
        self.tracer = tracer
        self.metrics: ClientMetrics | None = None   # when the consumer was given one
        self._pool = ThreadPoolExecutor(options.consume_threads, thread_name_prefix=f"consume-{group}")
        self.running = True
        self._active = 0   # listener tasks under way
        self._active_cond = threading.Condition()
        self._cost_per_msg_s: float | None = None  # measured listener cost (None: not yet): how a batch is split

    def stop(self) -> None:
        """No new work from now on (a running listener call finishes)."""
        self.running = False

    def close(self, wait_for_pool: bool = False, timeout_s: float = 5.0) -> None:
        """Stop, and let the running listener calls finish: the pool's (`wait_for_pool`: queued
        tasks too are cancelled, running ones awaited), else at most `timeout_s` for any task."""
        self.running = False
        self._pool.shutdown(wait=wait_for_pool, cancel_futures=True)
        with self._active_cond:
            self._active_cond.wait_for(lambda: self._active == 0, timeout=timeout_s)

    def dispatch(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        """Consume a pulled batch: on the consume threads, or here with consume_inline."""
        inline = self.options.consume_inline
        if self.orderly:
            self.kick_orderly(pq, inline)
            return
        if inline:   # a pool hand-off costs a thread wake-up, more than a fast listener's call
            if self.running:
                self.run(self._consume_concurrently, pq, msgs)
            return
        # Handing a task to the pool costs a thread wake-up (tens of µs): a fast listener is
        # best served by one task per pulled batch, a slow one by spreading the batch over the
        # threads. The measured listener cost per message decides.
        bs = self.options.consume_batch_size
        n = len(msgs)
        tasks = 1
        if n * (self._cost_per_msg_s or 0.0) > SPLIT_WORTH_S:
            tasks = min(self.options.consume_threads, -(-n // bs))
        chunk = -(-n // tasks)
        chunk = -(-chunk // bs) * bs
        for i in range(0, n, chunk):
            self.submit(self._consume_concurrently, pq, msgs[i:i + chunk])

    def hand_off_first(self, n: int) -> bool:
        """Whether a pulled batch of `n` goes to the listener before its queue's next pull is sent.
        On the consume threads the hand-off is one quick submit: first. Inline, the pull goes
        first (it waits at the broker while the listener runs) unless the listener is known to
        take less than sending it (PULL_FIRST_S): then the batch would only wait for the pull."""
        if not self.options.consume_inline:
            return True
        cost = self._cost_per_msg_s
        return cost is not None and n * cost < PULL_FIRST_S

    def submit(self, fn, *args) -> None:
        """`fn(*args)` on a consume thread (nothing once stopped)."""
        if not self.running:
            return
        try:
            self._pool.submit(self.run, fn, *args)
        except RuntimeError:
            pass  # shutting down: the messages stay uncommitted

    def run(self, fn, *args) -> None:
        """`fn(*args)` here, counted as a running listener task (close() waits for it)."""
        with self._active_cond:
            self._active += 1
        try:
            fn(*args)
        except Exception:
            log.exception("consume task failed")
        finally:
            with self._active_cond:
                self._active -= 1
                if self._active == 0:
                    self._active_cond.notify_all()

    def call_listener(self, msgs: list[MessageExt]) -> ReconsumeLater | None:
        """None when consumed, else how to retry (raising, or any other result: the default delay).
        A traced consumer records SubBefore and SubAfter around the call, one with metrics the call."""
        tracer, metrics = self.tracer, self.metrics
        started = tracer.sub_before(msgs) if tracer is not None else 0.0
        t0 = time.perf_counter() if metrics is not None else 0.0
        later = self._listen(msgs)
        if metrics is not None:
            metrics.listened(self.group, msgs, later is None, time.perf_counter() - t0)
        if tracer is not None:
            tracer.sub_after(msgs, started, later is None)
        return later

    def _listen(self, msgs: list[MessageExt]) -> ReconsumeLater | None:
        try:
            out = self._listener(msgs)
        except Exception:
            log.exception("listener of %s raised: consuming %d message(s) later", self.group, len(msgs))
            return RECONSUME_DEFAULT
        if out is ConsumeResult.SUCCESS:
            return None
        return out if isinstance(out, ReconsumeLater) else RECONSUME_DEFAULT

    def _consume_concurrently(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        bs = self.options.consume_batch_size
        call = self.call_listener if self.tracer is not None or self.metrics is not None else self._listen
        done = 0                 # msgs[:done] are handled: consumed, sent back or kept for a retry here
        kept: set[int] = set()   # id() of those kept (broker unreachable): the offset stays behind them
        sending = 0.0            # time in send-backs: the listener's cost is the rest (and GIL waits)
        clock = time.perf_counter
        started = clock()
        try:
            for i in range(0, len(msgs), bs):
                if pq.dropped or not self.running:
                    return
                batch = msgs[i:i + bs]
                later = call(batch)
                if later is not None:
                    t0 = clock()
                    self._failed(pq, batch, later, kept)
                    sending += clock() - t0
                done = i + len(batch)
        finally:
            # one cache update per task, not per listener call: the commit offset is still the
            # lowest unfinished message of the queue
            if done:
                finished = msgs[:done] if not kept else [m for m in msgs[:done] if id(m) not in kept]
                self._consumed(pq, pq.remove(finished))
                # moving average of the listener's cost per message (races between threads only blur it)
                per_msg = (clock() - started - sending) / done
                prev = self._cost_per_msg_s
                self._cost_per_msg_s = per_msg if prev is None else 0.8 * prev + 0.2 * per_msg

    def _failed(self, pq: ProcessQueue, batch: list[MessageExt], later: ReconsumeLater, kept: set[int]) -> None:
        """A batch the listener did not consume: back to the broker, one message at a time; one
        that cannot be sent back is retried here later (its id joins `kept`)."""
        if self.broadcast:
            log.warning("broadcast consumption failed for %d message(s): dropped", len(batch))
            return
        failed = [m for m in batch if not self._send_back(pq, m, later.delay_level, later.delay_ms)]
        if failed:  # broker unreachable: retry here later, keep the offset behind them
            self._timer.call_later(5.0, self.submit, self._consume_concurrently, pq, failed)
            kept.update(id(m) for m in failed)

    def _send_back(self, pq: ProcessQueue, m: MessageExt, delay: int = 0, delay_ms: int | None = None) -> bool:
        origin_id = m.properties.get(ORIGIN_MESSAGE_ID) or m.msg_id or None
        req = rq.ConsumerSendMsgBack(group=self.group, offset=m.commit_log_offset, delay_level=delay, delay_ms=delay_ms,
                                     origin_topic=m.topic, origin_msg_id=origin_id,
                                     max_reconsume=self.options.max_reconsume_times, reconsume=m.reconsume_times)
        try:
            self._call_broker(pq.addr, req)
            return True
        except QuiverError as exc:
            log.warning("send back of %s failed: %s", m.msg_id, exc)
            return False

    # ---- orderly ------------------------------------------------------------------------------------------

    def kick_orderly(self, pq: ProcessQueue, inline: bool = False) -> None:
        """Consume an orderly queue's cached messages (one thread at a time), unless suspended."""
        with pq.lock:
            if pq.scheduled or pq.dropped or time.monotonic() < pq.suspended_until:
                return
            pq.scheduled = True
        if inline:
            self.run(self._consume_orderly, pq)
        else:
            self.submit(self._consume_orderly, pq)

    def _consume_orderly(self, pq: ProcessQueue) -> None:
        started = time.monotonic()
        retry_in = None
        with pq.consume_lock:  # one thread per queue
            while True:
                if pq.dropped or not self.running:
                    break
                if not self.broadcast and (not pq.locked or time.monotonic() - pq.lock_ts > LOCK_STALE_S):
                    retry_in = 3.0
                    self._timer.call_later(0.01, self._relock, pq)
                    break
                if time.monotonic() - started > MAX_CONSUME_CONTINUOUSLY_S:
                    retry_in = 0.01
                    break
                batch = pq.head(self.options.consume_batch_size)
                if not batch:
                    break
                later = self.call_listener(batch)
                if later is None or self._give_up(pq, batch):
                    self._consumed(pq, pq.remove(batch))
                    continue
                # retried in place: a delay in seconds is honoured, a delay level is the broker's (not here)
                retry_in = (later.delay_ms / 1000 if later.delay_ms is not None
                            else self.options.suspend_current_queue_ms / 1000)
                break
        with pq.lock:
            pq.scheduled = False
            if retry_in is not None:
                pq.suspended_until = time.monotonic() + retry_in
        if retry_in is not None:
            self._timer.call_later(retry_in, self.kick_orderly, pq)
        elif pq.msgs:
            self.kick_orderly(pq)  # arrived while we were finishing

    def _give_up(self, pq: ProcessQueue, batch: list[MessageExt]) -> bool:
        """A failed orderly batch: count the attempt; past the max, dead-letter it and move on."""
        limit = self.options.max_reconsume_times
        if any(m.reconsume_times < limit for m in batch):
            for m in batch:
                m.reconsume_times += 1
            return False
        if self.broadcast:
            log.warning("orderly broadcast consumption failed %d times: dropping %d message(s)",
                        limit, len(batch))
            return True
        return all(self._send_back(pq, m, delay=-1) for m in batch)

    def _relock(self, pq: ProcessQueue) -> None:
        if pq.dropped or not self.running:
            return
        if self._lock_queue(pq):
            pq.locked, pq.lock_ts = True, time.monotonic()
            with pq.lock:
                pq.suspended_until = 0.0
            self.kick_orderly(pq)
