"""Print the settings reference table (docs/reference/settings.md) from every service's config dataclass.

    .venv/bin/python scripts/settings_table.py            # print
    .venv/bin/python scripts/settings_table.py --write    # update docs/reference/settings.md in place
A unit test checks that page holds exactly this output, so the docs cannot drift.
"""

import importlib
import pathlib
import sys

from quiver.runtime.settings import describe

SERVICES = [("namesrv", "quiver_namesrv"), ("broker-store", "quiver_broker"), ("filter", "quiver_filter"),
            ("scheduler", "quiver_scheduler"), ("txn-checker", "quiver_txn"), ("console", "quiver_console"),
            ("proxy", "quiver_proxy"), ("kafka", "quiver_kafka")]
BEGIN, END = "<!-- settings-table:begin -->", "<!-- settings-table:end -->"


def table() -> str:
    lines = [BEGIN, "| service | flag | env var | default | meaning |", "|---|---|---|---|---|"]
    for name, pkg in SERVICES:
        try:
            cls = importlib.import_module(f"{pkg}.config").Config
        except ModuleNotFoundError:
            continue
        for flag, env, default, help_text in describe(cls):
            shown = str(default).replace("|", "\\|") if default != "" else ""
            lines.append(f"| {name} | `{flag}` | `{env}` | `{shown}` | {help_text.replace('|', '/')} |")
    lines.append(END)
    return "\n".join(lines)


def main() -> None:
    text = table()
    if "--write" in sys.argv:
        readme = pathlib.Path(__file__).resolve().parent.parent / "docs" / "reference" / "settings.md"
        doc = readme.read_text()
        start, end = doc.index(BEGIN), doc.index(END) + len(END)
        readme.write_text(doc[:start] + text + doc[end:])
    else:
        print(text)


if __name__ == "__main__":
    main()
