"""`quiver filter check`: result, exit codes, caret under the error position."""

from quiver.cli import caret_lines, main


def test_check_prints_result_and_exit_code(capsys):
    assert main(["filter", "check", "a > 5 AND b = 'x' OR c BETWEEN 1 AND 10", "--props", "a=6", "b=x"]) == 0
    assert capsys.readouterr().out.strip() == "TRUE -> match"
    assert main(["filter", "check", "region IN ('eu')", "--props", "region=us"]) == 1
    assert "FALSE -> no match" in capsys.readouterr().out
    assert main(["filter", "check", "a > 5"]) == 1
    assert "NULL" in capsys.readouterr().out
    assert main(["filter", "check", "TAGS = 'vip'", "--props", "TAGS=vip"]) == 0


def test_bad_expression_shows_caret_under_position(capsys):
    assert main(["filter", "check", "a = 1 AND b >", "--props", "a=1"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("error:") and "column" in err[0]
    assert err[1] == "  a = 1 AND b >" and err[2] == "  " + " " * 13 + "^"


def test_caret_on_multiline_expression():
    assert caret_lines("a = 1\nAND b >", 13) == ["  AND b >", "         ^"]
    assert caret_lines("x", None) == ["  x"]


def test_bad_props_argument(capsys):
    assert main(["filter", "check", "a = 1", "--props", "novalue"]) == 2
