"""A record the client cannot decode never stops a queue: both consumers skip it, report it
(log, stats()["undecodable_records"], on_bad_record) and keep pulling; whatever goes wrong
with a pull's answer, the queue is pulled again. Real brokers on quiver.testing's fake
network, whose served bytes are garbled after the broker's own checks passed them."""

import logging
import threading

import pytest

from quiver import ConsumeResult, Message, Producer, PullConsumer, PushConsumer
from quiver.wire import record
from quiver.wire.property_string import format_properties
from quiver.client.base import MessageQueue
from quiver.client.message import host_bytes
from quiver.client.queue_puller import QueuePuller, salvage
from quiver.testing import stub_cluster, wait_until

HOST = host_bytes("127.0.0.1", 10911)


# ---- what is garbled, and how -----------------------------------------------------------------


def bad_properties(buf: bytearray, pos: int, size: int) -> None:
    """The last properties byte is not UTF-8: the head still checks, the record does not decode."""
    buf[pos + size - 1] = 0xFF


def bad_magic(buf: bytearray, pos: int, size: int) -> None:
    """The head does not check: where the records behind it start is unknown."""
    buf[pos + 4:pos + 8] = b"\0\0\0\0"


def bad_size(buf: bytearray, pos: int, size: int) -> None:
    """The size field says 8 bytes more than the record has (the rest of the body is misaligned)."""
    buf[pos:pos + 4] = (size + 8).to_bytes(4, "big")


def garble_served(app, topic: str, offsets: set[int], how) -> None:
    """Every time the broker serves a record of `topic` at one of `offsets`, `how` garbles it:
    a corruption the broker's own checks did not see (or an older broker that has none)."""
    real = app.store.get_messages

    def get_messages(t, q, offset, *args, **kw):
        res = real(t, q, offset, *args, **kw)
        if t != topic or not res.data:
            return res
        buf, pos, spans = bytearray(res.data), 0, []
        while pos < len(buf):
            size, _ = record.check_head(buf, pos)
            spans.append((pos, size))
            pos += size
        for pos, size in spans:   # garbled after the walk: a bad size must not change which ones
            if record.queue_offset_at(buf, pos) in offsets:
                how(buf, pos, size)
        res.data = bytes(buf)
        return res
    app.store.get_messages = get_messages


def _records(n: int, topic: str = "Q1", first: int = 0) -> list[bytes]:
    return [record.encode(f"m{i}".encode(), topic=topic.encode(),
                          props=format_properties({"TAGS": "a", "UNIQ_KEY": f"{i:032X}"}).encode(), queue_offset=i,
                          phys_offset=1000 + 100 * i, born_host=HOST, store_host=HOST)
            for i in range(first, first + n)]


# ---- salvage: record by record ------------------------------------------------------------------


def test_salvage_skips_a_record_whose_fields_do_not_decode_and_reads_on():
    recs = _records(5)
    buf = bytearray(b"".join(recs))
    pos = sum(map(len, recs[:2]))
    bad_properties(buf, pos, len(recs[2]))
    msgs, bad, again = salvage(bytes(buf), "broker-a", 0, 5)
    assert [m.body for m in msgs] == [b"m0", b"m1", b"m3", b"m4"]
    assert [off for off, _ in bad] == [2] and "UTF-8" in bad[0][1]
    assert again is None


def test_salvage_stops_at_a_head_that_does_not_check_and_says_where_to_pull_again():
    recs = _records(5, first=10)
    buf = bytearray(b"".join(recs))
    bad_magic(buf, sum(map(len, recs[:3])), len(recs[3]))
    msgs, bad, again = salvage(bytes(buf), "broker-a", 10, 15)
    assert [m.queue_offset for m in msgs] == [10, 11, 12]
    assert bad == [] and again == 13           # the rest one at a time from 13
    one = bytearray(recs[3])
    bad_magic(one, 0, len(one))
    msgs, bad, again = salvage(bytes(one), "broker-a", 13, 14, single=True)
    assert msgs == [] and [off for off, _ in bad] == [13] and again is None


