"""Print Quiver's dependencies from pyproject.toml, one requirement a line.

    python scripts/requirements.py                 # the core dependencies (the client SDK)
    python scripts/requirements.py all             # plus these extras (and those they name)

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
    out: list[str] = list(project["dependencies"])
    todo, seen = list(extras), set()
    while todo:                       # an extra may name others: "quiver[cli,metrics]"
        extra = todo.pop(0)
        if extra in seen:
            continue
        seen.add(extra)
        for req in optional[extra]:
            if req.startswith("quiver["):
                todo.extend(req[len("quiver["):req.index("]")].split(","))
            elif req not in out:
                out.append(req)
    return out


if __name__ == "__main__":
    print("\n".join(requirements([e for e in ",".join(sys.argv[1:]).split(",") if e])))
