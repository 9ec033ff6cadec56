"""`pip install quiver` is the client SDK alone (pyzmq, orjson); every other import of the code
is declared in the extra of the part that makes it (pyproject.toml), so a service's install
has what it imports and the client's has nothing more.

The check reads each part's import statements (lazy ones inside functions included), maps the
third-party modules to their distributions and requires each to be in the part's extra, or
required by something in it."""

import ast
import importlib.metadata as md
import re
import sys
import tomllib
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
SDK = ROOT / "sdk" / "quiver"

# part of the code -> the extra that must cover its imports ("" : the core dependencies)
PARTS = {
    "": [SDK / "__init__.py", SDK / "errors.py", SDK / "wire", SDK / "client", SDK / "aio"],
    "metrics": [SDK / "client" / "metrics.py"],
    "db": [SDK / "client" / "idempotent.py", SDK / "client" / "transaction.py"],
    "cli": [SDK / "tools"],
    "server": [SDK / "runtime", SDK / "testing"] + [ROOT / "services" / s for s in (
        "namesrv", "broker-store", "scheduler", "txn-checker", "filter")],
    "console": [ROOT / "services" / "console"],
    "proxy": [ROOT / "services" / "proxy"],
    "kafka": [ROOT / "services" / "kafka"],
    "spark": [SDK / "spark"],
}
# a file of a part whose import is another extra's, loaded only when that feature is used
OPTIONAL = {SDK / "client" / "metrics.py": "metrics", SDK / "client" / "idempotent.py": "db",
            SDK / "client" / "transaction.py": "db"}


def _name(req: str) -> str:
    return re.split(r"[\s<>=!~;\[]", req, maxsplit=1)[0].lower().replace("_", "-")


def _requirements(extra: str) -> list[str]:
    return PROJECT["dependencies"] if extra == "" else PROJECT["optional-dependencies"][extra]


@cache
def closure(extra: str) -> frozenset[str]:
    """Distributions an install of quiver[extra] has: the core, the extra (its quiver[...] parts
    expanded) and everything those require."""
    names, todo = set(), [*PROJECT["dependencies"], *(_requirements(extra) if extra else [])]
    while todo:
        req = todo.pop()
        m = re.fullmatch(r"quiver\[([\w,]+)\]", req.split(";")[0].strip())
        if m:
            for e in m.group(1).split(","):
                todo.extend(_requirements(e))
            continue
        name = _name(req)
        if name in names:
            continue
        names.add(name)
        try:
            todo.extend(r for r in (md.requires(name) or []) if "extra ==" not in r)
        except md.PackageNotFoundError:
            pass
    return frozenset(names)


def _files(paths):
    for p in paths:
        yield from (sorted(p.rglob("*.py")) if p.is_dir() else [p])


def third_party_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return {m for m in found if m not in sys.stdlib_module_names and not m.startswith("quiver")
            and m != "__future__"}


@cache
def _distributions() -> dict[str, list[str]]:
    return {k: [d.lower().replace("_", "-") for d in v] for k, v in md.packages_distributions().items()}


def test_the_client_install_is_pyzmq_and_orjson_only():
    assert sorted(_name(r) for r in PROJECT["dependencies"]) == ["orjson", "pyzmq"]


@pytest.mark.parametrize("extra", list(PARTS))
def test_each_part_imports_only_what_its_extra_installs(extra):
    missing = []
    for path in _files(PARTS[extra]):
        need = OPTIONAL.get(path, extra)
        if need != extra:
            continue
        for module in sorted(third_party_imports(path)):
            dists = _distributions().get(module)
            assert dists, f"{path.relative_to(ROOT)} imports {module}, which no installed distribution provides"
            if not any(d in closure(need) for d in dists):
                missing.append(f"{path.relative_to(ROOT)}: {module} ({dists[0]})")
    assert not missing, f"imports not in quiver[{extra}]'s install: {missing}"


def test_the_check_sees_a_missing_declaration():
    assert "sqlalchemy" in closure("server") and "sqlalchemy" not in closure("")
    assert "flask" not in closure("server") and "flask" in closure("console")
    assert third_party_imports(ROOT / "services" / "console" / "app.py") & {"flask", "waitress"}
