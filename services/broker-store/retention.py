"""Retention: delete whole expired CommitLog segments, and what only pointed into them.

Owns the deletion policy (RocketMQ's CleanCommitLogService rules); the store
runs it as a step from the broker's scheduler (every 10 s there).

- A segment is expired when its mtime + file_reserved_hours <= now.
- Expired segments are deleted oldest-first, stopping at the first one that is
  not, never the current (last) segment, at most DELETE_BATCH_MAX per step, and
  only in a delete_when hour, above disk_max_used_ratio, or when forced.
- Above disk_clean_forcibly_ratio the oldest segments go even if not expired,
  until the ratio drops below it.
- Refusing puts on a full disk is the disk guard's (disk_space.py, asked before
  every put); a step that deleted segments re-checks it, so writes resume at once.
- A segment a compacted queue still needs (compaction.py's retention_bound: not
  yet covered by its compacted log) is kept until a pass (periodic, or `quiver topic
  compact`) covers it.
- Then ConsumeQueue min offsets move to the first entry still in the log, their
  fully-stale files are deleted, and so are index files below the new minimum.
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .store import MessageStore

log = logging.getLogger(__name__)

DELETE_BATCH_MAX = 10


def clean_expired(store: MessageStore, now_ms: int | None = None, force: bool = False) -> int:
    """One retention step; returns the number of segments deleted."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    ratio = store.disk_ratio()
    hour = time.localtime(now_ms / 1000).tm_hour
    may_delete_expired = force or hour in store.delete_when_hours \
        or ratio > store.disk_max_used_ratio
    forcibly = ratio > store.disk_clean_forcibly_ratio
    reserved_ms = store.file_reserved_hours * 3_600_000
    cl = store.commit_log
    deleted = 0
    held = store.compaction.retention_bound()
    # The flush lock: the flush thread must not be syncing a descriptor we close.
    tiered = store.tiered
    with store.exclusive():
        if tiered is not None:  # only uploaded segments go, by the local retention (tiered.py)
            deleted = tiered.clean_local(store, now_ms, forcibly, held)
        while tiered is None and deleted < DELETE_BATCH_MAX and len(cl.segments) > 1:
            seg = cl.segments[0]
            expired = os.stat(seg.path).st_mtime * 1000 + reserved_ms <= now_ms
            if not ((expired and may_delete_expired) or forcibly):
                break
            if held is not None and seg.end > held:
                log.info("segment %s kept: a compacted queue needs it (offset %d) until compacted", seg.path, held)
                break
            log.info("deleting segment %s (%s, disk %.0f%%)", seg.path,
                     "expired" if expired else "disk pressure", ratio * 100)
            cl.delete_oldest()
            deleted += 1
            if forcibly:
                ratio = store.disk_ratio()
                forcibly = ratio > store.disk_clean_forcibly_ratio
        if deleted or (tiered is not None and tiered.min_moved(store.reads.min_offset)):
            _follow_min(store, store.reads.min_offset)
    if deleted:
        store.disk.check()
    if store.disk.full:
        log.warning("disk guard refusing puts: %s", store.disk.remark)
    return deleted


def _follow_min(store: MessageStore, min_phys: int) -> None:
    """ConsumeQueue min offsets and files, and index files, after the log's start moved."""
    for cq in list(store.cqs.values()):
        cq.min_offset = cq.first_offset_where(lambda e: e[0] >= min_phys, lo=cq.min_offset)
        cq.delete_files_below(cq.min_offset)
    store.index.delete_below(min_phys)
