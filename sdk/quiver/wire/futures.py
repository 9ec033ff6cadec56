"""A concurrent.futures.Future that creates its Condition only when someone waits.

A pipelined producer makes one Future per message; building a Condition for
each cost a fifth of the client's CPU. Here the Condition appears on the first
blocking call (result() on a pending future, add_done_callback, wait());
completing a future nobody waited on takes one global lock and no Condition.
"""

import threading
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from typing import Any

# the states concurrent.futures.Future keeps in `_state` (stable since 3.2; a unit test checks them)
PENDING, CANCELLED, CANCELLED_AND_NOTIFIED, FINISHED = "PENDING", "CANCELLED", "CANCELLED_AND_NOTIFIED", "FINISHED"

_create_lock = threading.Lock()
_ENDED = (CANCELLED, CANCELLED_AND_NOTIFIED, FINISHED)


class LightFuture(Future[Any]):
    # Until the Condition exists these are the class's empty tuples: Future appends to both only
    # holding the Condition, so its creation gives them lists; two lists fewer per message for
    # the collector to allocate and scan
    _waiters: Any = ()
    _done_callbacks: Any = ()
    _result = None
    _exception = None
    _cond = None

    def __init__(self, callback: Callable[[Future[Any]], object] | None = None) -> None:  # noqa: super().__init__ would build the Condition
        self._state = PENDING
        if callback is not None:
            self._done_callbacks = (callback,)

    @property
    def _condition(self):
        cond = self._cond
        if cond is None:
            with _create_lock:
                cond = self._cond
                if cond is None:
                    self._waiters = []
                    self._done_callbacks = list(self._done_callbacks)
                    cond = self._cond = threading.Condition()
        return cond

    def _finish(self, result, exception) -> bool:
        """Complete without a Condition if none exists yet; False means take the slow path."""
        with _create_lock:
            if self._cond is not None:
                return False
            if self._state in _ENDED:
                raise InvalidStateError(f"{self._state}: {self!r}")
            self._result, self._exception = result, exception
            self._state = FINISHED
        self._invoke_callbacks()
        return True

    def set_result(self, result) -> None:
        if not self._finish(result, None):
            super().set_result(result)

    def set_exception(self, exception) -> None:
        if not self._finish(None, exception):
            super().set_exception(exception)

    def result(self, timeout=None):
        if self._state == FINISHED:
            if self._exception is not None:
                raise self._exception
            return self._result
        return super().result(timeout)

    def exception(self, timeout=None):
        if self._state == FINISHED:
            return self._exception
        return super().exception(timeout)


def set_results(futures: list[Future[Any]], results: list[Any]) -> None:
    """`futures[i].set_result(results[i])` for each, the LightFutures nobody waits on under one
    take of the lock (a batch's replies complete hundreds at once); the others one by one."""
    slow: list[int] = []
    called: list[LightFuture] = []
    with _create_lock:
        for i, fut in enumerate(futures):
            if type(fut) is not LightFuture or fut._cond is not None or fut._state != PENDING:
                slow.append(i)
                continue
            fut._result = results[i]
            fut._state = FINISHED
            if fut._done_callbacks:
                called.append(fut)
    for fut in called:
        fut._invoke_callbacks()
    for i in slow:
        futures[i].set_result(results[i])

