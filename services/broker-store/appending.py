"""The common put in one step: a batch for a plain queue that fits the CommitLog's current
segment and its ConsumeQueue's last file.

`put_run` encodes the records (record.encode_run), their queue entries with tag codes and
their index keys (queue_entries.index_run, consume_queue.pack_entries) and writes records and
entries, one call instead of a Python step for each (compiled twin: quiver.wire.speedups).
`put_fitting` is the store's side: it says whether a put is such a batch, moves the files'
ends after the writes, cuts torn bytes when one fails and gives the index its keys. Every
other put (a segment or queue file to roll, a half message, a schedule or timer topic) goes
through store.put_batch's general path; both write the same bytes.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from quiver.wire import record
from quiver.wire.names import SCHEDULE_TOPIC, TIMER_TOPIC
from quiver.wire.speedups import fast

from .consume_queue import ENTRY_SIZE, pack_entries
from .index_file import prefix_crc
from .queue_entries import index_run

if TYPE_CHECKING:
    from .consume_queue import ConsumeQueue
    from .store import MessageStore

log = logging.getLogger(__name__)


def pwrite_all(fd: int, data: bytes, at: int) -> None:
    """All of `data` at file position `at` (a regular file takes it in one call)."""
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, at)
        if n == 0:
            raise OSError("pwrite wrote nothing")
        at += n
        view = view[n:]


@fast
def put_run(head: record.RunHead, bodies, flags, pbs: list[bytes], props: list[str], body_crcs, prop_crc: bool,
            prefix: int, cl_fd: int, cl_at: int, cq_fd: int,
            cq_at: int) -> tuple[int, list[int], list[int], list[tuple[int, int]]]:
    """Records at `cl_at` of CommitLog file `cl_fd`, their entries at `cq_at` of queue file
    `cq_fd`: (bytes written to the CommitLog, phys offsets, sizes, index keys). Everything is
    encoded before the first write; an OSError may leave torn bytes past either position."""
    data, phys_offsets, sizes = record.encode_run(head, bodies, flags, pbs, body_crcs, prop_crc)
    codes, keyed = index_run(phys_offsets, props, prefix, True, True)
    entries = pack_entries(phys_offsets, sizes, codes)
    pwrite_all(cl_fd, data, cl_at)
    pwrite_all(cq_fd, entries, cq_at)
    return len(data), phys_offsets, sizes, keyed


def fits(cq: ConsumeQueue | None, topic: str, count: int) -> bool:
    """A batch of `count` for this queue can take the one-step put (the caller checked that its
    records fit the CommitLog segment)."""
    if cq is None or topic == SCHEDULE_TOPIC or topic == TIMER_TOPIC or not cq.files:
        return False
    return cq.files[-1].size + count * ENTRY_SIZE <= cq.file_bytes


def put_fitting(store: MessageStore, cq: ConsumeQueue, head: record.RunHead, bodies, flags, pbs, props,
                body_crcs) -> tuple[list[int], list[int], int]:
    """The one-step put of a batch `fits` allows: (phys offsets, sizes, CommitLog end). On an
    OSError the torn bytes are cut and it is raised, for the store to roll the put back."""
    seg, qf = store.commit_log.segments[-1], cq.files[-1]
    try:
        n, phys_offsets, sizes, keyed = put_run(head, bodies, flags, pbs, props, body_crcs, store.prop_crc,
                                                prefix_crc(cq.topic), seg.fd, seg.size, qf.fd, qf.size)
    except OSError:
        _cut_to_size(seg.fd, seg.size, seg.path)
        _cut_to_size(qf.fd, qf.size, qf.path)
        raise
    seg.size += n
    qf.size += len(sizes) * ENTRY_SIZE
    cq.dirty = True
    if keyed:   # an OSError here (no disk for the index) rolls back the records and entries above
        store.index.put_keys(keyed, head.store_ts)
    return phys_offsets, sizes, head.phys + n


def _cut_to_size(fd: int, size: int, path: str) -> None:
    try:
        os.ftruncate(fd, size)
    except OSError as exc:   # the next append overwrites them; recovery would find them torn
        log.error("could not cut torn bytes of %s back to %d: %s", path, size, exc)
