"""Tiered storage with a file:// object store: sealed segments are uploaded and verified, only
uploaded ones leave the local disk, every record is served back byte for byte (pull, msgId, key,
time), a corrupted object is reported and never served, an interrupted upload is redone."""

import os
import queue
import threading
import time
import types

import pytest

from quiver.wire import record
from quiver.wire.codes import ResponseCode
from quiver.wire.property_string import format_properties
from quiver_broker.store import GetStatus, MessageStore
from quiver_broker.tiered import Tiered, tiered_gauges
from quiver_broker.tiered_reads import RemoteDamaged, RemoteUnavailable
from quiver_broker.tiered_store import FileStore, StoreDown, check_key, parse_url

HOST = b"\x7f\0\0\x01\0\0\x27\x10"
SEG = 8192


def open_store(d, objects, **kw):
    s = MessageStore(str(d / "broker"), segment_bytes=SEG, flush_interval_ms=3_600_000)
    kw.setdefault("cache_bytes", 4096)
    t = Tiered(objects, str(d / "broker"), chunk=1024, background=False, **kw)
    s.attach_tiered(t)
    s.open()
    return s, t


def fill(s, n=300, topic="T"):
    bodies = []
    for i in range(n):
        body = f"msg-{i}-".encode() * (1 + i % 7)
        props = format_properties({"KEYS": f"k{i}"})
        assert s.put_batch(topic, 0, [body], [props], [0], 0, 1, HOST).status.name == "PUT_OK"
        bodies.append(body)
    s.flush_step(force=True)
    return bodies


def upload_all(t):
    while t.step():
        pass


def pull_all(s, topic="T"):
    out, off = [], 0
    while True:
        g = s.get_messages(topic, 0, off, max_msgs=13)
        if g.status is not GetStatus.FOUND:
            return out, g
        out += record.decode_many(g.data)
        off = g.next_offset


def raw(s, topic="T"):
    out, off = b"", 0
    while (g := s.get_messages(topic, 0, off, max_msgs=50)).status is GetStatus.FOUND:
        out += g.data
        off = g.next_offset
    return out


def test_uploaded_segments_leave_disk_and_read_back_byte_for_byte(tmp_path):
    objects = FileStore(str(tmp_path / "bucket"))
    s, t = open_store(tmp_path, objects, local_retention_bytes=0)
    bodies = fill(s)
    before, _ = pull_all(s)
    raw_before = raw(s)
    assert len(before) == len(bodies)
    nseg = len(s.commit_log.segments)
    assert nseg > 4
    # nothing uploaded: retention deletes nothing even when forced
    assert s.clean_expired(force=True) == 0
    upload_all(t)
    assert sorted(t.manifests) == [seg.start for seg in s.commit_log.segments[:-1]]
    assert all(os.path.exists(tmp_path / "bucket" / m.key) for m in t.manifests.values())
    assert s.clean_expired() == nseg - 1 and len(s.commit_log.segments) == 1
    assert s.min_offset("T", 0) == 0 and s.reads.min_offset == 0 < s.commit_log.min_offset
    after, last = pull_all(s)
    assert [r.body for r in after] == bodies
    assert raw(s) == raw_before   # the same stored bytes, record for record
    assert [r.phys_offset for r in after] == [r.phys_offset for r in before]
    assert last.status is GetStatus.OFFSET_OVERFLOW_ONE
    # by msgId (CommitLog offset), by key, by time: all served from the object store
    first = s.lookup(before[0].phys_offset)
    assert first is not None and first.body == bodies[0]
    assert [r.body for r in s.query_by_key("T", "k5")] == [bodies[5]]
    assert s.search_offset_by_time("T", 0, before[10].store_ts) <= 10
    st = s.stats()["tiered"]
    assert st["cache_bytes"] <= 4096 + 1024 and st["cache_misses"] > 0 and st["damaged_chunks"] == 0
    gauges = {name: value for name, _, value in tiered_gauges(st)}
    assert gauges["quiver_tiered_cache_bytes"] == st["cache_bytes"] > 0 and gauges["quiver_tiered_remote_segments"] >= 4
    assert tiered_gauges(None) == []
    s.close()
    # a restart keeps the remote range readable (recovery does not move the queue's minimum)
    s2, _ = open_store(tmp_path, objects, local_retention_bytes=0)
    assert s2.min_offset("T", 0) == 0
    assert [r.body for r in pull_all(s2)[0]] == bodies
    s2.close()


@pytest.fixture
def remote_only(tmp_path):
    """A store whose sealed segments are all uploaded and gone from the local disk."""
    s, t = open_store(tmp_path, FileStore(str(tmp_path / "bucket")), local_retention_bytes=0)
    fill(s)
    upload_all(t)
    s.clean_expired()
    yield s, t
    s.close()


