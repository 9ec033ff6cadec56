"""A put that fails half-way (ENOSPC, EIO) leaves nothing a later put builds on; the guard refuses first."""

import errno
import os

import pytest

from quiver.wire import record
from quiver.wire.property_string import format_properties
from quiver_broker import checkpoint
from quiver_broker.checkpoint import Checkpoint, CheckpointFile
from quiver_broker.group_commit import GroupCommit
from quiver_broker.index_file import IndexFile
from quiver_broker.store import GetStatus, MessageStore, PutStatus

HOST = b"\x7f\0\0\x01\0\0\x27\x10"
SEG = 8192


@pytest.fixture
def store(tmp_path):
    s = MessageStore(str(tmp_path / "s"), segment_bytes=SEG, cq_entries_per_file=8, index_slots=64,
                     index_entries=32, flush_interval_ms=3_600_000)
    s.disk.check_interval_s = 0   # every put asks statvfs: a test's freed disk is seen at once
    s.open()
    yield s
    s.close()


def put(store, n, tag="x", size=200):
    bodies = [os.urandom(size) for _ in range(n)]
    props = [format_properties({"KEYS": f"{tag}{i}", "UNIQ_KEY": f"{tag}-u{i}"}) for i in range(n)]
    return bodies, store.put_batch("T", 0, bodies, props, [0] * n, 0, 1, HOST)


def pull_all(store):
    out, off = [], 0
    while True:
        g = store.get_messages("T", 0, off, max_msgs=64)
        if g.status is not GetStatus.FOUND:
            return out
        out += [r.body for r in record.decode_many(g.data)]
        off = g.next_offset


