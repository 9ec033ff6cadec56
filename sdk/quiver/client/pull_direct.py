"""PullConsumer's `direct_poll`: a poll() that finds nothing buffered holds the pulls of the idle
queues on its own thread's sockets (direct_poll.py) and reads their answers itself.

A held pull its thread does not read in time (the thread stopped polling) is
taken back: its answer is dropped and the IO thread pulls the queue again from
the same offset. It gets what it needs from its consumer: the sockets, the
queues and buffer (pull_buffer.py), the pull engine, and the consumer's calls
that apply an answer (`pulled`) and hand a queue to the IO thread (`pull`).
"""

import logging
import time
from collections.abc import Callable
from typing import Any

from quiver.client.direct_poll import DirectPolls, HeldPulls
from quiver.client.message import MessageSelector
from quiver.client.pull_buffer import Claim, PullBuffer, QueueState
from quiver.client.queue_puller import NO_FILTER_RETRY_S, QueuePuller
from quiver.wire.protocol import Envelope

log = logging.getLogger(__name__)

HELD_GRACE_S = 1.0   # a held pull not read this long after its suspend ends is taken back


class DirectPoller:
    """`selector(topic)`: a queue's subscription; `started()`: False once shut down;
    `pulled(st, gen, offset, single, pulled, retry_s)` applies an answer (None: a failed
    pull, retried after retry_s); `pull(st)` has the IO thread pull the queue."""

    def __init__(self, direct: DirectPolls, buffer: PullBuffer, puller: QueuePuller, suspend_ms: int, *,
                 selector: Callable[[str], MessageSelector | None], started: Callable[[], bool],
                 pulled: Callable[..., None], pull: Callable[[QueueState], None],
                 call_later: Callable[..., Any]) -> None:
        self.direct, self.buffer, self.puller, self.suspend_ms = direct, buffer, puller, suspend_ms
        self._selector, self._started, self._pulled, self._pull = selector, started, pulled, pull
        self._call_later = call_later

    def poll(self, deadline: float) -> None:
        """Until something is buffered or `deadline`: hold the pulls of idle queues on this
        thread's sockets, reading their answers as they come."""
        direct = self.direct
        held = direct.mine()
        if held is None:
            return   # shut down
        try:
            while True:
                for entry, env in direct.wait(held, 0):
                    self._answered(entry, env)
                left = deadline - time.monotonic()
                with self.buffer.cond:
                    if self.buffer.items or not self._started() or left <= 0:
                        return
                    claims = self.buffer.claim_idle()   # each claim is held or handed back below
                for claim in claims:
                    self._hold(held, claim, left)
                for entry, env in direct.wait(held, left):
                    self._answered(entry, env)
        finally:
            direct.release(held)

    def _hold(self, held: HeldPulls, claim: Claim, left_s: float) -> None:
        """Send a claimed queue's pull on this thread's socket, held by the broker at most until
        this poll's deadline; without a live connection the IO thread pulls it instead."""
        st, gen, offset, single = claim
        suspend_ms = max(1, min(self.suspend_ms, int(left_s * 1000)))
        try:
            prepared = self.puller.prepare(st, offset, self._selector(st.mq.topic), single=single,
                                           suspend_ms=suspend_ms)
        except Exception:
            log.exception("pull of %s not prepared: trying again", st.mq)
            prepared = None
        if prepared is None:
            self._pulled(st, gen, offset, single, None, NO_FILTER_RETRY_S)
            return
        via, sql, req = prepared
        req_id = self.direct.send(held, via, req, (st, gen, offset, single, via, sql))
        if not self.buffer.held(st, gen, req_id):
            return
        if req_id is None:
            self._pull(st)
        else:   # not read by its thread in time (it stopped polling): the IO thread takes the queue back
            self._call_later(suspend_ms / 1000 + HELD_GRACE_S, self._take_back, st, gen, req_id)

    def _answered(self, entry: tuple[QueueState, int, int, bool, str, bool], env: Envelope) -> None:
        st, gen, offset, single, via, sql = entry
        pulled, retry_s = self.puller.answer(st, via, sql, env)
        self._pulled(st, gen, offset, single, pulled, retry_s)

    def _take_back(self, st: QueueState, gen: int, req_id: int) -> None:
        if self.buffer.take_back(st, gen, req_id):
            self._pull(st)
