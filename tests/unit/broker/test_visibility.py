"""Reads bounded by the confirm offset (visibility.py): what every in-sync replica holds, with
fake replicas (the acks handed in directly) and real stores."""

import threading
import time
import types

import pytest

from quiver.errors import QueryNotFoundError
from quiver.wire import protocol, record
from quiver.wire import requests as rq
from quiver.wire.property_string import format_properties
from quiver_broker import replica_append
from quiver_broker.ha_master import ReplicationMaster, clamp_offsets, merge_offsets
from quiver_broker.ha_slave import ReplicationSlave
from quiver_broker.replicas import Replicas
from quiver_broker.store import GetStatus, MessageStore
from quiver_broker.handlers import MessageRequests
from quiver_broker.visibility import FOLLOW_LOCAL, record_visible

HOST = b"\x7f\0\0\x01\0\0\x27\x10"


def put(store, n, topic="T", keys=None):
    props = [format_properties({"KEYS": keys} if keys else {"TAGS": "a"})] * n
    bodies = [f"{topic}-{i}-{time.monotonic_ns()}".encode() for i in range(n)]
    return bodies, store.put_batch(topic, 0, bodies, props, [7] * n, 0, 1, HOST)


def _store(path, **kw):
    s = MessageStore(str(path), flush_interval_ms=3_600_000, **kw)
    s.open()
    return s


def _terms(store, required=()):
    """The master's or replica's confirm-offset part of replicas.Replicas, without controllers."""
    t = Replicas.__new__(Replicas)
    t.store, t.required = store, frozenset(required)
    return t


def _visible(s, topic="T", qid=0):
    return s.max_offset(topic, qid)


def test_reads_stop_at_what_the_replicas_acked_and_wake_as_it_moves(tmp_path):
    s = _store(tmp_path / "m")
    woken = []
    s.on_confirmed = lambda t, q: woken.append((t, q))
    t = _terms(s, {"replica"})
    _, first = put(s, 3, keys="k")
    t.update_confirm(None)      # alone in the set: everything written counts
    assert _visible(s) == 3
    s.set_replica_confirm(s.confirm_offset)   # a replica joins: held at what the master had
    t.update_confirm(0)        # it has acked nothing yet: nothing goes back
    assert _visible(s) == 3
    _, second = put(s, 4, keys="k")
    _, third = put(s, 2, keys="k")
    assert _visible(s) == 3 and s.confirm_offset == first.end_offset
    g = s.get_messages("T", 0, 3)
    assert g.status is GetStatus.OFFSET_OVERFLOW_ONE and g.max_offset == 3
    g = s.get_messages("T", 0, 5)   # stored, not confirmed: it waits there, it is not moved back
    assert g.status is GetStatus.OFFSET_OVERFLOW_ONE and g.next_offset == 5
    g = s.get_messages("T", 0, 20)  # past what is stored (a cut log): moved to the confirmed end
    assert g.status is GetStatus.OFFSET_OVERFLOW_BADLY and g.next_offset == 3
    assert len(s.query_by_key("T", "k")) == 9  # the index has them; the handler filters
    assert sum(record_visible(s, r) for r in s.query_by_key("T", "k")) == 3
    woken.clear()
    t.update_confirm(second.end_offset - 1)   # mid-record: that batch is not whole on the replica
    assert _visible(s) == 3 and not woken
    t.update_confirm(second.end_offset)
    assert _visible(s) == 7 and woken == [("T", 0)]
    g = s.get_messages("T", 0, 0, max_msgs=64)
    assert g.count == 7 and g.next_offset == 7
    t.update_confirm(third.end_offset + 999)   # an ack past this log's end counts up to its end
    assert _visible(s) == 9 and s.replica_confirm == s.max_phys_offset
    t.update_confirm(1)        # never backwards
    assert _visible(s) == 9
    s.close()


def test_sync_flush_and_the_replicas_both_bound_reads(tmp_path):
    s = _store(tmp_path / "m", flush_sync=True)
    s.set_replica_confirm(0)
    _, res = put(s, 5)
    s.set_replica_confirm(res.end_offset)    # the replica has it; the disk not yet
    assert s.flushed_offset < res.end_offset and _visible(s) == 0
    s.flush_step()
    assert _visible(s) == 5
    s.close()


