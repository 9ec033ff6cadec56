"""Orderly-consumption queue locks: lease, renewal, ownership, departed holders."""

from quiver_broker.locks import LockManager


class Clock:
    t = 0.0

    def __call__(self):
        return self.t


def test_lock_renew_expire_and_unlock():
    clock = Clock()
    lm = LockManager(lease_s=60, clock=clock)
    q0, q1 = ("T", 0), ("T", 1)
    assert lm.try_lock("g", "a", [q0, q1]) == [q0, q1]
    assert lm.try_lock("g", "b", [q0, q1]) == []          # held by a
    clock.t = 50
    assert lm.try_lock("g", "a", [q0]) == [q0]            # renewal
    clock.t = 100
    assert lm.try_lock("g", "b", [q0, q1]) == [q1]        # q1's lease ran out, q0 was renewed at 50
    lm.unlock("g", "b", [q0])                             # not b's: no effect
    assert lm.holder("g", q0) == "a"
    lm.unlock("g", "a", [q0])
    assert lm.try_lock("g", "b", [q0]) == [q0]
    assert lm.try_lock("other", "a", [q0]) == [q0]        # per group


def test_holder_that_left_the_group_loses_its_locks_at_once():
    members = {"a", "b"}
    lm = LockManager(is_member=lambda g, c: c in members)
    assert lm.try_lock("g", "a", [("T", 0)]) == [("T", 0)]
    members.discard("a")
    assert lm.try_lock("g", "b", [("T", 0)]) == [("T", 0)]
    assert lm.held_by_group("g") == {("T", 0): "b"}
