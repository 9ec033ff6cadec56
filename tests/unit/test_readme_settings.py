"""The README's settings table is generated from the config dataclasses; it must be current."""

import pathlib
import runpy

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_readme_settings_table_is_current():
    table = runpy.run_path(str(ROOT / "scripts" / "settings_table.py"))["table"]()
    readme = (ROOT / "README.md").read_text()
    assert table in readme, "README settings table is stale: run .venv/bin/python scripts/settings_table.py --write"
