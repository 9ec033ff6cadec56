"""Queue locks for orderly consumption: LOCK_BATCH_MQ / UNLOCK_BATCH_MQ.

Per group, per (topic, queue) of this broker, one owning client id. A lock is
a lease: it expires 60 s after its last renewal (RocketMQ's
rebalance.lockMaxLiveTime), and a holder the broker no longer counts as a
group member (unregistered or silent past the client expiry, `is_member`) loses
it at once. Bookkeeping and its two requests: no sockets; the clock is
injectable for tests.
"""

import time

from quiver.wire.codes import RequestCode, ResponseCode
from quiver.wire.replies import LockBatchReply

LOCK_LEASE_S = 60.0


class LockManager:
    def __init__(self, lease_s: float = LOCK_LEASE_S, clock=time.monotonic, is_member=None):
        self.lease_s = lease_s
        self.clock = clock
        self.is_member = is_member or (lambda group, client_id: True)
        self.locks: dict[str, dict[tuple[str, int], list]] = {}  # group -> mq -> [client_id, renewed]

    def holder(self, group: str, mq: tuple[str, int]) -> str | None:
        entry = self.locks.get(group, {}).get(mq)
        if entry is None or self.clock() - entry[1] > self.lease_s or not self.is_member(group, entry[0]):
            return None
        return entry[0]

    def try_lock(self, group: str, client_id: str, mqs) -> list[tuple[str, int]]:
        """Lock (or renew) what is free or already ours; returns the queues now held."""
        table = self.locks.setdefault(group, {})
        now = self.clock()
        got = []
        for mq in mqs:
            owner = self.holder(group, mq)
            if owner is None or owner == client_id:
                table[mq] = [client_id, now]
                got.append(mq)
        return got

    def unlock(self, group: str, client_id: str, mqs) -> None:
        table = self.locks.get(group, {})
        for mq in mqs:
            entry = table.get(mq)
            if entry is not None and entry[0] == client_id:
                del table[mq]

    def held_by_group(self, group: str) -> dict[tuple[str, int], str]:
        return {mq: e[0] for mq, e in list(self.locks.get(group, {}).items()) if self.holder(group, mq) is not None}


    # ---- requests ---------------------------------------------------------------

    def handlers(self) -> dict:
        return {RequestCode.LOCK_BATCH_MQ: self.lock_batch, RequestCode.UNLOCK_BATCH_MQ: self.unlock_batch}

    def lock_batch(self, req) -> None:
        a = req.args
        got = self.try_lock(a.group, a.client_id, a.queues)
        req.reply(ResponseCode.SUCCESS, "", LockBatchReply(locked=[tuple(m) for m in got]))

    def unlock_batch(self, req) -> None:
        a = req.args
        self.unlock(a.group, a.client_id, a.queues)
        req.reply(ResponseCode.SUCCESS)