def test_entries_from_before_the_bound_wait_for_it(tmp_path):
    """A restart or a replica's recovered log: entries written before any bound are seeded."""
    s = _store(tmp_path / "m")
    _, a = put(s, 3)
    put(s, 3)
    put(s, 2, topic="U")
    s.set_replica_confirm(a.end_offset)
    assert _visible(s) == 3 and _visible(s, "U") == 0
    # a consumer further on (its offset from before a restart) waits; it is not sent back to the start
    g = s.get_messages("U", 0, 1)
    assert g.status is GetStatus.OFFSET_OVERFLOW_ONE and g.next_offset == 1
    s.set_replica_confirm(FOLLOW_LOCAL)
    assert _visible(s) == 6 and _visible(s, "U") == 2
    s.close()


def test_a_queue_nobody_reads_keeps_only_its_unconfirmed_batches(tmp_path):
    s = _store(tmp_path / "m")
    s.set_replica_confirm(0)
    for _ in range(50):
        _, res = put(s, 1)
        s.set_replica_confirm(res.end_offset)
    assert len(s.cqs[("T", 0)].pending) <= 1 and not s.unconfirmed
    s.close()


def _replicate(master, replica):
    data = master.commit_log.read(replica.max_phys_offset, master.max_phys_offset - replica.max_phys_offset)
    replica.append_replicated(replica.max_phys_offset, data)


def test_a_replica_serves_up_to_its_masters_confirm_offset_and_a_cut_moves_it_back(tmp_path):
    m, r = _store(tmp_path / "m"), _store(tmp_path / "r")
    r.set_replica_confirm(0)
    t = _terms(r)
    _, a = put(m, 4)
    _, b = put(m, 3)
    _replicate(m, r)
    assert _visible(r) == 0
    t.follow_confirm(a.end_offset)
    assert _visible(r) == 4
    t.follow_confirm(b.end_offset + 100)   # the master's confirm past what this log has
    assert r.replica_confirm == b.end_offset and _visible(r) == 7
    replica_append.truncate(r, a.end_offset)   # a new master's history ends there (an unclean case)
    assert r.replica_confirm == a.end_offset and _visible(r) == 4
    _, c = put(m, 2)
    _replicate(m, r)
    assert _visible(r) == 4       # the bytes after the cut wait for the master's word
    t.follow_confirm(c.end_offset)
    assert _visible(r) == 9   # b again, then c
    m.close()
    r.close()


def test_a_deposed_master_alone_in_its_set_keeps_only_what_it_had(tmp_path):
    s = _store(tmp_path / "m")
    s.set_replica_confirm(FOLLOW_LOCAL)
    _, a = put(s, 3)
    s.set_replica_confirm(s.confirm_offset)   # what Replicas._become_slave does
    put(s, 2)   # (a replicated chunk would be the same: written, not yet confirmed)
    assert _visible(s) == 3
    s.close()


class _Meta:
    def __init__(self, offsets):
        self.offsets = dict(offsets)

    def set_offset(self, g, t, q, o):
        self.offsets[(g, t, q)] = o

    def get_offset(self, g, t, q):
        return self.offsets.get((g, t, q))


def test_consumer_offsets_past_a_cut_queue_go_back_to_its_end(tmp_path):
    s = _store(tmp_path / "m")
    put(s, 5)
    meta = _Meta({("g", "T", 0): 9, ("h", "T", 0): 4, ("g", "Gone", 0): 7})
    assert clamp_offsets(meta, s) == 1
    assert meta.offsets == {("g", "T", 0): 5, ("h", "T", 0): 4, ("g", "Gone", 0): 7}
    # a deposed master's offsets (max of both kept) never go past the queue here either
    assert merge_offsets(meta, [("h", "T", 0, 8), ("k", "T", 0, 3)], s) == 2
    assert meta.offsets[("h", "T", 0)] == 5 and meta.offsets[("k", "T", 0)] == 3
    s.close()


