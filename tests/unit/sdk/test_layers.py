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