class FailingWrites:
    """os.pwrite that, for descriptors `which(fd)` picks, writes half of the data and then fails."""

    def __init__(self, monkeypatch, which, err=errno.ENOSPC):
        self.real = os.pwrite
        self.which, self.err, self.failed = which, err, 0
        monkeypatch.setattr(os, "pwrite", self)

    def __call__(self, fd, data, pos):
        if not self.which(fd):
            return self.real(fd, data, pos)
        if len(data) > 1 and not self.failed:
            self.failed = 1
            return self.real(fd, memoryview(data)[:len(data) // 2], pos)  # a short write first
        self.failed += 1
        raise OSError(self.err, os.strerror(self.err))


def seg_fds(store):
    return {s.fd for s in store.commit_log.segments}


def cq_fds(store):
    return {f.fd for cq in store.cqs.values() for f in cq.files}


def sizes_on_disk(store):
    return [os.path.getsize(s.path) for s in store.commit_log.segments]


def assert_resumes_intact(store, before, tmp_path):
    """Writes work again, nothing torn: all bodies in order, also after a reopen."""
    store.disk.check()
    more, res = put(store, 3, tag="after")
    assert res.status is PutStatus.PUT_OK
    assert pull_all(store) == before + more
    assert sizes_on_disk(store) == [s.size for s in store.commit_log.segments]
    store.close()
    again = MessageStore(str(tmp_path / "s"), segment_bytes=SEG, cq_entries_per_file=8, index_slots=64,
                         index_entries=32, flush_interval_ms=3_600_000)
    again.open()
    try:
        assert pull_all(again) == before + more
        assert [r.body for r in again.query_by_key("T", "after0")] == [more[0]]
    finally:
        again.close()
    store.open()  # the fixture closes it


def test_commit_log_write_error_is_cut_back_and_refused_with_the_error(store, tmp_path, monkeypatch):
    before, _ = put(store, 5)
    end, qmax = store.max_phys_offset, store.max_offset("T", 0)
    fw = FailingWrites(monkeypatch, lambda fd: fd in seg_fds(store))
    _, res = put(store, 4, tag="lost")
    assert res.status is PutStatus.WRITE_FAILED and fw.failed == 2
    assert "No space left on device" in res.remark and "nothing of this put was stored" in res.remark
    assert (store.max_phys_offset, store.commit_log.write_end, store.max_offset("T", 0)) == (end, end, qmax)
    assert sizes_on_disk(store) == [s.size for s in store.commit_log.segments]  # torn bytes cut
    assert store.disk.full and store.stats()["puts_rolled_back"] == 1
    monkeypatch.setattr(os, "pwrite", fw.real)
    assert_resumes_intact(store, before, tmp_path)


def test_consume_queue_write_error_cuts_back_the_commit_log_too(store, tmp_path, monkeypatch):
    before, _ = put(store, 6)       # 6 of 8 entries in the first CQ file: the next put rolls it
    end = store.max_phys_offset
    fw = FailingWrites(monkeypatch, lambda fd: fd in cq_fds(store) or fd not in seg_fds(store), errno.EIO)
    _, res = put(store, 5, tag="lost")
    assert res.status is PutStatus.WRITE_FAILED and "Input/output error" in res.remark
    assert store.max_phys_offset == store.commit_log.write_end == end
    cq = store.cqs[("T", 0)]
    assert cq.max_offset == 6 and [f.size for f in cq.files] == [os.path.getsize(f.path) for f in cq.files]
    monkeypatch.setattr(os, "pwrite", fw.real)
    assert_resumes_intact(store, before, tmp_path)


def test_failed_put_across_a_segment_roll_removes_the_new_segment(store, tmp_path, monkeypatch):
    before, _ = put(store, 20, size=300)
    segs = [s.path for s in store.commit_log.segments]
    end = store.max_phys_offset
    old = seg_fds(store)
    fw = FailingWrites(monkeypatch, lambda fd: fd not in old and fd not in cq_fds(store))
    _, res = put(store, 30, tag="lost", size=300)  # spills into a new segment, whose write fails
    assert res.status is PutStatus.WRITE_FAILED
    assert [s.path for s in store.commit_log.segments] == segs and store.max_phys_offset == end
    assert sorted(os.listdir(tmp_path / "s" / "commitlog")) == [os.path.basename(p) for p in segs]
    monkeypatch.setattr(os, "pwrite", fw.real)
    assert_resumes_intact(store, before, tmp_path)


def test_index_without_disk_refuses_the_put_before_its_entries(store, tmp_path, monkeypatch):
    before, _ = put(store, 3)
    end = store.max_phys_offset
    real = os.posix_fallocate

    def no_space(fd, off, n):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", no_space)
    _, res = put(store, 20, tag="lost")   # needs a second index file (32 entries each)
    assert res.status is PutStatus.WRITE_FAILED
    assert store.max_phys_offset == end and store.max_offset("T", 0) == 3
    monkeypatch.setattr(os, "posix_fallocate", real)
    assert_resumes_intact(store, before, tmp_path)


def test_full_disk_refuses_before_writing_anything(store):
    put(store, 2)
    end = store.max_phys_offset
    sizes = sizes_on_disk(store)
    store.disk.usage = lambda path: (1000 << 20, 930 << 20, 70 << 20)
    _, res = put(store, 2)
    assert res.status is PutStatus.DISK_FULL and res.phys_offsets == []
    assert res.remark.startswith("disk 93 % full on ") and res.remark.endswith("writes resume below 85 %")
    assert store.max_phys_offset == end and sizes_on_disk(store) == sizes
    assert store.get_messages("T", 0, 0).count == 2   # reads keep working
    st = store.stats()
    assert st["disk_full"] and st["puts_refused_disk"] == 1


def test_checkpoint_or_queue_sync_error_keeps_the_old_checkpoint(store, monkeypatch, tmp_path):
    put(store, 3)
    store.flush_step(force=True)
    path = str(tmp_path / "s" / "checkpoint")
    old = checkpoint.read(path)
    real = os.replace

    def failing(*a):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", failing)
    put(store, 2)
    assert store.flush_step(force=True) == store.max_phys_offset  # the CommitLog flush still counts
    assert checkpoint.read(path) == old and store.stats()["checkpoint_errors"] == 1
    monkeypatch.setattr(os, "replace", real)
    store.flush_step(force=True)
    assert checkpoint.read(path).logics_offset == store.max_phys_offset


def test_checkpoint_write_is_whole_or_not_at_all(tmp_path):
    path = str(tmp_path / "checkpoint")
    (tmp_path / "checkpoint.tmp").write_bytes(b"torn")
    f = CheckpointFile(path)
    assert not os.path.exists(path + ".tmp")    # a crash's leftover is removed at open
    f.write(Checkpoint(1, 2, 3, 400, 300))
    assert checkpoint.read(path) == Checkpoint(1, 2, 3, 400, 300)
    assert sorted(os.listdir(tmp_path)) == ["checkpoint"]
    f.close()


def test_index_file_without_header_opens_empty(tmp_path):
    for i, content in enumerate([b"", bytes(100)]):   # killed before ftruncate / before the header
        path = tmp_path / f"2026010100000000{i}"
        path.write_bytes(content)
        f = IndexFile(str(path), 16, 8)
        assert f.count == 1 and f.put_many([(5, 100), (21, 200)], 1_000) == 2
        assert sorted(f.candidates(5, 0, 2_000)) == [100]
        f.close()


class _Store:
    flushed_offset = 100


class _Req:
    answered = False

    def reply(self, code, remark, ext):
        self.answered = code


def test_group_commit_never_acks_past_what_the_store_says_is_flushed():
    gc = GroupCommit(_Store(), True, 5000, notify=lambda t, q: None)
    gc.store.request_flush = lambda end: None
    a, b = _Req(), _Req()
    gc.wait(a, {}, [("T", 0, 100)])
    gc.wait(b, {}, [("T", 0, 200)])
    gc.on_flushed(200)   # reported before a failed put was cut back to 100
    assert a.answered == 0 and b.answered is False and len(gc) == 1


def test_a_failed_commit_log_fsync_stops_writes_until_restart(store, monkeypatch, tmp_path):
    put(store, 3)
    real = os.fdatasync

    def eio(fd):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", eio)
    with pytest.raises(OSError):
        store.flush_step()
    store.disk.failed_for_good("a CommitLog fsync", OSError(errno.EIO, "Input/output error"))
    monkeypatch.setattr(os, "fdatasync", real)
    flushed = store.flushed_offset
    with pytest.raises(OSError):   # a retry must not report the lost pages flushed
        store.flush_step()
    assert store.flushed_offset == flushed
    store.disk._next_check = 0
    _, res = put(store, 1)
    assert res.status is PutStatus.DISK_FULL and "until the broker is restarted" in res.remark
    store.close()                  # keeps `abort`: the next open recovers as after a crash
    assert os.path.exists(tmp_path / "s" / "abort")
    store.commit_log.sync_error = None
    store.open()
