"""Names never reach outside the store: queue directories, DELETE_TOPIC, load, replication, config, re-puts."""

import os

import pytest

from quiver.wire import names, record
from quiver.wire.property_string import format_properties
from quiver.errors import MessageIllegalError, QuiverError
from quiver_broker.config import Config
from quiver_broker.consume_queue import queue_dir
from quiver_broker.schedule import real_queue, restore
from quiver_broker.store import MessageStore

HOST = b"\x7f\0\0\x01\0\0\x27\x10"
BAD_TOPICS = ["../x", "../../../outside", "..", ".", "a/b", "/abs", "a\x00b", "Ｔ", "T\n", ""]


def tree(path) -> set[str]:
    out = set()
    for root, dirs, files in os.walk(path):
        out.update(os.path.relpath(os.path.join(root, n), path) for n in dirs + files)
    return out


@pytest.fixture
def store(tmp_path):
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "keep").write_text("precious")
    s = MessageStore(str(tmp_path / "data" / "s"), segment_bytes=1 << 16, flush_interval_ms=3_600_000)
    s.open()
    yield s
    s.close()


def put(s, topic, qid=0, n=1):
    return s.put_batch(topic, qid, [b"body"] * n, ["TAGS\x01a\x02"] * n, [0] * n, 0, 1, HOST)


def test_queue_dir_checks_the_name_and_confines(tmp_path):
    root = str(tmp_path / "cq")
    assert queue_dir(root, "T", 3) == os.path.join(os.path.realpath(root), "T", "3")
    assert queue_dir(root, "%RETRY%g") == os.path.join(os.path.realpath(root), "%RETRY%g")
    for topic in BAD_TOPICS:
        with pytest.raises(MessageIllegalError):
            queue_dir(root, topic, 0)
    for qid in (-1, "0", 1.0, True):
        with pytest.raises(MessageIllegalError, match="queue id"):
            queue_dir(root, "T", qid)
    os.makedirs(root)
    os.symlink(tmp_path, os.path.join(root, "Link"))  # a valid name whose directory points out
    with pytest.raises(names.UnsafePathError):
        queue_dir(root, "Link", 0)


def test_put_with_a_bad_topic_writes_nothing(store, tmp_path):
    before = tree(tmp_path)
    end = store.max_phys_offset
    for topic in BAD_TOPICS:
        with pytest.raises(QuiverError):
            put(store, topic)
    assert store.max_phys_offset == end          # refused before the CommitLog append
    assert tree(tmp_path) == before
    put(store, "T")
    assert store.topics_on_disk() == {"T": [0]}


def test_delete_topic_never_leaves_consumequeue(store, tmp_path):
    put(store, "T", 0)
    put(store, "T", 1)
    put(store, "Other")
    cq_root = os.path.join(store.data_dir, "consumequeue")
    for topic in BAD_TOPICS + ["../../outside", "../../../" + str(tmp_path.name) + "/outside"]:
        store.delete_topic(topic)                 # logged, nothing deleted
    assert (tmp_path / "outside" / "keep").read_text() == "precious"
    assert sorted(os.listdir(cq_root)) == ["Other", "T"]
    os.symlink(tmp_path / "outside", os.path.join(cq_root, "Evil"))
    store.delete_topic("Evil")                    # a valid name whose directory points out
    assert (tmp_path / "outside" / "keep").exists() and os.path.islink(os.path.join(cq_root, "Evil"))
    store.delete_topic("T")
    assert sorted(os.listdir(cq_root)) == ["Evil", "Other"] and store.topics_on_disk() == {"Other": [0]}
    assert [r.body for r in record.decode_many(store.get_messages("Other", 0, 0).data)] == [b"body"]


def test_load_skips_directories_with_invalid_names(tmp_path):
    d = str(tmp_path / "s")
    s = MessageStore(d, segment_bytes=1 << 16, flush_interval_ms=3_600_000)
    s.open()
    put(s, "T", 0, 3)
    s.close()
    cq_root = os.path.join(d, "consumequeue")
    (tmp_path / "outside").mkdir()
    for bad in ["bad name", "...", "Ｔ", "a\nb", "x" * 128]:
        os.makedirs(os.path.join(cq_root, bad, "0"))
    os.symlink(tmp_path / "outside", os.path.join(cq_root, "Link"))
    os.makedirs(os.path.join(cq_root, "T", "007"))
    os.makedirs(os.path.join(cq_root, "T", "x"))
    os.makedirs(os.path.join(cq_root, "T", "٣"))
    open(os.path.join(cq_root, "AFile"), "w").close()
    s = MessageStore(d, segment_bytes=1 << 16, flush_interval_ms=3_600_000)
    s.open()
    try:
        assert s.topics_on_disk() == {"T": [0]}
        assert s.stats()["skipped_queue_dirs"] == 9
        assert len(record.decode_many(s.get_messages("T", 0, 0).data)) == 3
    finally:
        s.close()
    assert os.listdir(tmp_path / "outside") == []


