"""Held pulls (pulling.Puller): an answered pull is released at once, expiry is one sweep timer.

Under load nearly every pull is held for a few ms and woken by the next put. A timer
per held pull, cancelled on wake-up, kept the request in the service's timer heap
for its whole suspend time (15 s): ~10k dead requests at 2k msg/s. These tests run
the Puller alone with a fake store, service and clock.
"""

import gc
import types
import weakref

from quiver.wire.codes import ResponseCode
from quiver_broker.pulling import Puller
from quiver_broker.queue_reads import GetResult, GetStatus


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Service:
    """call_later as the real one keeps it: every entry stays until it is due."""

    def __init__(self):
        self.timers = []

    def call_later(self, delay_s, fn, *args):
        entry = [delay_s, fn, args]
        self.timers.append(entry)
        return entry


class Store:
    def __init__(self):
        self.ends = {}           # (topic, queue) -> next offset
        self.fail = set()        # queues whose reads raise

    def get_messages(self, topic, queue_id, offset, max_msgs, hashes, max_bytes):
        if (topic, queue_id) in self.fail:
            raise OSError("read failed")
        end = self.ends.get((topic, queue_id), 0)
        if offset < end:
            return GetResult(GetStatus.FOUND, end, 0, end, b"records", end - offset)
        return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, 0, end, b"", 0)


class Request:
    def __init__(self, queue_id=0, offset=0, suspend_ms=15_000):
        self.args = types.SimpleNamespace(topic="T", queue_id=queue_id, offset=offset, group="", commit_offset=None,
                                          suspend_ms=suspend_ms, max_msgs=32, expression="*", expression_type="TAG",
                                          max_bytes=1 << 20)
        self.answered = False
        self.code = None
        self.denied = None       # what the ACL says now (Request.denied_now)

    def denied_now(self):
        return self.denied

    def reply(self, code, remark="", ext=None, bodies=()):
        self.answered, self.code = True, code


def _puller():
    store, service, clock, counters = Store(), Service(), Clock(), {"pulls_held": 0, "pulled_messages": 0,
                                                                    "pull_expiry_errors": 0, "held_pulls_denied": 0}
    topics = types.SimpleNamespace(get=lambda topic: {"read": 4, "write": 4})
    p = Puller(store, topics, types.SimpleNamespace(advance_offset=lambda *a: None), service, counters,
               30_000, clock=clock)
    return p, store, service, clock


def _fire_due(service, clock):
    """Run the timers due at clock.now (what the service loop does)."""
    due = [t for t in service.timers if t[0] <= 0]
    service.timers = [t for t in service.timers if t[0] > 0]
    for _, fn, args in due:
        fn(*args)


def _advance(service, clock, seconds):
    clock.now += seconds
    for t in service.timers:
        t[0] -= seconds
    _fire_due(service, clock)


def test_a_pull_woken_by_a_put_is_not_kept_anywhere():
    p, store, service, clock = _puller()
    reqs = [Request(queue_id=0) for _ in range(50)]
    for r in reqs:
        p.handle(r)
    assert p.held_count() == 50
    store.ends[("T", 0)] = 1
    p.notify("T", 0)
    assert all(r.code == ResponseCode.SUCCESS for r in reqs) and p.held_count() == 0
    refs = [weakref.ref(r) for r in reqs]
    del reqs, r
    gc.collect()
    assert [ref for ref in refs if ref() is not None] == []   # nothing (a timer) still holds them
    assert len(service.timers) <= 1                            # one sweep timer, not one per pull


def test_a_held_pull_is_checked_against_the_acl_again_when_answered():
    """Its user deleted (or its SUB revoked) while held: NO_PERMISSION, not what was stored since."""
    p, store, service, clock = _puller()
    gone, kept = Request(), Request()
    p.handle(gone)
    p.handle(kept)
    gone.denied = "this key is no longer a user's (deleted or rotated): get a new key file"
    store.ends[("T", 0)] = 1
    p.notify("T", 0)
    assert gone.code == ResponseCode.NO_PERMISSION and kept.code == ResponseCode.SUCCESS
    late = Request(offset=1, suspend_ms=500)
    p.handle(late)
    late.denied = "lacks SUB"
    _advance(service, clock, 0.6)            # answered at expiry: checked too
    assert late.code == ResponseCode.NO_PERMISSION and p.counters["held_pulls_denied"] == 2
    fresh = Request(offset=0)
    fresh.denied = "never asked: a pull not held was checked at the door"
    p.handle(fresh)
    assert fresh.code == ResponseCode.SUCCESS


def test_held_pulls_expire_at_their_own_deadlines_with_one_live_timer():
    p, store, service, clock = _puller()
    long, short = Request(suspend_ms=10_000), Request(queue_id=1, suspend_ms=1_000)
    p.handle(long)
    p.handle(short)          # an earlier deadline re-arms the sweep
    _advance(service, clock, 0.9)
    assert not short.answered
    _advance(service, clock, 0.2)
    assert short.code == ResponseCode.PULL_NOT_FOUND and not long.answered
    _advance(service, clock, 8.8)
    assert not long.answered
    _advance(service, clock, 0.2)
    assert long.code == ResponseCode.PULL_NOT_FOUND and p.held_count() == 0
    assert service.timers == []   # nothing held, nothing armed


def test_a_failed_read_at_expiry_does_not_keep_the_other_pulls_held():
    p, store, service, clock = _puller()
    bad, good = Request(queue_id=2, suspend_ms=500), Request(queue_id=3, suspend_ms=500)
    p.handle(bad)
    p.handle(good)
    store.fail.add(("T", 2))
    _advance(service, clock, 0.6)
    assert good.code == ResponseCode.PULL_NOT_FOUND
    assert p.held_count() == 0 and p.counters["pull_expiry_errors"] == 1


def test_expire_step_returns_the_next_deadline():
    p, store, service, clock = _puller()
    p.handle(Request(suspend_ms=2_000))
    p.handle(Request(queue_id=1, suspend_ms=5_000))
    assert p.expire_step(clock.now + 1) == clock.now + 2
    assert p.expire_step(clock.now + 3) == clock.now + 5 and p.held_count() == 1
    assert p.expire_step(clock.now + 6) is None and p.held_count() == 0
