"""--auto-failover's controller answers on the broker side (Replicas, in process, roles stubbed):
an answer of an older Raft term than one already seen changes nothing (a deposed controller
leader renews no lease, names no master), and an async-acks write is acknowledged only while
the lease holds."""

import time
from types import SimpleNamespace

from quiver.wire import requests as rq
from quiver.wire.codes import ResponseCode
from quiver_broker.replicas import Replicas

ME, OTHER = "10.0.0.1:10911", "10.0.0.2:10911"


def _replicas(tmp_path) -> Replicas:
    config = SimpleNamespace(controllers="127.0.0.1:9876", advertised=ME, store_dir=str(tmp_path), ha_acks="async",
                             min_in_sync_replicas=1, name="b")
    r = Replicas(config, store=SimpleNamespace(max_phys_offset=0, min_phys_offset=0), service=None, transport=None,
                 make_master=None, make_slave=None, on_role=None)
    r.roles = []

    def become_master(epoch, lease_until):
        r.role, r.epoch, r.lease_until, r.ha = "master", epoch, lease_until, SimpleNamespace(recheck=lambda: None)
        r.roles.append(("master", epoch))

    def become_slave(epoch, master, master_ha):
        r.role, r.epoch, r.master_addr, r.lease_until = "slave", epoch, master, 0.0
        r.roles.append(("slave", epoch))
    r._become_master, r._become_slave = become_master, become_slave
    return r


def _answer(role: str, epoch: int, term: int, master: str = ME) -> object:
    return rq.ControllerAssignment.decode({"role": role, "ep": epoch, "master": master, "master_ha": master,
                                           "id": 1, "sss": [master], "lease_ms": 1200, "term": term})


class Req:
    def __init__(self):
        self.replies = []

    def reply(self, code, remark, ext=None):
        self.replies.append(code)


def test_an_answer_of_an_older_raft_term_is_ignored(tmp_path):
    r = _replicas(tmp_path)
    r.apply(_answer("master", 1, term=3), time.monotonic())
    assert r.roles == [("master", 1)] and r.lease_valid() and r.term == 3
    r.lease_until = 0.0                       # the lease ran out: no leader of term 3 answered since
    r.apply(_answer("master", 1, term=2), time.monotonic())
    assert not r.lease_valid(), "a deposed controller leader renewed the lease"
    r.apply(_answer("slave", 2, term=2, master=OTHER), time.monotonic())
    assert r.roles == [("master", 1)] and r.epoch == 1
    r.apply(_answer("master", 1, term=3), time.monotonic())   # the current leader: renewed
    assert r.lease_valid()
    r.apply(_answer("slave", 2, term=4, master=OTHER), time.monotonic())
    assert r.roles == [("master", 1), ("slave", 2)] and r.term == 4


def test_async_acks_are_answered_only_within_the_lease(tmp_path):
    r = _replicas(tmp_path)
    r.apply(_answer("master", 1, term=1), time.monotonic())
    ok, late = Req(), Req()
    r.wait_for_slave(100, ok, {})
    r.lease_until = time.monotonic() - 0.001   # ran out while the write was being flushed
    r.wait_for_slave(200, late, {})
    assert ok.replies == [ResponseCode.SUCCESS]
    assert late.replies == [ResponseCode.FLUSH_SLAVE_TIMEOUT]


def test_a_resigned_broker_takes_the_leaders_empty_answer_quietly(tmp_path, caplog):
    r = _replicas(tmp_path)
    r.resigned = True
    r._answered("127.0.0.1:9876", time.monotonic(), SimpleNamespace(code=ResponseCode.SUCCESS, ext={}))
    assert not [m for m in caplog.messages if "ignored" in m], caplog.messages
