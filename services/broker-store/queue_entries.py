"""The entries a record gets: its ConsumeQueue entry (which records, where) and its index
keys, written by `dispatch` for the put path, recovery and a slave's append alike.

- Only a plain or committed record takes a queue offset (`takes_queue_offset`); half and
  rolled-back transactional records do not (RocketMQ writes 0).
- A record written earlier (recovered, or a master's, replicated) enters its queue only at the
  queue's next offset (`entry_due`), so repeating a recovery or a chunk adds nothing.
- Queue offsets lost in damage whose header cannot be read are filled with entries pointing at
  that damage (never served) when the queue's next record arrives past them (`Gaps`); a gap
  that no such damage explains is not filled (a corrupt QUEUEOFFSET must not skip a queue ahead).
- Damage whose header can be salvaged gets its entry where its header says (`queue_damage`).
"""

from __future__ import annotations

import collections
import logging
import zlib
from typing import TYPE_CHECKING, Callable

from quiver.wire import names, record
from quiver.wire.names import SCHEDULE_TOPIC, TIMER_TOPIC
from quiver.wire.properties import TIMER_DELIVER_MS, index_fields, tag_hash
from quiver.wire.property_string import get_property
from quiver.wire.speedups import fast

from .consume_queue import ENTRY, ConsumeQueue, pack_entries
from .index_file import HASH_MASK, prefix_crc

if TYPE_CHECKING:
    from .store import MessageStore

log = logging.getLogger(__name__)

UNATTRIBUTED_KEPT = 1024  # damaged spans without a readable header remembered for gap filling


def dispatch(store: MessageStore, topic: str, queue_id: int, sys_flag: int, store_ts: int,
             phys_offsets: list[int], sizes: list[int], props: list[str],
             to_cq: bool = True, to_index: bool = True) -> None:
    """ConsumeQueue and index entries for records of one queue (put, recovery, a slave's append).

    The index is given disk for its entries first and written last: the only
    write that can fail after the ConsumeQueue append is a rare second index
    file (see IndexService.put_many)."""
    to_cq = to_cq and takes_queue_offset(sys_flag)
    to_index = to_index and sys_flag & record.TX_MASK != record.TX_ROLLBACK
    want_tags = to_cq and topic != SCHEDULE_TOPIC and topic != TIMER_TOPIC
    codes, keyed = index_run(phys_offsets, props, prefix_crc(topic), want_tags, to_index)
    if keyed:
        store.index.reserve(len(keyed))
    if to_cq:
        if topic == SCHEDULE_TOPIC:
            levels = store.delay_levels_ms
            codes = [store_ts + levels[min(max(queue_id, 0), len(levels) - 1)]] * len(sizes)
        elif topic == TIMER_TOPIC:
            codes = [_int(get_property(p, TIMER_DELIVER_MS)) for p in props]
        store.queue(topic, queue_id).append(pack_entries(phys_offsets, sizes, codes))
    if keyed:
        store.index.put_many(keyed, store_ts)
        store.index.sync_header()


def takes_queue_offset(sys_flag: int) -> bool:
    """A record of this sys_flag gets a ConsumeQueue entry: not a half or rollback record."""
    tx = sys_flag & record.TX_MASK
    return tx == record.TX_NOT or tx == record.TX_COMMIT


class Gaps:
    """Damage no queue entry could be given to (its header unreadable), for filling queue gaps."""

    def __init__(self):
        self.unattributed: collections.deque = collections.deque(maxlen=UNATTRIBUTED_KEPT)  # (offset, size)
        self.gap_entries = 0        # queue entries filled in for damage without a readable header

    def gap_fill(self, after_phys: int, before_phys: int, gap: int) -> list[tuple[int, int]] | None:
        """`gap` (offset, size) entries pointing at unattributed damage between two records of a
        queue, or None when no such damage explains a gap that large."""
        spans = [s for s in self.unattributed if after_phys < s[0] < before_phys]
        if not spans or gap > sum(size for _, size in spans) // record.MIN_RECORD:
            return None
        return [spans[min(i, len(spans) - 1)] for i in range(gap)]