def test_corrupt_object_is_reported_and_never_served(tmp_path, remote_only):
    s, t = remote_only
    m = t.manifests[0]
    path = tmp_path / "bucket" / m.key
    data = bytearray(path.read_bytes())
    data[100] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(RemoteDamaged) as err:
        s.get_messages("T", 0, 0, max_msgs=4)
    assert err.value.code == ResponseCode.SYSTEM_ERROR and m.key in err.value.remark
    assert s.stats()["tiered"]["damaged_chunks"] >= 1
    assert (0, 0) not in s.reads.cache.chunks


def test_lookup_of_corrupt_object_raises(tmp_path, remote_only):
    s, t = remote_only
    path = tmp_path / "bucket" / t.manifests[0].key
    path.write_bytes(b"\0" * path.stat().st_size)
    with pytest.raises(RemoteDamaged):
        s.lookup(0)


class FlakyStore(FileStore):
    """Fails its first `fails` puts (a store that is down), or damages what it stores."""

    def __init__(self, root, fails=0, damage=False):
        super().__init__(root)
        self.fails, self.damage = fails, damage

    def put_file(self, key, path, size):
        if self.fails:
            self.fails -= 1
            raise StoreDown("connection refused")
        super().put_file(key, path, size)
        if self.damage:
            p = self._path(key)
            with open(p, "r+b") as f:
                f.write(b"X")


def test_store_down_and_bad_copy_never_count_as_uploaded(tmp_path):
    objects = FlakyStore(str(tmp_path / "bucket"), fails=1, damage=True)
    s, t = open_store(tmp_path, objects, local_retention_bytes=0)
    fill(s)
    with pytest.raises(StoreDown):
        t.step()
    with pytest.raises(StoreDown, match="does not match"):
        t.step()
    assert t.manifests == {} and t.counts["verify_failures"] == 1
    assert s.clean_expired(force=True) == 0
    objects.damage = False
    upload_all(t)
    assert s.clean_expired() > 0
    assert len(pull_all(s)[0]) == 300
    s.close()


def test_upload_interrupted_before_its_record_is_redone(tmp_path):
    objects = FileStore(str(tmp_path / "bucket"))
    s, t = open_store(tmp_path, objects)
    fill(s)
    upload_all(t)
    n = len(t.manifests)
    s.close()
    # a kill after the object was written but before the local manifest: the manifest is missing
    last = max(t.manifests)
    os.unlink(tmp_path / "broker" / "tiered" / f"{last:020d}.json")
    s2, t2 = open_store(tmp_path, objects)
    assert len(t2.manifests) == n - 1
    upload_all(t2)
    assert len(t2.manifests) == n and t2.counts["uploaded_segments"] == 1
    s2.close()


def test_local_retention_by_age_and_remote_retention(tmp_path):
    objects = FileStore(str(tmp_path / "bucket"))
    s, t = open_store(tmp_path, objects, local_retention_hours=1, remote_retention_days=1)
    fill(s)
    upload_all(t)
    assert s.clean_expired() == 0   # young segments stay local
    now = int(time.time() * 1000)
    assert s.clean_expired(now_ms=now + 3_600_000 + 60_000) > 0
    assert s.min_offset("T", 0) == 0
    for m in t.manifests.values():
        m.sealed_ms -= 2 * 86_400_000
    while t.remote_retention_step():
        pass
    assert t.manifests == {} and not list((tmp_path / "bucket" / "commitlog").iterdir())
    s.clean_expired()
    assert s.min_offset("T", 0) > 0
    g = s.get_messages("T", 0, 0)
    assert g.status is GetStatus.OFFSET_TOO_SMALL
    s.close()


@pytest.mark.parametrize("url", ["s3://A_B/x", "s3://bucket/../x", "s3://bucket/a//b", "ftp://x/y",
                                 "file://host/path", "file:relative", "s3://bu/x"])
def test_bad_store_urls_are_refused(url):
    with pytest.raises(ValueError):
        parse_url(url)


def test_good_store_urls():
    assert parse_url("s3://my-bucket/quiver/b1") == ("s3", "my-bucket", "quiver/b1")
    assert parse_url("file:///mnt/nfs/q") == ("file", "/mnt/nfs/q", "")


@pytest.mark.parametrize("key", ["../commitlog/00000000000000000000", "commitlog/1", "commitlog/x" * 3,
                                 "commitlog/00000000000000000000/../../etc"])
def test_bad_keys_are_refused(key):
    with pytest.raises(ValueError):
        check_key(key)


