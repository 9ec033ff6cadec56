"""Print Quiver's dependencies from pyproject.toml, one requirement a line.

    python scripts/requirements.py                 # the core dependencies
    python scripts/requirements.py postgres,spark  # plus these extras

The Dockerfile installs them in a layer of their own before it copies the source,
so an edit to the code rebuilds only the last, seconds-long layer.
"""

import pathlib
import sys
import tomllib


def requirements(extras: list[str]) -> list[str]:
    path = pathlib.Path(__file__).resolve().parent.parent / "pyproject.toml"
    project = tomllib.loads(path.read_text())["project"]
    optional = project.get("optional-dependencies", {})
    unknown = [e for e in extras if e not in optional]
    if unknown:
        raise SystemExit(f"unknown extras {unknown}: pyproject.toml has {sorted(optional)}")
    return project["dependencies"] + [req for e in extras for req in optional[e]]


if __name__ == "__main__":
    print("\n".join(requirements([e for e in ",".join(sys.argv[1:]).split(",") if e])))
