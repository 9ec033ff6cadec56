"""What consumers may see: every queue up to the store's confirm offset.

The confirm offset is the CommitLog offset below which every byte is as safe as
the broker promises: flushed with SYNC flush (written with ASYNC) and, with
--auto-failover, also held by every SyncStateSet member (`replica_confirm`, set
by the replication role: RocketMQ 5's confirmOffset, Kafka's high watermark).
Pull, POP, max offset, time search, key query and view by id never pass it, so
no consumer reads a record that a failover may still cut away, and no group
commits an offset past what the next master has.

`replica_confirm` is None without --auto-failover (reads then follow the local
durability point alone) and FOLLOW_LOCAL while the SyncStateSet is the master
alone. Each queue's `pending` holds (CommitLog end, first queue offset) of the
batches written since a bound applies and not yet confirmed, in queue order; the
queue is visible up to the first one's queue offset. `seed` covers entries
written before the bound applied (recovered or replicated) with one conservative
entry per queue. The store-wide `unconfirmed` list names the queues to wake
(held pulls and pops) once their batch is confirmed.
"""

import collections

FOLLOW_LOCAL = 1 << 62   # replica_confirm of a master alone in its SyncStateSet: its own end counts


def note(store, cq, end: int, qoff: int, more=()) -> None:
    """A batch of `cq` from queue offset `qoff`, ending at CommitLog `end`, is not visible before
    confirmed; `more`: (end, queue offset) of the batches after it (a replica's chunk, per record)."""
    pend = cq.pending
    if pend:  # a queue nobody reads keeps only its unconfirmed batches
        confirm = store.confirm_offset
        while pend and pend[0][0] <= confirm:
            pend.popleft()
    pend.append((end, qoff))
    if more:
        pend.extend(more)
        end = pend[-1][0]
    if store.replica_confirm is not None:
        store.unconfirmed.append((end, cq.topic, cq.queue_id))


def visible_max(store, cq) -> int:
    pend = cq.pending
    if not pend:
        return cq.max_offset
    confirm = store.confirm_offset
    while pend and pend[0][0] <= confirm:
        pend.popleft()
    return pend[0][1] if pend else cq.max_offset


def seed(store, offset: int) -> None:
    """A bound of `offset` applies from now: queue entries already written past it wait for it."""
    end = store.commit_log.write_end
    for cq in list(store.cqs.values()):
        last = cq.entry(cq.max_offset - 1) if cq.max_offset > cq.min_offset else None
        if last is None or last[0] + last[1] <= offset:
            continue
        head = cq.entry(cq.min_offset)  # a restart's bound of 0: all of it, no search
        if head is not None and head[0] + head[1] > offset:
            first = cq.min_offset
        else:
            first = cq.first_offset_where(lambda e: e[0] + e[1] > offset, lo=cq.min_offset)
        if not cq.pending or first < cq.pending[0][1]:
            cq.pending.appendleft((end, first))  # the latest end: confirmed only with all it covers
            store.unconfirmed.append((end, cq.topic, cq.queue_id))


def cut(store, end: int) -> None:
    """The CommitLog was cut back to `end` and queues with it: pending batches follow."""
    for cq in list(store.cqs.values()):
        pend = cq.pending
        while pend and pend[-1][1] >= cq.max_offset:
            pend.pop()
        if pend and pend[-1][0] > end:
            cq.pending = collections.deque((min(e, end), q) for e, q in pend)
    rc = store.replica_confirm
    if rc is not None and rc != FOLLOW_LOCAL and rc > end:
        store.replica_confirm = end


def wake(store) -> None:
    """Wake the queues whose batches the confirm offset now covers (service thread)."""
    batches = store.unconfirmed
    if store.on_confirmed is None:
        batches.clear()
        return
    confirm = store.confirm_offset
    touched = set()
    while batches and batches[0][0] <= confirm:
        _, topic, qid = batches.popleft()
        touched.add((topic, qid))
    for topic, qid in touched:
        store.on_confirmed(topic, qid)


def record_visible(store, rec) -> bool:
    """A record found by key or CommitLog offset may be shown to a client."""
    return rec.phys_offset + rec.size <= store.confirm_offset