def test_salvage_checks_the_body_crc_and_names_a_garbled_queue_offset_by_its_neighbours():
    recs = _records(3)
    buf = bytearray(b"".join(recs))
    p = len(recs[0])
    buf[p + record.FIXED_SIZE] ^= 0x01                               # body of record 1: CRC mismatch
    buf[p + record.QUEUE_OFFSET_AT:p + record.QUEUE_OFFSET_AT + 8] = (2 ** 40).to_bytes(8, "big")
    msgs, bad, again = salvage(bytes(buf), "broker-a", 0, 3)
    assert [m.queue_offset for m in msgs] == [0, 2]
    assert bad == [(1, "body CRC mismatch")] and again is None


# ---- both consumers, end to end -----------------------------------------------------------------


@pytest.fixture
def one():
    with stub_cluster(brokers=1) as c:
        c.admin().create_topic("Q1", queues=1)
        yield c


def _send(cluster, bodies):
    with cluster.client(Producer, "pg") as p:
        return [p.send(Message("Q1", b)) for b in bodies]


def _pull_all(c, want, timeout=10.0):
    got = []
    wait_until(lambda: got.extend(c.poll(0.05)) or len(got) >= want, timeout)
    return [m.body.decode() for m in got]


def _push(cluster, group, **kw):
    seen, lock = [], threading.Lock()

    def listener(msgs):
        with lock:
            seen.extend(m.body.decode() for m in msgs)
        return ConsumeResult.SUCCESS
    c = cluster.client(PushConsumer, group, consume_from="first", threads=2, **kw)
    c.subscribe("Q1")
    c.register(listener)
    return c, seen


GARBLES = [bad_properties, bad_magic, bad_size]