def test_view_by_offset_and_key_query_hide_unconfirmed_records(tmp_path):
    s = _store(tmp_path / "m")
    s.set_replica_confirm(0)
    _, res = put(s, 1, keys="kk")
    answers = []
    req = types.SimpleNamespace(args=types.SimpleNamespace(offset=res.phys_offsets[0], topic="T", key="kk",
                                                           max_msgs=8, begin_ts=0, end_ts=2**62),
                                authorize=lambda *a: None, reply=lambda *a: answers.append(a))
    h = MessageRequests(s)
    with pytest.raises(QueryNotFoundError):
        h.view(req)
    with pytest.raises(QueryNotFoundError):
        h.query(req)
    s.set_replica_confirm(res.end_offset)
    h.view(req)
    h.query(req)
    assert len(answers) == 2 and record.decode_many(answers[0][3][0])[0].phys_offset == res.phys_offsets[0]
    s.close()


def test_a_joining_replica_is_proposed_only_once_it_has_the_confirm_offset(tmp_path):
    s = _store(tmp_path / "m")
    s.set_replica_confirm(FOLLOW_LOCAL)
    _, a = put(s, 3)
    t = _terms(s)
    proposed = []
    t.role, t.altering, t.leader, t.me, t.sss = "master", False, "ctl", "me", ["me"]
    t.adding, t.adding_since, t.took_office = set(), {}, 0.0
    t.config = types.SimpleNamespace(ha_max_time_not_caught_up_ms=3000)
    t.ha = types.SimpleNamespace(link_acks={"x": (0, 0.0)}, recheck=lambda: t.update_confirm(
        min(t.ha.link_acks[m][0] for m in t.required) if t.required else None))
    t._alter = lambda sss, adding: proposed.append(sss)
    t.ha.link_acks = {"x": (a.end_offset - 10, time.monotonic())}   # caught up a moment ago, not all of it
    t.sss_step()
    assert "x" in t.required and not proposed
    assert s.replica_confirm == a.end_offset   # held where it was: reads do not pass what x lacks
    put(s, 2)
    t.sss_step()
    assert not proposed and _visible(s) == 3
    t.ha.link_acks = {"x": (a.end_offset, time.monotonic())}
    t.ha.recheck()
    t.sss_step()
    assert proposed == [["me", "x"]]
    t.adding.discard("x")   # the controller refused it: no longer waited for
    t.ha.link_acks = {}
    t._set_sss(["me"])
    assert not t.required and _visible(s) == 5
    s.close()


def test_replication_frames_carry_the_confirm_offset_and_a_replica_serves_up_to_it(tmp_path):
    """The master's side puts its confirm offset in every frame (a heartbeat as soon as it moves);
    the replica's side takes it once handshaken, as far as its own log goes."""
    m = _store(tmp_path / "m")
    m.set_replica_confirm(0)
    _, a = put(m, 3)
    put(m, 2)
    hm = ReplicationMaster.__new__(ReplicationMaster)
    sent = []
    hm.store, hm.terms = m, types.SimpleNamespace(epoch=4)
    hm._sock = types.SimpleNamespace(send_multipart=lambda frames, *a, **k: sent.append(frames))
    link = types.SimpleNamespace(identity=b"s", addr="r", sent_at=0.0, confirm_sent=-1)
    hm._send(link, 0, b"", m.max_phys_offset)
    m.set_replica_confirm(a.end_offset)
    hm._send(link, 0, b"", m.max_phys_offset)
    confirms = [rq.HaTransfer.decode(protocol.decode(f[1:]).ext).confirm for f in sent]
    assert confirms == [0, a.end_offset] and link.confirm_sent == a.end_offset
    r = _store(tmp_path / "r")
    r.set_replica_confirm(0)
    _replicate(m, r)
    hs = ReplicationSlave.__new__(ReplicationSlave)
    hs.terms, hs.handshaken = _terms(r), False
    hs._stop = threading.Event()
    hs.note_confirm(confirms[-1])   # before the handshake cut: not taken
    assert _visible(r) == 0
    hs.handshaken = True
    hs.note_confirm(confirms[-1])
    assert _visible(r) == 3
    m.close()
    r.close()
