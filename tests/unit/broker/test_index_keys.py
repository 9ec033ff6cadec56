"""IndexService.put_keys (a put's index keys in one call) writes what reserve, put_many and
sync_header write one after the other, in the current file and across a roll."""

import os

from quiver_broker.index_file import IndexService


def _keys(start: int, n: int) -> list[tuple[int, int]]:
    return [((start + i) * 2654435761 % (1 << 31), 1000 + 100 * (start + i)) for i in range(n)]


def _contents(directory: str) -> list[bytes]:
    out = []
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), "rb") as f:
            out.append(f.read())
    return out


def test_put_keys_writes_what_the_three_steps_write(tmp_path):
    one, three = IndexService(str(tmp_path / "one"), 16, 10), IndexService(str(tmp_path / "three"), 16, 10)
    for s in (one, three):
        s.load()
    batches = [(0, 1), (1, 4), (5, 4), (9, 7), (16, 20), (36, 2)]   # fits, fills, spills into 1 and 2 files
    for k, (start, n) in enumerate(batches):
        items, ts = _keys(start, n), 1_800_000_000_000 + 1500 * k
        one.put_keys(items, ts)
        three.reserve(len(items))
        three.put_many(items, ts)
        three.sync_header()
    assert len(one.files) == len(three.files) >= 4
    for s in (one, three):
        s.flush()
    assert _contents(one.dir) == _contents(three.dir)
    assert [f.count for f in one.files] == [f.count for f in three.files]
    for s in (one, three):
        s.close()
