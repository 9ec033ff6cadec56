"""The controller's rules: members, elections from the SyncStateSet only, epoch compare-and-set."""

from quiver_namesrv.controller_state import Groups, Liveness, group_key, pick_master

K = group_key("C", "b")
A, B, C = "10.0.0.1:1", "10.0.0.2:1", "10.0.0.3:1"


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def _group():
    g = Groups()
    for addr in (A, B, C):
        g.register("C", "b", addr, addr + "1")
    return g


def test_members_get_stable_ids():
    g = _group()
    assert [g.get(K)["members"][a]["id"] for a in (A, B, C)] == [1, 2, 3]
    assert g.register("C", "b", B, "x:2") == 2 and g.get(K)["members"][B]["ha"] == "x:2"


def test_first_master_is_the_live_member_with_most_data():
    g, clock = _group(), Clock()
    live = Liveness(1.5, clock)
    live.beat(A, 10, 0)
    live.beat(B, 30, 0)
    assert pick_master(g.get(K), live) == B
    assert g.elect(K, 0, B) and g.get(K)["epoch"] == 1 and g.get(K)["sss"] == [B]


def test_silent_master_is_replaced_from_the_sync_state_set_only():
    g, clock = _group(), Clock()
    live = Liveness(1.5, clock)
    g.elect(K, 0, A)
    assert g.alter(K, A, 1, [A, B])
    for addr in (A, B, C):
        live.beat(addr, 50 if addr == C else 10, 1)   # C has the most bytes but is not in sync
    assert pick_master(g.get(K), live) is None        # master alive: nothing to do
    clock.now += 2
    live.beat(B, 10, 1)
    live.beat(C, 50, 1)
    assert pick_master(g.get(K), live) == B
    assert g.elect(K, 1, B)
    assert g.get(K)["master"] == B and g.get(K)["epoch"] == 2 and g.get(K)["sss"] == [B]


def test_no_live_member_in_sync_means_no_election():
    g, clock = _group(), Clock()
    live = Liveness(1.5, clock)
    g.elect(K, 0, A)
    g.alter(K, A, 1, [A, B])
    live.beat(C, 99, 1)
    assert pick_master(g.get(K), live) is None


def test_stale_elections_and_alters_change_nothing():
    g = _group()
    assert g.elect(K, 0, A)
    assert not g.elect(K, 0, B)                      # decided on an old epoch
    assert not g.alter(K, B, 1, [B, A])              # not the master
    assert not g.alter(K, A, 0, [A, B])              # old epoch
    assert not g.alter(K, A, 1, [B])                 # drops the master itself
    assert not g.alter(K, A, 1, [A, "9.9.9.9:1"])    # not a member
    assert g.alter(K, A, 1, [A, B, C])
    assert g.elect(K, 1, C)
    assert g.get(K)["sss"] == [C, B]                 # the old master leaves, the other in-sync member stays


def test_assignment():
    g = _group()
    assert g.assignment(K, A, 1200).role == "none"
    g.elect(K, 0, A)
    m, s = g.assignment(K, A, 1200, term=3), g.assignment(K, B, 1200)
    assert (m.role, m.epoch, m.lease_ms, m.term) == ("master", 1, 1200, 3)
    assert (s.role, s.master_addr, s.master_ha_addr, s.broker_id) == ("slave", A, A + "1", 2)


def test_election_checks_the_sync_state_set_as_it_applies():
    """The choice was made from one set, the set changed before the entry applied: nothing changes."""
    g = _group()
    assert g.elect(K, 0, A)
    assert g.alter(K, A, 1, [A, B])
    assert not g.elect(K, 1, C)                      # never in the set: may lack acknowledged messages
    assert not g.elect(K, 1, B, [A, B, C])           # picked from a set that is no longer the set
    assert g.alter(K, A, 1, [A])                     # B left the set after the scan chose it
    assert not g.elect(K, 1, B, [A, B])
    assert not g.elect(K, 1, B)
    assert g.get(K)["master"] == A and g.get(K)["epoch"] == 1
    assert g.alter(K, A, 1, [A, B])
    assert g.elect(K, 1, B, [A, B]) and g.get(K)["master"] == B and g.get(K)["epoch"] == 2
