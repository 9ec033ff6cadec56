"""The CommitLog's syncs and the ConsumeQueue/index/checkpoint pass run on threads of their own:
a SYNC flush is answered while a checkpoint write hangs, and closing the store waits for both."""

import queue
import threading
import time

from quiver.wire.property_string import format_properties
from quiver_broker.checkpoint import CheckpointFile
from quiver_broker.store import MessageStore

HOST = b"\x7f\0\0\x01\0\0\x27\x10"


def _put(store):
    return store.put_batch("T", 0, [b"x" * 100] * 3, [format_properties({"TAGS": "a"})] * 3, [0] * 3, 0, 1, HOST)


def _hang_checkpoint(monkeypatch):
    """While hold[0]: a checkpoint write sets `entered` and waits for `gate` (a disk that takes
    its time over the rename and directory fsync)."""
    hold, entered, gate = [False], threading.Event(), threading.Event()
    real = CheckpointFile.write

    def write(self, cp):
        if hold[0]:
            entered.set()
            gate.wait(30)
        real(self, cp)

    monkeypatch.setattr(CheckpointFile, "write", write)
    return hold, entered, gate


def test_sync_flush_answered_while_the_checkpoint_write_hangs(tmp_path, monkeypatch):
    reports: queue.Queue = queue.Queue()
    store = MessageStore(str(tmp_path / "s"), flush_sync=True, flush_interval_ms=3_600_000,
                         logic_flush_interval_ms=1, on_flushed=reports.put)
    hold, entered, gate = _hang_checkpoint(monkeypatch)
    store.open()
    hold[0] = True
    try:
        store.request_flush(_put(store).end_offset)   # a flush pass, then (due) a ConsumeQueue/index one
        assert entered.wait(10), "no ConsumeQueue/index pass began"
        end = _put(store).end_offset
        store.request_flush(end)
        deadline, flushed = time.monotonic() + 10, 0
        while flushed < end and time.monotonic() < deadline:
            try:
                flushed = reports.get(timeout=0.1)
            except queue.Empty:
                pass
        assert flushed >= end and not gate.is_set(), "the SYNC flush waited for the checkpoint write"
        assert store.commit_log.flushed >= end
    finally:
        hold[0] = False
        gate.set()
        store.close()


def test_closing_waits_for_a_pass_in_progress(tmp_path, monkeypatch):
    store = MessageStore(str(tmp_path / "s"), flush_sync=True, flush_interval_ms=3_600_000, logic_flush_interval_ms=1)
    hold, entered, gate = _hang_checkpoint(monkeypatch)
    store.open()
    hold[0] = True
    store.request_flush(_put(store).end_offset)
    assert entered.wait(10)
    got = threading.Event()

    def exclusive():
        with store.exclusive():
            got.set()

    t = threading.Thread(target=exclusive)
    t.start()
    try:
        assert not got.wait(0.3), "a descriptor could be closed under a checkpoint write"
    finally:
        hold[0] = False
        gate.set()
        t.join(10)
    assert got.is_set()
    store.close()
