"""A Fetch that found less than its min bytes waits at the brokers, not on a timer.

Each partition that answered no records (and no error) gets a pull that its broker holds until
records are stored at the fetch offset or the Fetch's max wait runs out - a broker answers a
held pull the moment a put to its queue is visible, whoever sent the put. The Fetch is answered
in the turn the held pull that brings enough records is answered. Held pulls still under way
then are not wasted: each is kept under its offset (readahead.py, as Held), and the
next Fetch from there waits on it instead of pulling; so does a Fetch after one that read a
partition to its end (the pull left standing for the next offset, stand). One that
ran out at its broker meanwhile is sent again while the Fetch's max wait lasts.
"""

import concurrent.futures as cf
import time

from quiver.client import queue_puller

from . import mapping
from .protocol import NONE
from .readahead import AHEAD_BYTES

GRACE_S = 5.0   # a held pull's reply timeout past its suspend time
RESENDS = 8     # held pulls sent again in one Fetch (ones it took from earlier Fetches run out first)
STANDING_MS = (100, 4000)   # a standing pull's hold: twice the Fetch's max wait, within these


class Held:
    """A held pull (its reply's future) as kept in ReadAhead: taken, it may still be held."""

    __slots__ = ("future",)

    def __init__(self, future):
        self.future = future


def standing_ms(body) -> int:
    return min(STANDING_MS[1], max(STANDING_MS[0], 2 * int(body.max_wait.total_seconds() * 1000)))


def stand(gw, topic: str, partition: int, offset: int, max_bytes: int, suspend_ms: int) -> None:
    """A pull of a partition read up to its end, held at its broker until records come there:
    kept for the next Fetch of `offset`, which so waits for no round trip to start holding."""
    mq, _ = gw.queue(topic, partition)
    if mq is None:
        return
    try:
        addr, req = gw._pull_request(topic, mq, offset, min(max_bytes, AHEAD_BYTES), suspend_ms)
        fut = gw.admin._io().call_future(addr, req, None, (), suspend_ms / 1000 + GRACE_S)
    except Exception:
        return   # the next Fetch pulls
    gw.ahead.put(topic, partition, offset, Held(fut))


def hold(gw, body, responses: list, deadline: float, min_bytes: int, total: int, standing: dict) -> int:
    """Wait for records at the partitions of `responses` (the Fetch's first answers, filled in
    here) until `min_bytes` are there or `deadline`; the bytes answered in all. A partition with
    a standing pull (`standing`, taken from it) waits on that one instead of sending another."""
    suspend_ms = int((deadline - time.monotonic()) * 1000)
    held: dict = {}   # held pull's future -> (topic, partition request, its answer)
    for t, answer in zip(body.topics, responses):
        for p, part in zip(t.partitions, answer["partitions"]):
            if suspend_ms > 0 and part["error_code"] == NONE and not part["records"]:
                fut = standing.pop((t.topic, p.partition), None) or _send(gw, t.topic, p, suspend_ms)
                if fut is not None:
                    held[fut] = (t.topic, p, part)
    budget = (body.max_bytes if body.max_bytes > 0 else 1 << 30) - total
    pending, resent = set(held), 0
    while pending and total < min_bytes:
        done, pending = cf.wait(pending, max(0.0, deadline - time.monotonic()), cf.FIRST_COMPLETED)
        if not done:
            break   # max wait is over
        for fut in done:
            topic, p, part = held.pop(fut)
            size, caught_up = _answer(gw, fut, p, part, min(p.partition_max_bytes, budget))
            total, budget = total + size, max(0, budget - size)
            if caught_up is not None:
                stand(gw, topic, p.partition, caught_up, p.partition_max_bytes, standing_ms(body))
            elif size == 0 and resent < RESENDS:   # a pull held since an earlier Fetch ran out: hold anew
                resent += 1
                again = _send(gw, topic, p, int((deadline - time.monotonic()) * 1000))
                if again is not None:
                    held[again] = (topic, p, part)
                    pending.add(again)
    for fut in pending:   # still held at the broker: the next Fetch of the offset waits on it
        topic, p, _ = held[fut]
        standing[(topic, p.partition)] = fut
    return total


def _send(gw, topic: str, p, suspend_ms: int):
    """The held pull of one partition (its future), or None when it cannot be sent."""
    mq, _ = gw.queue(topic, p.partition)
    if mq is None or p.fetch_offset < 0 or suspend_ms <= 0:
        return None
    try:
        addr, req = gw._pull_request(topic, mq, p.fetch_offset, p.partition_max_bytes, suspend_ms)
        return gw.admin._io().call_future(addr, req, None, (), suspend_ms / 1000 + GRACE_S)
    except Exception:
        return None


def _answer(gw, fut, p, part: dict, max_bytes: int) -> tuple[int, int | None]:
    """A held pull's records put into its partition's answer: their size (0: none came), and the
    offset after them when they were all stored there (else None)."""
    try:
        pulled = queue_puller.read(fut.result(0))
    except Exception:
        return 0, None   # the partition is answered empty: the client fetches it again
    if pulled.body is None:
        return 0, None
    gw.tally_pulled(pulled, p.fetch_offset)
    data, used, last = mapping.pulled_batch(pulled.body, p.fetch_offset, max_bytes)
    if used:
        gw.tally("answered", used)
        part.update(records=data, high_watermark=pulled.max, last_stable_offset=pulled.max,
                    log_start_offset=pulled.min)
    return len(data), (last + 1 if used and last + 1 >= pulled.max else None)
