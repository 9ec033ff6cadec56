"""Broker locks of an orderly PushConsumer's queues (LOCK_BATCH_MQ, UNLOCK_BATCH_MQ).

An orderly queue is consumed only while this client holds its lock on the
broker (RocketMQ's RebalanceImpl lock / lockAll): taken with the queue, renewed
every `lock_interval_ms` for every owned queue, taken again by the consume
service when its view of a lock went stale, released once the queue's last
batch is done. Given the group, the client id and the broker call; it owns no
queue state (a ProcessQueue's `locked` and `lock_ts` are set by `renew`).
"""

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from quiver.client.base import MessageQueue
from quiver.client.process_queue import ProcessQueue
from quiver.errors import QuiverError
from quiver.wire import requests as rq

log = logging.getLogger(__name__)


class QueueLocks:
    """`call_broker(addr, request) -> Envelope`: the client's broker call."""

    def __init__(self, group: str, client_id: str, call_broker: Callable[[str, rq.Schema], Any]) -> None:
        self.group, self.client_id, self._call = group, client_id, call_broker

    def lock(self, addr: str, mqs: list[MessageQueue]) -> set[MessageQueue]:
        """The queues of `mqs` this client holds the lock of now (none if the broker failed)."""
        req = rq.LockBatchMq(group=self.group, client_id=self.client_id, queues=[(m.topic, m.queue_id) for m in mqs])
        try:
            got = set(rq.LockBatchReply.decode(self._call(addr, req).ext).locked)
        except QuiverError as exc:
            log.warning("locking %d queues on %s failed: %s", len(mqs), addr, exc)
            return set()
        return {m for m in mqs if (m.topic, m.queue_id) in got}

    def unlock(self, addr: str, mqs: list[MessageQueue]) -> None:
        req = rq.UnlockBatchMq(group=self.group, client_id=self.client_id, queues=[(m.topic, m.queue_id) for m in mqs])
        try:
            self._call(addr, req)
        except QuiverError as exc:
            log.warning("unlocking on %s failed: %s", addr, exc)

    def relock(self, pq: ProcessQueue) -> bool:
        return bool(self.lock(pq.addr, [pq.mq]))

    def renew(self, pqs: Iterable[ProcessQueue], locked_again: Callable[[ProcessQueue], None]) -> None:
        """Lock every queue of `pqs` again, one request per broker; `locked_again(pq)` for each
        queue whose lock was lost and is held again (its consumption resumes)."""
        by_addr: dict[str, list[ProcessQueue]] = {}
        for pq in pqs:
            by_addr.setdefault(pq.addr, []).append(pq)
        for addr, group in by_addr.items():
            got = self.lock(addr, [pq.mq for pq in group])
            now = time.monotonic()
            for pq in group:
                was = pq.locked
                pq.locked = pq.mq in got
                if pq.locked:
                    pq.lock_ts = now
                    if not was:
                        locked_again(pq)