def entry_due(cq: ConsumeQueue, queue_offset: int, phys: int, gaps: Gaps) -> bool:
    """A record at CommitLog `phys` with `queue_offset` gets its entry in `cq` now: it is the
    queue's next offset, once a gap that unattributed damage explains is filled."""
    nxt = cq.max_offset
    if queue_offset == nxt:
        return True
    if queue_offset < nxt:
        return False
    nxt = _fill_gap(cq, nxt, phys, queue_offset, gaps)
    if queue_offset == nxt:
        return True
    log.warning("%s/%d: record at %d has queue offset %d past %d; not queued", cq.topic, cq.queue_id, phys,
                queue_offset, nxt)
    return False


def _fill_gap(cq: ConsumeQueue, nxt: int, phys: int, queue_offset: int, gaps: Gaps) -> int:
    """Queue offsets [nxt, queue_offset) lost in damage whose header could not be read: entries
    pointing at that damage (never served); returns the queue's next offset (unchanged when no
    such damage explains the gap)."""
    last = cq.entry(nxt - 1) if nxt > 0 else None
    spans = gaps.gap_fill(last[0] if last else -1, phys, queue_offset - nxt)
    if spans is None:
        return nxt
    cq.append(b"".join(ENTRY.pack(off, size, 0) for off, size in spans))
    gaps.gap_entries += len(spans)
    log.error("%s/%d: queue offsets [%d, %d) were in damaged CommitLog bytes: their entries point at the "
              "damage (never served), the queue goes on at %d", cq.topic, cq.queue_id, nxt, queue_offset,
              queue_offset)
    return cq.max_offset


def cut_past(cq: ConsumeQueue, end: int) -> int | None:
    """Cut the entries of `cq` pointing at or past CommitLog `end` (the log was cut back there);
    returns the queue offset cut from, None when no entry did."""
    last = cq.entry(cq.max_offset - 1) if cq.max_offset > 0 else None
    if last is None or last[0] + last[1] <= end:
        return None
    cut = cq.first_offset_where(lambda e: e[0] + e[1] > end)
    cq.truncate_to(cut)
    return cut


def queue_damage(store: MessageStore, head, pos: int, size: int, framed: bool, gaps: Gaps, store_ts: int = 0,
                 props: str = "", before: Callable[[tuple[str, int], int], None] | None = None) -> None:
    """Damaged bytes [pos, pos + size) with a salvaged `head` (topic, queue id, queue offset,
    sys_flag) or None: queued where the header says when that is its queue's next offset
    (served, the entry fails its check and is skipped); otherwise, or when its framing broke
    (the span may hold more records), remembered for filling gaps. `before(key, max offset)`
    is told before an entry is added."""
    queued = False
    if head is not None:
        topic, queue_id, queue_offset, sys_flag = head
        cq = store.cqs.get((topic, queue_id)) if names.is_valid_topic(topic) and queue_id >= 0 else None
        if cq is not None and takes_queue_offset(sys_flag) and queue_offset == cq.max_offset:
            if before is not None:
                before((topic, queue_id), cq.max_offset)
            dispatch(store, topic, queue_id, sys_flag, store_ts, [pos], [size], [props], to_index=False)
            queued = True
    if not (queued and framed):
        gaps.unattributed.append((pos, size))


@fast
def index_run(phys_offsets: list[int], props: list[str], prefix: int, want_tags: bool,
              to_index: bool) -> tuple[list[int], list[tuple[int, int]]]:
    """(tag codes, [(key hash, phys offset)]) of a run of records: their ConsumeQueue tag
    codes (when `want_tags`) and IndexFile keys, UNIQ_KEY then KEYS (when `to_index`).
    `prefix` is index_file.prefix_crc of the topic. Per message on the put path
    (compiled twin: quiver.wire.speedups)."""
    codes: list[int] = []
    keyed: list[tuple[int, int]] = []
    crc32, fields = zlib.crc32, index_fields
    for phys, p in zip(phys_offsets, props):
        tag, uniq, keys = fields(p)
        if want_tags:
            codes.append(tag_hash(tag) if tag is not None else 0)
        if to_index:
            if uniq is not None:
                keyed.append((crc32(uniq.encode(), prefix) & HASH_MASK, phys))
            keyed.extend((crc32(k.encode(), prefix) & HASH_MASK, phys) for k in keys)
    return codes, keyed


def _int(s: str | None) -> int:
    try:
        return int(s) if s else 0
    except ValueError:
        return 0
