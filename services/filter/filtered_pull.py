"""One consumer pull served through the filter: pull from the broker, keep matches, repeat.

A `FilteredPull` is a small state machine. Each step asks the broker for the
next raw batch of the queue (tag "*"), scans it with the compiled selector
(scanning.py) and either answers the consumer or steps again from the new
offset. Long polling is preserved: while nothing has matched, each broker
pull carries the rest of the consumer's suspend time, so the broker holds it
and answers the moment new messages land; once something matched, further
steps use suspend 0 so a reply is never delayed by waiting.

Answers (same format as the broker's): SUCCESS + {next, min, max} + one body
frame of the matching records, raw; PULL_NOT_FOUND + next when nothing
matched within the suspend time (next moves past every non-matching record
scanned, so the consumer's position still advances); PULL_OFFSET_MOVED and
errors are passed through when nothing matched yet.

Threads: started on the service thread; broker replies run on the
transport's IO thread (one request per pull in flight, so never
concurrently); the answer is handed back to the service thread.
The broker pull and the reading of its answer are quiver.client.queue_puller's; the
records stay raw bytes for the scanner.
"""

import logging
import math
import time

from quiver.client import queue_puller
from quiver.wire.codes import ResponseCode
from quiver.wire.replies import PullReply
from quiver.errors import FieldError, QuiverError
from quiver.client.queue_puller import FOUND, NO_NEW_MSG, OFFSET_ILLEGAL

from .scanning import ScanResult, scan

log = logging.getLogger(__name__)

MAX_ROUNDS_AFTER_MATCH = 8   # bound on extra broker reads to fill a reply that has matches


class FilteredPull:
    __slots__ = ("app", "req", "selector", "stat_key", "group", "topic", "queue_id", "offset", "want",
                 "deadline", "commit", "result", "rounds", "min", "max", "broker")

    def __init__(self, app, req, selector, stat_key, group, topic, queue_id, offset, want, suspend_ms, commit, broker=None):
        self.app, self.req, self.selector, self.stat_key = app, req, selector, stat_key
        self.group, self.topic, self.queue_id = group, topic, queue_id
        self.offset, self.want = offset, want
        self.deadline = time.monotonic() + suspend_ms / 1000
        self.commit = commit
        self.result = ScanResult()
        self.rounds = 0
        self.min = self.max = None
        self.broker = broker or app.broker

    # ---- steps ------------------------------------------------------------------------

    def step(self) -> None:
        cfg = self.app.config
        matched = self.result.matched
        suspend_ms = 0 if matched else max(0, int((self.deadline - time.monotonic()) * 1000))
        pull = queue_puller.request(self.topic, self.queue_id, self.offset, max_msgs=self._batch(),
                                    suspend_ms=suspend_ms, selector="*", max_bytes=cfg.max_reply_bytes,
                                    group=self.group or None, commit_offset=self.commit if self.rounds == 0 else None)
        self.rounds += 1
        try:
            self.app.transport.send(self.broker, pull, None, (), self.on_reply,
                                    timeout=suspend_ms / 1000 + cfg.broker_timeout_ms / 1000)
        except Exception as exc:  # transport shut down
            self.on_reply(exc)

    def _batch(self) -> int:
        """Records to ask the broker for: enough to fill the reply at the observed selectivity."""
        need = self.want - self.result.matched
        ratio = self.app.selectivity.get(self.stat_key, 1.0)
        n = math.ceil(need / max(ratio, 0.002) * 1.25) + 8
        return max(need, min(n, self.app.config.scan_batch))

    def on_reply(self, env) -> None:
        app = self.app
        if isinstance(env, Exception):
            app.counters["broker_pull_failed"] += 1
            return self._finish_error(ResponseCode.SERVICE_NOT_AVAILABLE,
                                      f"filter server could not pull from broker {self.broker}: {env}")
        try:
            pulled = queue_puller.read(env)
        except FieldError as exc:
            app.counters["broker_pull_failed"] += 1
            return self._finish_error(ResponseCode.SYSTEM_ERROR,
                                      f"broker {self.broker} answered a pull badly: {exc.remark}")
        except QuiverError as exc:  # a refusal: passed through (with what we have, if anything matched)
            if self.result.matched:
                return self._answer()
            app.service.call_soon_threadsafe(self.req.reply, exc.code, exc.remark)
            return
        self.min, self.max = pulled.min, pulled.max
        if pulled.status is FOUND:
            return self._scanned(pulled.body, pulled.next)
        if pulled.status is not OFFSET_ILLEGAL:
            self.offset = max(self.offset, pulled.next)
            if self.result.matched:
                return self._answer()
            if pulled.status is not NO_NEW_MSG or self._remaining_ms() > 50:
                return self.step()
            return self._answer()
        if self.result.matched:  # answer what we have; the next pull meets the condition again
            return self._answer()
        app.service.call_soon_threadsafe(self.req.reply, ResponseCode.PULL_OFFSET_MOVED, env.remark or "",
                                         PullReply(next=pulled.next, min=pulled.min, max=pulled.max))

    def _scanned(self, buf, broker_next: int) -> None:
        cfg = self.app.config
        before = self.result.scanned, self.result.matched
        res, pos = scan(buf, self.selector.matches, self.want, cfg.max_reply_bytes, self.result)
        scanned, matched = res.scanned - before[0], res.matched - before[1]
        self._learn(scanned, matched)
        c = self.app.counters
        c["scanned"] += scanned
        c["matched"] += matched
        if pos < len(buf):          # reply is full: resume right after the last record scanned
            self.offset = res.last_offset + 1
            return self._answer()
        self.offset = max(self.offset, broker_next)
        caught_up = self.max is not None and self.offset >= self.max
        if res.matched and (caught_up or self.rounds > MAX_ROUNDS_AFTER_MATCH):
            return self._answer()
        if not res.matched and self._remaining_ms() <= 0:
            return self._answer()
        self.step()

    def _learn(self, scanned: int, matched: int) -> None:
        if scanned:
            sel = self.app.selectivity
            old = sel.get(self.stat_key)
            ratio = matched / scanned
            sel[self.stat_key] = ratio if old is None else old * 0.7 + ratio * 0.3

    def _remaining_ms(self) -> int:
        return int((self.deadline - time.monotonic()) * 1000)

    # ---- answers ---------------------------------------------------------------------------

    def _answer(self) -> None:
        ext = PullReply(next=self.offset, min=self.min if self.min is not None else 0,
                        max=self.max if self.max is not None else self.offset)
        res = self.result
        if res.matched:
            self.app.counters["replies_found"] += 1
            body = b"".join(res.chunks)
            self.app.service.call_soon_threadsafe(self._found, ext, body)
        else:
            self.app.counters["replies_not_found"] += 1
            self.app.service.call_soon_threadsafe(self.req.reply, ResponseCode.PULL_NOT_FOUND,
                                                  "no matching message", ext)

    def _found(self, ext: PullReply, body: bytes) -> None:
        """On the service thread: the messages, unless the consumer's user was deleted or lost
        SUB while the broker held the pull (the ACL checked again as it is now)."""
        denied = self.req.denied_now()
        if denied is not None:
            self.app.counters["held_pulls_denied"] += 1
            self.req.reply(ResponseCode.NO_PERMISSION, denied)
            return
        self.req.reply(ResponseCode.SUCCESS, "", ext, (body,))

    def _finish_error(self, code, remark: str) -> None:
        if self.result.matched:
            return self._answer()
        log.warning("%s", remark)
        self.app.service.call_soon_threadsafe(self.req.reply, code, remark)
