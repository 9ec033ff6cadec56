"""Backup names become paths under --backup-dir only; a restore refuses what is not a whole backup."""

import json
import os

import pytest

from quiver.errors import InvalidParameterError, ServiceNotAvailableError
from quiver_broker.backup import MANIFEST, Backups
from quiver_broker.restore import RestoreError, restore


def _backups(root) -> Backups:
    return Backups(str(root), None, None, None, {"broker": "b"}, None)


def test_no_backup_dir_refuses_every_backup_saying_how_to_allow_it():
    with pytest.raises(ServiceNotAvailableError, match="--backup-dir"):
        _backups("").destination("x")


def test_a_name_stays_under_the_root_and_is_never_reused(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    assert _backups(root).destination("a/b") == str(root / "a" / "b")
    (root / "out").symlink_to(tmp_path)          # a link planted under the root pointing out of it
    with pytest.raises(InvalidParameterError, match="leaves its base"):
        _backups(root).destination("out/x")
    (root / "taken").mkdir()
    with pytest.raises(InvalidParameterError, match="exists already"):
        _backups(root).destination("taken")


def _fake_backup(path, files: dict) -> None:
    path.mkdir(parents=True)
    for rel, data in files.items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_bytes(data)
    (path / MANIFEST).write_text(json.dumps({"backup_format": 1, "broker": "b", "files": {
        rel: len(data) for rel, data in files.items()}}))


def test_restore_refuses_a_directory_that_is_not_a_finished_backup(tmp_path):
    (tmp_path / "half").mkdir()
    with pytest.raises(RestoreError, match="not a finished backup"):
        restore(str(tmp_path / "half"), str(tmp_path / "data"))


def test_restore_refuses_a_damaged_backup_and_a_manifest_pointing_out(tmp_path):
    _fake_backup(tmp_path / "bk", {"commitlog/00000000000000000000": b"x" * 10})
    (tmp_path / "bk" / "commitlog" / "00000000000000000000").write_bytes(b"x" * 5)
    with pytest.raises(RestoreError, match="holds 5 bytes, the manifest says 10"):
        restore(str(tmp_path / "bk"), str(tmp_path / "data"))
    manifest = json.loads((tmp_path / "bk" / MANIFEST).read_text())
    manifest["files"] = {"../../etc/passwd": 1}
    (tmp_path / "bk" / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(RestoreError, match="leaves its base"):
        restore(str(tmp_path / "bk"), str(tmp_path / "data"))
    assert not os.path.exists(tmp_path / "data" / "b")


def test_restore_goes_only_into_an_empty_store(tmp_path):
    _fake_backup(tmp_path / "bk", {})
    (tmp_path / "data" / "b").mkdir(parents=True)
    (tmp_path / "data" / "b" / "commitlog").mkdir()
    with pytest.raises(RestoreError, match="not empty"):
        restore(str(tmp_path / "bk"), str(tmp_path / "data"))


def test_a_plan_that_fails_leaves_no_partial_directory_and_the_name_free(tmp_path):
    class Broken:
        max_phys_offset = 0

        @property
        def commit_log(self):
            raise OSError("disk gone")
    b = Backups(str(tmp_path), Broken(), None, None, {"broker": "b"}, None)
    dest = b.destination("x")
    with pytest.raises(OSError, match="disk gone"):
        b.plan(dest)
    assert os.listdir(tmp_path) == []
    assert b.destination("x") == dest
