"""SIGTERM: the broker stops without leaving a request it took unanswered.

Owns the order of a graceful stop; not the parts it asks (the request table, the puller,
the group commit, the replication role) nor what the App does after the loop ends
(`App.shutdown`: unregister, flush, close)::

    SIGTERM -> begin (service thread)
      1. writes and new pulls refused: SERVICE_NOT_AVAILABLE "shutting down" (a producer
         retries on its next route; a consumer pulls again elsewhere or later)
      2. every held pull answered now (what arrived, else PULL_NOT_FOUND)
      3. wait until every send taken is answered (flush and replica acks, at most
         `deadline_s`; one still waiting then is answered by its own timeout rule)
      4. --auto-failover master: resign to the controllers, which elect an in-sync replica at
         once instead of waiting out the heartbeat timeout (it has every acknowledged write:
         step 3 came first, and this broker acknowledges nothing more)
      5. stop the loop: App.shutdown flushes and closes the store
    A second SIGTERM stops at once.
"""

import logging
import time
from typing import Callable

from quiver.wire.codes import RequestCode, ResponseCode

log = logging.getLogger(__name__)

STEP_S = 0.02
RESIGN_WAIT_S = 1.0   # the controllers' answer to the resignation, at most
PULLS = (RequestCode.PULL_MESSAGE, RequestCode.POP_MESSAGE)


class Drain:
    """`refused`: the codes to refuse while draining (writes); `in_flight()`: sends taken and not
    yet answered; `answer_held()`: answer every held pull and pop now; `resign(done)`: hand
    mastership over, calling `done()` when answered (None: no controller to tell)."""

    def __init__(self, service, refused, in_flight: Callable[[], int], answer_held: Callable[[], None],
                 resign: Callable[[Callable[[], None]], None] | None, deadline_s: float):
        self.service = service
        self.refused = tuple(refused) + PULLS
        self.in_flight, self.answer_held, self.resign = in_flight, answer_held, resign
        self.deadline_s = deadline_s
        self.started: float | None = None
        self.stopping = False

    def begin(self) -> None:
        if self.started is not None:
            log.warning("second SIGTERM: stopping now")
            self.service.stop()
            return
        self.started = time.monotonic()
        log.info("SIGTERM: draining (new writes and pulls refused, %d sends in flight)", self.in_flight())
        self.service.handlers.update({code: _shutting_down for code in self.refused if code in self.service.handlers})
        self.answer_held()
        self.step()

    def step(self) -> None:
        """Wait for the sends in flight, then resign, then stop (a timer on the service thread)."""
        left = self.in_flight()
        waited = time.monotonic() - self.started
        if left and waited < self.deadline_s:
            self.service.call_later(STEP_S, self.step)
            return
        if left:
            log.warning("drain deadline: %d sends still unanswered after %.1f s", left, waited)
        if self.resign is None:
            self._stop()
            return
        self.service.call_later(RESIGN_WAIT_S, self._stop)   # the controllers may not answer
        self.resign(lambda: self.service.call_soon_threadsafe(self._stop))

    def _stop(self) -> None:
        if not self.stopping:
            self.stopping = True
            log.info("drained in %.2f s: stopping", time.monotonic() - self.started)
            self.service.stop()


def _shutting_down(req) -> None:
    req.reply(ResponseCode.SERVICE_NOT_AVAILABLE, "this broker is shutting down: retry on another broker or later")
