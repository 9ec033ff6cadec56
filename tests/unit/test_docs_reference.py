"""The generated reference pages (docs/reference/) equal what their generators write now, so a new
setting, verb or option cannot be left out of the docs."""

import pathlib
import runpy

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_settings_reference_is_current():
    table = runpy.run_path(str(ROOT / "scripts" / "settings_table.py"))["table"]()
    page = (ROOT / "docs" / "reference" / "settings.md").read_text()
    assert table in page, "docs/reference/settings.md is stale: run .venv/bin/python scripts/settings_table.py --write"


def test_cli_reference_is_current():
    text = runpy.run_path(str(ROOT / "scripts" / "cli_reference.py"))["reference"]()
    page = (ROOT / "docs" / "reference" / "cli.md").read_text()
    assert page == text, "docs/reference/cli.md is stale: run .venv/bin/python scripts/cli_reference.py --write"


def test_cli_reference_has_every_option():
    """The generator's walk misses nothing: every verb's every option name is on the page."""
    from quiver.tools.cli import cli
    reference = runpy.run_path(str(ROOT / "scripts" / "cli_reference.py"))
    page = (ROOT / "docs" / "reference" / "cli.md").read_text()
    verbs = list(reference["verbs"](cli))
    assert len(verbs) >= 40
    for path, cmd in verbs:
        assert f"`quiver {' '.join(path)}`" in page, path
        for param in cmd.params:
            for name in getattr(param, "opts", []) if not getattr(param, "hidden", False) else []:
                if name.startswith("-"):
                    assert f"`{name}`" in page, (path, name)
