"""`quiver broker backup | restore`: input refused locally with exit 2 and a reason, before any call."""

from quiver.tools.cli import main


def test_backup_names_that_cannot_be_a_directory_under_the_root_exit_2(capsys):
    assert main(["broker", "backup", "--broker", "127.0.0.1:1", "--to", "s3://Bucket/x"]) == 2
    assert "is not s3://BUCKET/PREFIX" in capsys.readouterr().err
    assert main(["broker", "backup", "--broker", "127.0.0.1:1", "--to", "s3://bucket/.x"]) == 2
    assert "not starting with '.'" in capsys.readouterr().err
    assert main(["broker", "backup", "--broker", "127.0.0.1:1", "--to", "s3://bucket/x", "--s3-endpoint", "ftp://h"]) == 2
    assert "is not http[s]://HOST[:PORT]" in capsys.readouterr().err
    assert main(["broker", "backup", "--broker", "127.0.0.1:1", "--to", "../x"]) == 2
    assert "'..'" in capsys.readouterr().err


def test_restore_of_a_directory_that_is_no_backup_exits_2_saying_so(tmp_path, capsys):
    assert main(["broker", "restore", "--from", str(tmp_path), "--data-dir", str(tmp_path / "d")]) == 2
    assert "not a finished backup" in capsys.readouterr().err
    assert main(["broker", "restore", "--from", str(tmp_path / "nothing"), "--data-dir", str(tmp_path / "d")]) == 2
    assert "neither a directory nor s3://" in capsys.readouterr().err
