"""The entry rule recovery and a slave's append share (queue_entries), and the store's inside:
its own modules reach it through its internal API only."""

import ast
import pathlib

import pytest

from quiver.wire import record
from quiver_broker import queue_entries
from quiver_broker.consume_queue import ENTRY, ConsumeQueue
from quiver_broker.queue_entries import Gaps, cut_past, entry_due, takes_queue_offset

BROKER = pathlib.Path(queue_entries.__file__).parent
STORE_MODULES = ["recovery.py", "replica_append.py", "queue_reads.py", "retention.py", "queue_entries.py",
                 "visibility.py", "lookups.py"]


@pytest.fixture
def cq(tmp_path):
    q = ConsumeQueue(str(tmp_path / "T" / "0"), "T", 0, 100)
    q.append(b"".join(ENTRY.pack(off, 100, 0) for off in (0, 100, 200)))   # queue offsets 0..2
    yield q
    q.close()


def test_half_and_rollback_records_take_no_queue_offset():
    assert takes_queue_offset(record.TX_NOT) and takes_queue_offset(record.TX_COMMIT)
    assert not takes_queue_offset(record.TX_PREPARED) and not takes_queue_offset(record.TX_ROLLBACK)
    assert takes_queue_offset(record.TX_COMMIT | record.SYSFLAG_PROP_CRC)  # other bits do not count


def test_a_record_enters_only_at_its_queues_next_offset(cq):
    gaps = Gaps()
    assert entry_due(cq, 3, 300, gaps)
    assert not entry_due(cq, 2, 300, gaps)          # there already (a repeated recovery or chunk)
    assert not entry_due(cq, 5, 600, gaps)          # a gap nothing explains: not queued, not filled
    assert cq.max_offset == 3 and gaps.gap_entries == 0


def test_a_gap_explained_by_unreadable_damage_is_filled_with_entries_pointing_at_it(cq):
    gaps = Gaps()
    gaps.unattributed.append((300, 2 * record.MIN_RECORD))   # room for two records
    assert entry_due(cq, 5, 300 + 2 * record.MIN_RECORD, gaps)
    assert cq.max_offset == 5 and gaps.gap_entries == 2
    assert cq.entry(3)[:2] == cq.entry(4)[:2] == (300, 2 * record.MIN_RECORD)


def test_damage_before_the_queues_last_record_explains_no_gap(cq):
    gaps = Gaps()
    gaps.unattributed.append((150, 4 * record.MIN_RECORD))   # behind the entry at 200
    assert not entry_due(cq, 4, 1000, gaps) and cq.max_offset == 3


def test_cut_past_keeps_entries_ending_by_the_cut(cq):
    assert cut_past(cq, 300) is None and cq.max_offset == 3
    assert cut_past(cq, 250) == 2 and cq.max_offset == 2
    assert cut_past(cq, 100) == 1 and cq.max_offset == 1


@pytest.mark.parametrize("name", STORE_MODULES)
def test_the_stores_modules_use_no_private_member_of_it(name):
    """`store._x` (or `self.store._x`) from outside store.py: the internal API is on MessageStore."""
    tree = ast.parse((BROKER / name).read_text())
    found = [f"{name}:{n.lineno} {ast.unparse(n)}" for n in ast.walk(tree)
             if isinstance(n, ast.Attribute) and n.attr.startswith("_") and not n.attr.startswith("__")
             and "store" in ast.unparse(n.value).split(".")[-1]]
    assert not found, found
