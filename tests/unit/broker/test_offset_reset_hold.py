"""A reset offset holds against a group's older commits until one of its pulls arrives there
(RocketMQ's resetOffsetTable): the commits that raced the reset cannot undo it."""

from quiver_broker.metadata import RESET_HOLD_S, Metadata


def _meta(tmp_path) -> Metadata:
    return Metadata(f"sqlite:///{tmp_path / 'metadata.db'}", broker="broker-a")


def test_commits_of_another_offset_are_ignored_until_a_pull_arrives_at_the_reset_offset(tmp_path):
    meta = _meta(tmp_path)
    meta.set_offset("g", "T", 0, 100)
    meta.reset_offset("g", "T", 0, 0, now=10.0)
    assert meta.get_offset("g", "T", 0) == 0
    # a queue given up in a rebalance, a pull in flight: both made before the reset was known
    assert not meta.commit_offset("g", "T", 0, 100, now=11.0)
    assert not meta.commit_offset("g", "T", 0, 100, advance=True, now=11.0)
    assert meta.get_offset("g", "T", 0) == 0
    assert meta.commit_offset("g", "T", 0, 0, now=11.0)          # the told consumer's own commit
    assert meta.reset_target("g", "T", 0, 100, now=12.0) == 0     # a pull still at the old place is moved
    assert meta.get_offset("g", "T", 0) == 0
    assert meta.reset_target("g", "T", 0, 0, now=12.0) is None    # a pull at the reset offset ends the hold
    assert meta.commit_offset("g", "T", 0, 32, advance=True, now=13.0)
    assert meta.get_offset("g", "T", 0) == 32
    assert meta.reset_target("g", "T", 0, 64, now=13.0) is None


def test_the_hold_is_per_group_and_queue_and_ends_by_itself(tmp_path):
    meta = _meta(tmp_path)
    meta.reset_offset("g", "T", 0, 5, now=0.0)
    assert meta.commit_offset("g", "T", 1, 9, now=1.0)            # another queue
    assert meta.commit_offset("other", "T", 0, 9, now=1.0)        # another group
    assert meta.reset_target("other", "T", 0, 9, now=1.0) is None
    assert not meta.commit_offset("g", "T", 0, 9, now=RESET_HOLD_S - 1)
    assert meta.commit_offset("g", "T", 0, 9, now=RESET_HOLD_S + 1)  # nobody pulled: the hold lapsed
    assert meta.get_offset("g", "T", 0) == 9
    assert meta.reset_target("g", "T", 0, 3, now=RESET_HOLD_S + 1) is None


def test_a_commit_never_moves_an_offset_back_when_piggy_backed(tmp_path):
    meta = _meta(tmp_path)
    assert meta.commit_offset("g", "T", 0, 10, advance=True)
    assert not meta.commit_offset("g", "T", 0, 4, advance=True)
    assert meta.commit_offset("g", "T", 0, 4)                     # an explicit commit may go back
    assert meta.get_offset("g", "T", 0) == 4
