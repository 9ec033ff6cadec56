"""IndexFile pages leave the broker's RSS once synced (index_file.IndexFile.release).

Entries written through the shared mapping used to stay resident for the life of the
file (up to 420 MB of RSS per file at the defaults): file-backed and reclaimable, but
counted against the broker. Measured here in /proc/self/smaps, for the file's mapping.
"""

import os

import pytest

from quiver_broker.index_file import ENTRY_SIZE, IndexFile, key_hash, prefix_crc

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs Linux /proc/self/smaps")


def resident_kb(path: str) -> int:
    """Rss of this process's mappings of `path`, in KiB."""
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if "-" in head[0] and len(head) >= 5 and ":" not in head[0]:
                inside = len(head) >= 6 and head[5] == path
            elif inside and head[0] == "Rss:":
                total += int(head[1])
    return total


def fill(f: IndexFile, n: int, start: int = 0) -> None:
    p = prefix_crc("T")
    items = [(key_hash(p, f"k{i}"), 1000 + i) for i in range(start, start + n)]
    assert f.put_many(items, 1_700_000_000_000) == n
    f.sync_header()


def test_synced_entries_leave_rss_and_stay_readable(tmp_path):
    path = str(tmp_path / "idx")
    f = IndexFile(path, slots=64, entries=200_000)   # 4 MB of entries; long chains: a query reads many pages
    try:
        fill(f, 100_000)
        written_kb = 100_000 * ENTRY_SIZE // 1024
        assert resident_kb(path) >= written_kb * 0.9
        f.flush()
        assert resident_kb(path) < 64                  # header, slots and the page being written
        p = prefix_crc("T")
        assert list(f.candidates(key_hash(p, "k12345"), 0, 2 ** 62)) == [1000 + 12345]  # faulted back in
        assert resident_kb(path) > 1000                # the query walked a chain through most pages
        fill(f, 50_000, start=100_000)
        f.flush()
        assert resident_kb(path) < 64                  # what queries read goes too
        assert list(f.candidates(key_hash(p, "k149999"), 0, 2 ** 62)) == [1000 + 149_999]
    finally:
        f.close()
    reopened = IndexFile(path, slots=64, entries=200_000)   # what was dropped was on disk
    try:
        assert reopened.count == 150_001
        assert list(reopened.candidates(key_hash(prefix_crc("T"), "k7"), 0, 2 ** 62)) == [1007]
    finally:
        reopened.close()


def test_a_full_file_drops_its_whole_mapping(tmp_path):
    path = str(tmp_path / "idx")
    f = IndexFile(path, slots=20_000, entries=30_001)     # 80 KB of slots
    try:
        fill(f, 30_000)
        assert f.full and resident_kb(path) > 400
        f.flush()
        assert resident_kb(path) == 0
        assert list(f.candidates(key_hash(prefix_crc("T"), "k29999"), 0, 2 ** 62)) == [1000 + 29_999]
    finally:
        f.close()
