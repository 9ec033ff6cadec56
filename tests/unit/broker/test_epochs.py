"""The epoch file and the handshake's truncation point (RocketMQ 5's rule)."""

import pytest

from quiver_broker import epochs
from quiver_broker.epochs import EpochFile, epoch_at, truncate_point


def test_same_history_keeps_the_shorter_end():
    assert truncate_point([(1, 0), (2, 100)], 150, [(1, 0), (2, 100)], 180) == 150
    assert truncate_point([(1, 0), (2, 100)], 200, [(1, 0), (2, 100)], 180) == 180


def test_a_deposed_master_cuts_its_own_epoch_tail():
    # old master wrote epoch 2 bytes up to 260 that nobody else has; the new master of epoch 3 started at 200
    assert truncate_point([(1, 0), (2, 100)], 260, [(1, 0), (2, 100), (3, 200)], 300) == 200


def test_divergent_epoch_falls_back_to_the_last_shared_one():
    # slave has epoch 3 from a master whose bytes were lost; the master's epoch 3 never existed, 4 did
    assert truncate_point([(1, 0), (3, 120)], 170, [(1, 0), (4, 110)], 400) == 110


def test_nothing_shared_starts_over():
    assert truncate_point([(2, 0)], 50, [(1, 0), (3, 10)], 90) == 0
    assert truncate_point([], 0, [(1, 0)], 90) == 0
    assert truncate_point([], 70, [(1, 0)], 90) == 0


def test_same_epoch_different_start_is_not_shared():
    assert truncate_point([(1, 0), (2, 50)], 90, [(1, 0), (2, 60)], 90) == 50


def test_epoch_at_caps_a_chunk_at_the_next_epoch():
    entries = [(1, 0), (2, 100), (5, 250)]
    assert epoch_at(entries, 0, 400) == (1, 0, 100)
    assert epoch_at(entries, 99, 400) == (1, 0, 100)
    assert epoch_at(entries, 100, 400) == (2, 100, 250)
    assert epoch_at(entries, 300, 400) == (5, 250, 400)


def test_file_round_trip_torn_tail_and_cut(tmp_path):
    f = EpochFile(str(tmp_path / "epochs"))
    f.load(0)
    f.append(1, 0)
    f.append(2, 100)
    f.append(4, 300)
    with open(f.path, "ab") as out:
        out.write(epochs.encode(9, 999)[:7])   # a torn append
    g = EpochFile(f.path)
    g.load(500)
    assert g.entries == [(1, 0), (2, 100), (4, 300)]
    g.truncate(200)
    h = EpochFile(f.path)
    h.load(200)
    assert h.entries == [(1, 0), (2, 100)] and h.epoch == 2


def test_load_drops_epochs_past_a_cut_log_and_corrupt_entries(tmp_path):
    f = EpochFile(str(tmp_path / "epochs"))
    f.append(1, 0)
    f.append(2, 100)
    f.append(3, 200)
    data = bytearray(open(f.path, "rb").read())
    g = EpochFile(f.path)
    g.load(150)                                   # recovery cut the log at 150
    assert g.entries == [(1, 0), (2, 100)]
    data[20] ^= 0xFF                              # the second entry's bytes
    open(f.path, "wb").write(bytes(data))
    h = EpochFile(f.path)
    h.load(10_000)
    assert h.entries == [(1, 0)]


def test_append_rules(tmp_path):
    f = EpochFile(str(tmp_path / "epochs"))
    f.append(3, 10)
    with pytest.raises(ValueError):
        f.append(3, 20)                          # not newer
    with pytest.raises(ValueError):
        f.append(4, 5)                           # starts before the last one
    f.append(5, 10)                              # epoch 3 held no bytes: replaced
    assert f.entries == [(5, 10)]
