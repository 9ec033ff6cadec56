"""`python -m quiver_filter check` (and `quiver filter check`, which runs it): result, exit codes, caret."""

from quiver.tools.cli import main as quiver_main
from quiver_filter.check import caret_lines, main


def test_check_prints_result_and_exit_code(capsys):
    assert main(["a > 5 AND b = 'x' OR c BETWEEN 1 AND 10", "--props", "a=6", "b=x"]) == 0
    assert capsys.readouterr().out.strip() == "TRUE -> match"
    assert main(["region IN ('eu')", "--props", "region=us"]) == 1
    assert "FALSE -> no match" in capsys.readouterr().out
    assert main(["a > 5"]) == 1
    assert "NULL" in capsys.readouterr().out
    assert main(["TAGS = 'vip'", "--props", "TAGS=vip"]) == 0


def test_bad_expression_shows_caret_under_position(capsys):
    assert main(["a = 1 AND b >", "--props", "a=1"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("error:") and "column" in err[0]
    assert err[1] == "  a = 1 AND b >" and err[2] == "  " + " " * 13 + "^"


def test_caret_on_multiline_expression():
    assert caret_lines("a = 1\nAND b >", 13) == ["  AND b >", "         ^"]
    assert caret_lines("x", None) == ["  x"]


def test_bad_props_argument(capsys):
    assert main(["a = 1", "--props", "novalue"]) == 2


def test_sdk_cli_runs_the_filters_checker_as_a_process(capfd):
    assert quiver_main(["filter", "check", "a > 5", "--props", "a=6", "-v"]) == 0
    out = capfd.readouterr().out
    assert "TRUE -> match" in out and "properties read: a" in out
    assert quiver_main(["filter", "check", "a >"]) == 2
    assert "error:" in capfd.readouterr().err


def test_the_sdk_never_imports_a_service_package():
    import pathlib
    import re
    sdk = pathlib.Path(__file__).resolve().parents[3] / "sdk" / "quiver"
    pattern = re.compile(r"^\s*(from|import)\s+quiver_(namesrv|broker|scheduler|txn|filter)\b", re.M)
    allowed = {"testing/__init__.py"}  # builds an in-process cluster from the real services, lazily
    offenders = [str(p.relative_to(sdk)) for p in sdk.rglob("*.py")
                 if str(p.relative_to(sdk)) not in allowed and pattern.search(p.read_text())]
    assert offenders == []