def test_local_min_offset_splits_the_queue_for_topic_status(remote_only):
    from quiver.tools.cli_topic import held_ranges
    from quiver_broker.tiered_reads import local_min_offset
    s, _ = remote_only
    hi = s.max_offset("T", 0)
    mid = local_min_offset(s, "T", 0)
    assert 0 < mid < hi and s.min_offset("T", 0) == 0
    first_local = s.get_messages("T", 0, mid, max_msgs=1)
    assert record.decode_many(first_local.data)[0].phys_offset >= s.commit_log.min_offset
    before = s.get_messages("T", 0, mid - 1, max_msgs=1)
    assert record.decode_many(before.data)[0].phys_offset < s.commit_log.min_offset
    row = {"min_offset": 0, "max_offset": hi, "local_min_offset": mid}
    assert held_ranges(row)["remote"] == f"[0, {mid})" and held_ranges(row)["local"] == f"[{mid}, {hi})"
    plain = held_ranges({"min_offset": 3, "max_offset": 9})
    assert (plain["remote"], plain["local"]) == ("-", "[3, 9)")


def test_local_retention_keeps_what_compaction_still_reads(tmp_path):
    s, t = open_store(tmp_path, FileStore(str(tmp_path / "bucket")), local_retention_bytes=0)
    fill(s)
    upload_all(t)
    with s.exclusive():
        assert t.clean_local(s, int(time.time() * 1000), False, keep_from=2 * SEG) == 2
    assert s.commit_log.min_offset == 2 * SEG
    s.close()


def test_bench_tiered_smoke(tmp_path):
    from bench.tiered import run
    res = run(3000, 100, s3=False, segment_bytes=64 << 10, cache_bytes=128 << 10)
    assert res["messages"] == 3000 and res["remote_share"] > 0.5 and res["remote_msg_s"] > 0


class CountingStore(FileStore):
    def __init__(self, root):
        super().__init__(root)
        self.gets = 0

    def get_range(self, key, start, end):
        self.gets += 1
        return super().get_range(key, start, end)


def test_a_miss_reads_ahead_and_a_bad_read_ahead_chunk_is_not_kept(tmp_path):
    objects = CountingStore(str(tmp_path / "bucket"))
    s, t = open_store(tmp_path, objects, local_retention_bytes=0, cache_bytes=64 << 10)
    bodies = fill(s)
    upload_all(t)
    s.clean_expired()
    remote_chunks = sum(len(m.crcs) for m in t.manifests.values())
    assert [r.body for r in pull_all(s)[0]] == bodies
    assert objects.gets <= remote_chunks // 4 + len(t.manifests)   # 4 chunks a GET, one short per segment
    # chunk 1 of the first segment damaged: a read of chunk 0 reads it ahead but does not keep it
    s.reads.cache.chunks.clear()
    s.reads.cache.bytes = 0
    path = tmp_path / "bucket" / t.manifests[0].key
    data = bytearray(path.read_bytes())
    data[1024 + 5] ^= 1
    path.write_bytes(bytes(data))
    assert s.reads.read(0, 100) == bytes(data[:100])
    assert (0, 0) in s.reads.cache.chunks and (0, 1) not in s.reads.cache.chunks
    with pytest.raises(RemoteDamaged):
        s.reads.read(1024, 100)
    s.close()


class DownStore(FileStore):
    down = False
    gets = 0

    def get_range(self, key, start, end):
        self.gets += 1
        if self.down:
            raise StoreDown("connection refused")
        return super().get_range(key, start, end)


def test_a_store_down_answers_busy_without_being_asked_again_for_a_while(tmp_path):
    objects = DownStore(str(tmp_path / "bucket"))
    s, t = open_store(tmp_path, objects, local_retention_bytes=0)
    fill(s)
    upload_all(t)
    s.clean_expired()
    objects.down = True
    now = [1000.0]
    s.reads.cache.clock = lambda: now[0]
    for _ in range(3):
        with pytest.raises(RemoteUnavailable) as err:
            s.get_messages("T", 0, 0)
        assert err.value.code == ResponseCode.SYSTEM_BUSY
    assert objects.gets == 1
    objects.down = False
    now[0] += 10
    assert s.get_messages("T", 0, 0).status is GetStatus.FOUND
    s.close()


def test_settings_refuse_a_bad_store_url_and_a_tiered_slave():
    from quiver_broker.config import Config
    assert Config(tiered_store="s3://bucket-a/p").tiered_store == "s3://bucket-a/p"
    for kw in ({"tiered_store": "ftp://x/y"}, {"tiered_store": "s3://bucket-a/../p"},
               {"tiered_store": "file:///q", "broker_id": 1, "role": "SLAVE"},
               {"tiered_store": "file:///q", "tiered_cache_bytes": 10}):
        with pytest.raises(ValueError):
            Config(**kw)