def test_replicated_records_with_a_bad_topic_are_not_queued(tmp_path):
    s = MessageStore(str(tmp_path / "slave"), segment_bytes=1 << 16, flush_interval_ms=3_600_000)
    s.open()
    try:
        recs, pos = [], 0
        for topic, qoff in [("T", 0), ("../../x", 0), ("T", 1)]:
            data = record.encode(b"b", topic=topic.encode(), queue_offset=qoff, phys_offset=pos, born_ts=1,
                                 born_host=HOST, store_ts=2, store_host=HOST)
            recs.append(data)
            pos += len(data)
        end, touched = s.append_replicated(0, b"".join(recs))
        assert end == pos and touched == {("T", 0)}
        assert s.topics_on_disk() == {"T": [0]}
        assert not (tmp_path / "x").exists()
    finally:
        s.close()


def test_config_checks_broker_and_cluster_names(tmp_path):
    c = Config(data_dir=str(tmp_path), broker_name="broker-a")
    assert c.store_dir == os.path.join(os.path.realpath(tmp_path), "broker-a")
    assert Config(data_dir=str(tmp_path), broker_name="broker-a", broker_id=1).store_dir.endswith("broker-a-1")
    for name in ["..", ".", "../x", "a/b", "a\\b", "a\x00", "brøker", "b" * 128]:
        with pytest.raises(ValueError, match="broker name"):
            Config(data_dir=str(tmp_path), broker_name=name)
    with pytest.raises(ValueError, match="cluster name"):
        Config(data_dir=str(tmp_path), broker_name="b", cluster="../c")


class FakeTopics:
    """What SCHEDULE_REPUT's placement needs of the topic table: configs (none made here)."""

    def __init__(self, rows):
        self.rows = rows

    def config(self, topic, create=False, system=False, queues=None):
        if topic not in self.rows:
            raise MessageIllegalError(f"no topic {topic}")
        return self.rows[topic]


def test_reput_placement_checks_real_topic_and_queue():
    topics = FakeTopics({"Orders": {"read": 8, "write": 4}, "%RETRY%g": {"read": 1, "write": 1}})
    counters = {"schedule_reput_dropped": 0}

    def place(**kv):
        return real_queue(topics, counters, format_properties({"UNIQ_KEY": "ID", **kv}), 1234)

    topic, qid, out, problem = place(REAL_TOPIC="Orders", REAL_QID="2")
    assert (topic, qid, problem) == ("Orders", 2, None) and "SCHEDULE_DUE_MS\x011234\x02" in out
    assert place(REAL_TOPIC="Orders", REAL_QID="6")[3] is None          # a read queue of a scaled-in topic
    assert "0..7" in place(REAL_TOPIC="Orders", REAL_QID="8")[3]
    for bad in ["../../../x", "a/b", "..", "Ｏrders", "a\x00"]:
        assert "property REAL_TOPIC" in place(REAL_TOPIC=bad, REAL_QID="0")[3]
    for bad in ["x", "-1", "1024", "inf", "٣"]:
        assert "property REAL_QID" in place(REAL_TOPIC="Orders", REAL_QID=bad)[3]
    assert "CHECK_IMMUNITY" in place(REAL_TOPIC="Orders", CHECK_IMMUNITY_TIME_IN_SECONDS="inf")[3]
    assert place(REAL_TOPIC="Gone")[0] is None and place()[0] is None     # dropped, not refused
    assert place(REAL_TOPIC="RMQ_SYS_TRANS_HALF_TOPIC")[0] is None
    assert restore("REAL_TOPIC\x01T\x02REAL_QID\x01x\x02", "nan")[:2] == ("T", 0)


def test_store_paths_are_logged_not_echoed(store, caplog):
    store.delete_topic("a/\u202e/b")
    assert any("no directory deleted" in r.getMessage() and r.getMessage().isascii() for r in caplog.records)

