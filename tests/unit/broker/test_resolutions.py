"""Resolved transactions are remembered until retention deletes their halves, not forever."""

import types

from quiver_broker.resolutions import Resolutions


def _store(min_phys=0, max_phys=0):
    return types.SimpleNamespace(min_phys_offset=min_phys, max_phys_offset=max_phys)


def test_membership_and_states():
    r = Resolutions(_store(), mark_every=4)
    r.add("a", "C")
    r.add("b", "R")
    assert "a" in r and "b" in r and "z" not in r and len(r) == 2
    assert r.get("b") == "R" and r.get("z") is None
    r.add("a", "D")                   # a second resolution keeps its place
    assert r.get("a") == "D" and len(r) == 2


def test_forgotten_only_once_every_copy_of_their_halves_is_deleted():
    store = _store()
    r = Resolutions(store, mark_every=100)
    for i in range(1000):             # CommitLog end 1000 * i when the i-th is resolved
        store.max_phys_offset = 1000 * (i + 1)
        r.add(f"tx{i}", "C")
    assert len(r) == 1000             # nothing deleted yet
    store.min_phys_offset = 450_000   # retention deleted segments below 450 000
    r.add("next", "C")
    assert r.prune() == 400           # the four groups noted at ends 100 000 .. 400 000
    assert "tx399" not in r and "tx400" in r and "next" in r
    assert len(r) == 601
    store.min_phys_offset = 10 ** 9
    assert r.prune() == 600           # the last mark: everything noted so far
    assert "next" in r and len(r) == 1    # resolved after the last mark: kept until the next


def test_memory_is_bounded_by_the_retention_window():
    store = _store()
    r = Resolutions(store, mark_every=64)
    for i in range(100_000):
        store.max_phys_offset = i + 1
        store.min_phys_offset = max(0, i - 5_000)   # retention keeps the last 5 000 puts
        r.add(f"tx{i}", "R")
    assert len(r) <= 5_000 + 2 * 64
    assert "tx99999" in r and "tx0" not in r