@pytest.mark.parametrize("how", GARBLES, ids=lambda f: f.__name__)
def test_pull_consumer_skips_an_undecodable_record_reports_it_and_keeps_pulling(one, how, caplog):
    _send(one, [f"m{i}".encode() for i in range(12)])
    garble_served(one.broker(), "Q1", {5}, how)
    reported = []
    with caplog.at_level(logging.ERROR, logger="quiver.client.queue_puller"), \
            one.client(PullConsumer, "cg", consume_from="first", auto_commit=False,
                       on_bad_record=lambda *a: reported.append(a)) as c:
        c.subscribe("Q1")
        assert _pull_all(c, 11) == [f"m{i}" for i in range(12) if i != 5]
        assert c.stats()["undecodable_records"] == 1
        assert [(t, q, off) for t, q, off, _ in reported] == [("Q1", 0, 5)]
        _send(one, [b"after"])                 # the queue goes on
        assert _pull_all(c, 1) == ["after"]
        c.commit()
    assert one.broker().metadata.get_offset("cg", "Q1", 0) == 13
    assert any("Q1 queue 0 offset 5" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("how", GARBLES, ids=lambda f: f.__name__)
def test_push_consumer_skips_an_undecodable_record_reports_it_and_keeps_pulling(one, how):
    _send(one, [f"m{i}".encode() for i in range(12)])
    garble_served(one.broker(), "Q1", {0, 7}, how)
    reported = []
    c, seen = _push(one, "push-cg", on_bad_record=lambda *a: reported.append(a))
    with c:
        assert wait_until(lambda: len(seen) >= 10, 10)
        _send(one, [b"after"])
        assert wait_until(lambda: "after" in seen, 10)
        assert c.stats()["undecodable_records"] == 2
    assert sorted(seen) == sorted([f"m{i}" for i in range(12) if i not in (0, 7)] + ["after"])
    assert sorted(off for _, _, off, _ in reported) == [0, 7]
    assert one.broker().metadata.get_offset("push-cg", "Q1", 0) == 13


def test_a_failing_callback_is_logged_and_the_record_still_skipped(one, caplog):
    _send(one, [b"a", b"b"])
    garble_served(one.broker(), "Q1", {0}, bad_properties)

    def boom(*_):
        raise RuntimeError("callback bug")
    with caplog.at_level(logging.ERROR), one.client(PullConsumer, "cg", consume_from="first", on_bad_record=boom) as c:
        c.subscribe("Q1")
        assert _pull_all(c, 1) == ["b"]
    assert any("on_bad_record callback failed" in r.getMessage() for r in caplog.records)


def _fail_once(monkeypatch, name: str):
    """QueuePuller.<name> raises once (the next call after this), then works again."""
    real = getattr(QueuePuller, name)
    left = [1]

    def once(self, *args, **kw):
        if left[0]:
            left[0] -= 1
            raise RuntimeError(f"injected failure in {name}")
        return real(self, *args, **kw)
    monkeypatch.setattr(QueuePuller, name, once)
    return left


@pytest.mark.parametrize("where", ["decode", "pull"])
def test_pull_consumer_pulls_again_after_any_exception_on_the_pull_path(one, monkeypatch, where):
    _send(one, [b"a", b"b", b"c"])
    left = _fail_once(monkeypatch, where)
    with one.client(PullConsumer, "cg", consume_from="first", pull_delay_on_error_ms=20) as c:
        c.subscribe("Q1")
        assert _pull_all(c, 3) == ["a", "b", "c"]
        assert left == [0]
        _send(one, [b"d"])
        assert _pull_all(c, 1) == ["d"]


@pytest.mark.parametrize("where", ["decode", "pull"])
def test_push_consumer_pulls_again_after_any_exception_on_the_pull_path(one, monkeypatch, where):
    _send(one, [b"a", b"b", b"c"])
    left = _fail_once(monkeypatch, where)
    c, seen = _push(one, "push-cg", pull_delay_on_error_ms=20)
    with c:
        assert wait_until(lambda: len(seen) >= 3)
        assert left == [0]
        _send(one, [b"d"])
        assert wait_until(lambda: "d" in seen)
    assert sorted(seen) == ["a", "b", "c", "d"]


def test_a_pull_answer_the_consumer_cannot_read_is_a_failed_pull(one, monkeypatch):
    _send(one, [b"a"])
    import quiver.client.queue_puller as qp
    real, left = qp.read, [1]

    def garbled(env):
        if left[0] and not isinstance(env, BaseException):
            left[0] -= 1
            raise KeyError("nobody foresaw this")
        return real(env)
    monkeypatch.setattr(qp, "read", garbled)
    with one.client(PullConsumer, "cg", consume_from="first", pull_delay_on_error_ms=20) as c:
        c.subscribe("Q1")
        assert _pull_all(c, 1) == ["a"]
        assert left == [0]
        assert c._queues[MessageQueue("Q1", "broker-a", 0)].consumed == 1


def _flip_stored_body(app, phys: int) -> None:
    """XOR a body byte of the record stored at CommitLog offset `phys`, in its segment file."""
    import os
    seg = app.store.commit_log.segment_for(phys)
    pos = phys - seg.start + record.FIXED_SIZE
    os.pwrite(seg.fd, bytes([os.pread(seg.fd, 1, pos)[0] ^ 0x20]), pos)


@pytest.mark.parametrize("kind", ["pull", "push"])
def test_a_record_corrupted_on_disk_is_left_out_and_both_consumers_get_every_other(one, kind):
    """The broker's own check (its body CRC) catches this one: the consumer never sees it and
    goes on; the broker counts it."""
    sent = _send(one, [f"m{i}".encode() for i in range(10)])
    app = one.broker()
    _flip_stored_body(app, sent[3].commit_log_offset)
    want = [f"m{i}" for i in range(10) if i != 3]
    if kind == "pull":
        with one.client(PullConsumer, "cg", consume_from="first") as c:
            c.subscribe("Q1")
            assert _pull_all(c, 9) == want
    else:
        c, seen = _push(one, "push-cg")
        with c:
            assert wait_until(lambda: len(seen) >= 9)
        assert sorted(seen) == sorted(want)
    assert app.store.stats()["corrupt_records_skipped"] >= 1
    assert c.stats()["undecodable_records"] == 0