def test_credentials_file(tmp_path):
    from quiver_broker.tiered_store import _credentials
    p = tmp_path / "creds"
    p.write_text("[default]\naws_access_key_id = AK\naws_secret_access_key = SK\nregion = eu-west-1\n")
    assert _credentials(str(p)) == {"aws_access_key_id": "AK", "aws_secret_access_key": "SK",
                                    "region_name": "eu-west-1"}
    p.write_text("[default]\nnothing = here\n")
    with pytest.raises(ValueError, match="aws_access_key_id"):
        _credentials(str(p))
    with pytest.raises(ValueError, match="cannot be read"):
        _credentials(str(tmp_path / "absent"))


def test_a_pull_miss_is_fetched_in_the_background_and_a_failure_raised_on_retry(remote_only):
    from quiver_broker.tiered_reads import NeedsFetch, in_background
    s, t = remote_only
    with in_background(s), pytest.raises(NeedsFetch) as miss:
        s.get_messages("T", 0, 0)
    assert s.reads.cache.nonblocking is False
    miss.value.future.result(10)
    assert s.get_messages("T", 0, 0).status is GetStatus.FOUND   # the retry waits for any other chunk
    s.reads.cache.chunks.clear()
    s.reads.cache.bytes = 0
    path = tmp = t.objects.root + "/" + t.manifests[0].key
    data = bytearray(open(path, "rb").read())
    data[10] ^= 1
    open(tmp, "wb").write(bytes(data))
    with in_background(s), pytest.raises(NeedsFetch) as miss:
        s.get_messages("T", 0, 0)
    miss.value.future.result(10)
    with pytest.raises(RemoteDamaged):
        s.get_messages("T", 0, 0)
    assert s.stats()["tiered"]["background_fetches"] == 2


class GatedStore(FileStore):
    """Ranged reads wait for `gate` (an object store that answers slowly)."""

    def __init__(self, root):
        super().__init__(root)
        self.gate = threading.Event()

    def get_range(self, key, start, end):
        self.gate.wait(20)
        return super().get_range(key, start, end)


class Loop:
    """The service thread's call_soon_threadsafe: callbacks queued, run by the test."""

    def __init__(self):
        self.calls = queue.Queue()

    def call_soon_threadsafe(self, fn, *args):
        self.calls.put((fn, args))

    def run_one(self, timeout=20):
        fn, args = self.calls.get(timeout=timeout)
        fn(*args)


def lookup_request(**args):
    req = types.SimpleNamespace(args=types.SimpleNamespace(**args), answered=False, answers=[],
                                authorize=lambda *a: None)

    def reply(code=ResponseCode.SUCCESS, remark="", ext=None, bodies=()):
        req.answered = True
        req.answers.append((code, remark, list(bodies), ext))
    req.reply = reply
    return req


def test_a_remote_lookup_does_not_hold_the_service_thread_for_the_store(tmp_path):
    from quiver_broker.handlers import MessageRequests
    objects = GatedStore(str(tmp_path / "bucket"))
    s, t = open_store(tmp_path, objects, local_retention_bytes=0)
    bodies = fill(s)
    objects.gate.set()
    upload_all(t)
    s.clean_expired()
    objects.gate.clear()   # from now on the store answers only when the test lets it
    loop = Loop()
    h = MessageRequests(s, loop)
    key = lookup_request(topic="T", key="k3", max_msgs=8, begin_ts=0, end_ts=2**62)
    view = lookup_request(offset=0)
    began = time.monotonic()
    h.query(key)
    h.view(view)
    assert time.monotonic() - began < 5 and not key.answered and not view.answered   # not waiting for it
    objects.gate.set()
    while not (key.answered and view.answered):
        loop.run_one()
    assert [r.body for r in record.decode_many(key.answers[0][2][0])] == [bodies[3]]
    assert record.decode_many(view.answers[0][2][0])[0].body == bodies[0]
    assert s.stats()["tiered"]["background_fetches"] >= 1
    # a search by time reads store times of records in remote chunks: answered the same way
    from quiver_broker.handlers import OffsetRequests
    objects.gate.clear()
    by_time = lookup_request(topic="T", queue_id=0, timestamp=0)
    OffsetRequests(types.SimpleNamespace(check_queue=lambda *a: None), None, s, loop).by_time(by_time)
    assert not by_time.answered
    objects.gate.set()
    while not by_time.answered:
        loop.run_one()
    assert by_time.answers[0][0] == ResponseCode.SUCCESS and by_time.answers[0][3].offset == 0
    # a damaged chunk fetched on the read thread: the lookup is answered with the error
    s.reads.cache.chunks.clear()
    s.reads.cache.bytes = 0
    path = tmp_path / "bucket" / t.manifests[0].key
    path.write_bytes(b"\0" * path.stat().st_size)
    bad = lookup_request(offset=0)
    h.view(bad)
    while not bad.answered:
        loop.run_one()
    assert bad.answers[0][0] == ResponseCode.SYSTEM_ERROR and "checksum" in bad.answers[0][1]
    s.close()
