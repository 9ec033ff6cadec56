"""The partition suite's checker (tests/support/partition_check.py) on made-up histories."""

from support.partition_check import check, overlaps, windows

A, B = "10.0.0.1:10911", "10.0.0.2:10911"


def ack(i, q, o, b, ts, tr=None):
    return {"id": f"p0-{i}", "q": q, "o": o, "b": b, "body": f"p0-{i}|", "ts": ts,
            "tr": ts + 0.01 if tr is None else tr}


def log_of(acks):
    final = {}
    for a in acks:
        final.setdefault(a["q"], []).append([a["o"], a["id"], a["body"]])
    return final


def delivered(g, acks):
    return [{"g": g, "q": a["q"], "o": a["o"], "id": a["id"], "t": 0} for a in acks]


def test_a_clean_history_reports_nothing():
    acks = [ack(i, i % 2, i // 2, A, i * 0.1) for i in range(20)]
    rep = check(acks, log_of(acks), delivered("g1", acks) + delivered("g2", acks), groups=("g1", "g2"),
                ordered_groups=("g1",))
    assert (rep.lost, rep.changed, rep.duplicated, rep.overlaps) == ([], [], [], [])
    assert all(not r.skipped and not r.out_of_order and not r.phantom for r in rep.groups.values())
    assert rep.acked == rep.stored == 20


def test_lost_changed_and_duplicated():
    acks = [ack(i, 0, i, A, i * 0.1) for i in range(5)]
    final = log_of(acks[:4])
    final[0][1][2] = "p0-1|tampered"            # same place, other body
    final[0][2][0] = 7                          # same body, other offset
    final[0].append([9, "p0-3", "p0-3|"])       # stored twice
    rep = check(acks, final, [], groups=("g",))
    assert rep.lost == ["p0-4"]
    assert rep.changed == ["p0-1", "p0-2"]
    assert rep.duplicated == ["p0-3"]
    assert len(rep.groups["g"].skipped) == 2    # only the acked messages kept where acked count
    later = [{"g": "g", "q": 0, "o": 3, "id": "p0-3", "t": 0}]
    assert check(acks, final, later, groups=("g",)).groups["g"].passed_over == 1   # p0-0 lies below p0-3


def test_a_group_that_read_the_old_masters_unacked_message_skips_the_acked_one():
    """The failover case: the group got offset 5 from the cut-off master (never acked, truncated
    later) and committed past it; the new master's acked message at offset 5 never reaches it."""
    acks = [ack(i, 0, i, A, i * 0.1) for i in range(5)] + [ack(5, 0, 5, B, 3.0)]
    got = delivered("g", acks[:5]) + [{"g": "g", "q": 0, "o": 5, "id": "p0-99", "t": 0}]
    rep = check(acks, log_of(acks), got, groups=("g", "idle"))
    assert rep.groups["g"].skipped == ["p0-5"]
    assert rep.groups["g"].passed_over == 0     # it got nothing acked after it: not reached yet
    assert "1 skipped (0 passed over, per queue {0: 1})" in rep.summary()
    assert rep.groups["g"].phantom == 1
    assert len(rep.groups["idle"].skipped) == 6   # a group that got nothing skipped everything


def test_order_per_queue_is_checked_for_ordered_groups_only():
    acks = [ack(i, 0, i, A, i * 0.1) for i in range(4)]
    got = delivered("g", [acks[0], acks[2], acks[1], acks[3]])
    assert check(acks, log_of(acks), got, groups=("g",), ordered_groups=("g",)).groups["g"].out_of_order == 1
    assert check(acks, log_of(acks), got, groups=("g",)).groups["g"].out_of_order == 0
    # a redelivery of earlier messages (a rewind) is not out of order: first deliveries count
    again = got[:1] + delivered("g", acks[1:]) + delivered("g", acks)
    assert check(acks, log_of(acks), again, groups=("g",), ordered_groups=("g",)).groups["g"].out_of_order == 0


def test_a_clean_failover_does_not_overlap():
    """A acks until 5.0 s (answers arriving late), B from 7.0 s: the spans never meet."""
    acks = [ack(i, 0, i, A, i * 0.1, tr=i * 0.1 + 0.5) for i in range(51)]
    acks += [ack(100 + i, 0, 51 + i, B, 7.0 + i * 0.1) for i in range(30)]
    assert overlaps(acks) == []


def test_two_masters_acknowledging_at_once_overlap_by_their_common_span():
    acks = [ack(i, 0, i, A, i * 0.1) for i in range(100)]               # A: 0.01 .. 9.9 s
    acks += [ack(200 + i, 1, i, B, 4.0 + i * 0.1) for i in range(30)]    # B: 4.01 .. 6.9 s
    (a, b, s), = overlaps(acks)
    assert (a, b) == (A, B) and abs(s - 2.89) < 1e-6


def test_a_master_back_after_a_pause_gets_a_new_window_and_a_lone_ack_none():
    acks = [ack(i, 0, i, A, i * 0.1) for i in range(10)]                 # 0 .. 0.9
    acks += [ack(50 + i, 0, 10 + i, A, 6.0 + i * 0.1) for i in range(10)]  # 6 .. 6.9: a new run
    acks += [ack(99, 0, 30, A, 9.0)]                                      # alone: no certain span
    acks += [ack(300 + i, 0, 40 + i, B, 2.0 + i * 0.1) for i in range(20)]  # B: 2 .. 3.9
    assert windows(acks)[A] == [(0.01, 0.9), (6.01, 6.9)]
    assert overlaps(acks) == []
