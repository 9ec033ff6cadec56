"""The store's FORMAT file: written at first start, checked at every start (data_format.py)."""

import json
import os

import pytest

from quiver import __version__
from quiver_broker import data_format
from quiver_broker.data_format import FormatError


def _put(d, **content):
    (d / "FORMAT").write_text(json.dumps(content))


def test_a_new_store_gets_the_current_format(tmp_path):
    got = data_format.check(str(tmp_path))
    assert got["format"] == data_format.CURRENT
    on_disk = json.loads((tmp_path / "FORMAT").read_text())
    assert on_disk == {"format": data_format.CURRENT, "oldest_reader": data_format.OLDEST_READER,
                       "written_by": __version__}
    assert data_format.check(str(tmp_path)) == got   # every later start: as is


def test_a_store_from_before_the_file_is_taken_as_format_1(tmp_path):
    (tmp_path / "commitlog").mkdir()
    assert data_format.check(str(tmp_path))["format"] == 1
    assert json.loads((tmp_path / "FORMAT").read_text())["format"] == 1


def test_a_newer_incompatible_format_is_refused_naming_both_versions(tmp_path):
    _put(tmp_path, format=data_format.CURRENT + 1, oldest_reader=data_format.CURRENT + 1, written_by="9.9.9")
    with pytest.raises(FormatError) as info:
        data_format.check(str(tmp_path))
    text = str(info.value)
    for fragment in (f"format {data_format.CURRENT + 1}", "9.9.9", __version__, f"format {data_format.CURRENT})",
                     "restore a backup"):
        assert fragment in text, fragment
    assert json.loads((tmp_path / "FORMAT").read_text())["written_by"] == "9.9.9"   # left untouched


def test_a_newer_format_older_brokers_may_read_is_used_as_is(tmp_path):
    _put(tmp_path, format=data_format.CURRENT + 1, oldest_reader=data_format.CURRENT, written_by="9.9.9")
    assert data_format.check(str(tmp_path))["format"] == data_format.CURRENT + 1
    assert json.loads((tmp_path / "FORMAT").read_text())["format"] == data_format.CURRENT + 1  # not downgraded


@pytest.mark.parametrize("raw", ["{", "[]", '{"format": "1"}', '{"format": 1, "oldest_reader": 2}', "{}"])
def test_a_file_that_is_not_ours_is_refused_not_overwritten(tmp_path, raw):
    (tmp_path / "FORMAT").write_text(raw)
    with pytest.raises(FormatError, match="not a Quiver format file"):
        data_format.check(str(tmp_path))
    assert (tmp_path / "FORMAT").read_text() == raw


def test_an_older_format_is_upgraded_step_by_step(tmp_path, monkeypatch):
    done = []
    monkeypatch.setattr(data_format, "CURRENT", 3)
    monkeypatch.setattr(data_format, "UPGRADES", {1: lambda d: done.append((1, d)), 2: lambda d: done.append((2, d))})
    _put(tmp_path, format=1, oldest_reader=1, written_by="0.0.1")
    assert data_format.check(str(tmp_path))["format"] == 3
    assert done == [(1, str(tmp_path)), (2, str(tmp_path))]
    assert not os.path.exists(tmp_path / "FORMAT.tmp")


def test_a_format_too_old_to_upgrade_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(data_format, "CURRENT", 3)
    monkeypatch.setattr(data_format, "MIN_UPGRADABLE", 2)
    _put(tmp_path, format=1, oldest_reader=1, written_by="0.0.1")
    with pytest.raises(FormatError, match="intermediate release"):
        data_format.check(str(tmp_path))


def test_a_metadata_database_a_newer_release_upgraded_is_refused_by_name(tmp_path):
    import sqlite3
    from quiver_broker.metadata import Metadata
    url = f"sqlite:///{tmp_path / 'metadata.db'}"
    Metadata(url, broker="b").close()
    with sqlite3.connect(tmp_path / "metadata.db") as conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999'")
    with pytest.raises(FormatError, match="revision 9999, which quiver .* does not know: a newer release"):
        Metadata(url, broker="b")
