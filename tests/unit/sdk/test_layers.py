"""The SDK's layers (docs/architecture.md): wire < client < runtime < tools; apps import the client layer."""

import ast
import pathlib

import pytest

SDK = pathlib.Path(__file__).resolve().parents[3] / "sdk" / "quiver"
# what each layer may not import (a lower layer never reaches up)
FORBIDDEN = {
    "wire": ("quiver.client", "quiver.runtime", "quiver.tools", "quiver.spark", "quiver.testing"),
    "client": ("quiver.runtime", "quiver.tools", "quiver.spark", "quiver.testing"),
    "runtime": ("quiver.tools", "quiver.spark", "quiver.testing"),
}


def _imports(path: pathlib.Path, package: str):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                mod = f"{base}.{node.module}" if node.module else base
            else:
                mod = node.module or ""
            yield mod
            yield from (f"{mod}.{a.name}" for a in node.names)


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_a_layer_never_imports_the_layers_above_it(layer):
    bad = []
    for path in sorted((SDK / layer).glob("*.py")):
        for mod in _imports(path, f"quiver.{layer}"):
            if mod.startswith(FORBIDDEN[layer]):
                bad.append(f"{path.name}: {mod}")
    assert bad == []


def test_every_sdk_module_lives_in_a_layer_or_is_one_of_the_few_top_level_ones():
    top = sorted(p.name for p in SDK.glob("*.py"))
    assert top == ["__init__.py", "errors.py"]   # and the packages quiver.spark and quiver.testing


def test_no_name_of_before_the_layers_imports():
    import importlib
    for old in ("quiver.record", "quiver.protocol", "quiver.codes", "quiver.consumer", "quiver.settings"):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(old)
    import quiver.client
    assert not hasattr(quiver.client, "MessageQueue")   # it lives in quiver.client.base


# ---- services: each its own package, sharing code only through the SDK --------------------------

SERVICES = SDK.parents[1] / "services"
# services that are clients of another service (they pull, send, rebalance or administer through
# the SDK's clients); the broker and the name server serve, and take wire facts from quiver.wire
CLIENT_SERVICES = {"scheduler", "txn-checker", "filter", "proxy", "console", "kafka"}


def _service_packages() -> dict[str, str]:
    import tomllib
    conf = tomllib.loads((SDK.parents[1] / "pyproject.toml").read_text())
    dirs = conf["tool"]["setuptools"]["package-dir"]
    return {pathlib.Path(d).name: pkg for pkg, d in dirs.items() if d.startswith("services/")}


def _service_imports(folder: str, package: str):
    for path in sorted((SERVICES / folder).rglob("*.py")):
        rel = path.relative_to(SERVICES / folder).with_suffix("")
        mod = ".".join((package, *rel.parts[:-1]))
        for name in _imports(path, mod):
            yield path.relative_to(SERVICES), name


def test_every_service_folder_is_a_package_of_pyproject():
    assert sorted(_service_packages()) == sorted(p.name for p in SERVICES.iterdir() if (p / "__init__.py").exists())


@pytest.mark.parametrize("folder", sorted(_service_packages()))
def test_a_service_imports_no_other_service_and_the_client_layer_only_as_a_client(folder):
    packages = _service_packages()
    others = tuple(pkg for f, pkg in packages.items() if f != folder)
    bad = []
    for path, mod in _service_imports(folder, packages[folder]):
        if mod.split(".")[0] in others:
            bad.append(f"{path}: {mod} (another service)")
        elif folder not in CLIENT_SERVICES and (mod == "quiver.client" or mod.startswith("quiver.client.")):
            bad.append(f"{path}: {mod} (a wire fact lives in quiver.wire)")
    assert bad == []


def test_the_layer_checks_see_a_broker_importing_the_client_layer(tmp_path):
    # the check above reads imports the way the broker writes them: a case it must catch
    path = tmp_path / "m.py"
    path.write_text("from quiver.client.message import TAGS\nimport quiver.client\nfrom quiver.client import tags\n")
    found = list(_imports(path, "quiver_broker"))
    assert "quiver.client.message" in found and "quiver.client" in found and "quiver.client.tags" in found
