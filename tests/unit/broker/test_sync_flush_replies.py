"""SYNC flush: no SEND_OK leaves before the fdatasync covering its record returned.

A real store and flush thread on a real file; os.fdatasync is wrapped only to note
how many CommitLog bytes a returned fdatasync covers (the file size when it was
called) and to make the disk slow at random, so replies, flush passes and the
ConsumeQueue/index syncs interleave. The test thread plays the broker's service
thread: it puts, waits in the group commit and runs the flush thread's reports."""

import collections
import os
import random
import time

from quiver.wire.codes import ResponseCode
from quiver.wire.property_string import format_properties
from quiver_broker.group_commit import GroupCommit
from quiver_broker.store import MessageStore

HOST = b"\x7f\0\0\x01\0\0\x27\x10"
PUTS = 400


class _Req:
    answered = False

    def __init__(self, end: int, replies: list, durable: list):
        self.end, self.replies, self.durable = end, replies, durable

    def reply(self, code, remark, ext):
        self.replies.append((self.end, self.durable[0], code))  # what the disk holds as the reply leaves
        self.answered = True


def test_no_sync_flush_reply_precedes_the_fdatasync_covering_it(tmp_path, monkeypatch):
    rnd = random.Random(18)
    inbox = collections.deque()   # the flush thread's reports, as call_soon_threadsafe queues them
    store = MessageStore(str(tmp_path / "s"), flush_sync=True, flush_interval_ms=3_600_000,
                         logic_flush_interval_ms=1, on_flushed=inbox.append)
    durable, log_syncs = [0], [0]
    real = os.fdatasync

    def fdatasync(fd):
        segs = store.commit_log.segments
        if not segs or fd != segs[0].fd:
            return real(fd)
        size = os.fstat(fd).st_size   # bytes written before this call: what it covers at least
        time.sleep(rnd.random() * 0.003)
        real(fd)
        durable[0] = max(durable[0], size)
        log_syncs[0] += 1

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    store.open()
    gc = GroupCommit(store, True, 60_000, notify=lambda topic, queue_id: None)
    replies: list[tuple[int, int, int]] = []
    try:
        for i in range(PUTS):
            n = rnd.randint(1, 20)
            res = store.put_batch("T", i % 3, [b"x" * rnd.randint(1, 2000)] * n,
                                  [format_properties({"TAGS": "a"})] * n, [0] * n, 0, 1, HOST)
            gc.wait(_Req(res.end_offset, replies, durable), {}, [("T", i % 3, res.end_offset)])
            while inbox:
                gc.on_flushed(inbox.popleft())
            if rnd.random() < 0.2:
                time.sleep(rnd.random() * 0.002)
        deadline = time.monotonic() + 20
        while len(replies) < PUTS and time.monotonic() < deadline:
            while inbox:
                gc.on_flushed(inbox.popleft())
            time.sleep(0.001)
    finally:
        store.close()
    assert len(replies) == PUTS and {code for _, _, code in replies} == {ResponseCode.SUCCESS}
    early = [(end, on_disk) for end, on_disk, _ in replies if end > on_disk]
    assert not early, f"{len(early)} replies left before their fdatasync returned, first {early[0]}"
    assert 1 <= log_syncs[0] < PUTS / 2   # group commit: one fdatasync answers many puts
