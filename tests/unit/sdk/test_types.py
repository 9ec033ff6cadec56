"""The SDK's public API is typed and documented: `mypy --strict` passes over it, and every
public class, method and function it exports has a docstring.

"The public API" is what pyproject.toml's [tool.mypy] lists: the modules whose names `quiver`,
`quiver.aio` and `quiver.testing` export, with the base classes and mixins those classes get
public methods from (quiver.client.base, admin_inspect, acl_admin) and quiver.aio's bridge.
"""

import inspect
import os
import re
import subprocess
import sys
import typing
from pathlib import Path

import pytest

import quiver
import quiver.aio
import quiver.testing

ROOT = Path(__file__).resolve().parents[3]
EXPORTERS = (quiver, quiver.aio, quiver.testing)


def test_mypy_strict_passes_over_the_public_api(tmp_path):
    # the venv's mypy, the config in pyproject.toml (strict, the module list), a cache of its own
    out = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                          "--cache-dir", str(tmp_path / "mypy_cache")],
                         cwd=ROOT, capture_output=True, text=True, timeout=240)
    report = out.stdout + out.stderr
    assert out.returncode == 0, report
    assert "Success: no issues found" in report, report


# A user's program: each line ending in "# error" must be a mypy error, and no other line.
USER_PROGRAM = """
from quiver import Admin, Message, Producer, PullConsumer, PushConsumer, SendResult
from quiver.aio import AsyncPullConsumer, AsyncPushConsumer
from quiver.client.options import ConsumerOptions


def send(topic: str, body: bytes) -> str:
    with Producer("pg", namesrv="127.0.0.1:9876") as p:
        r: SendResult = p.send(Message(topic, body))
        return r.msg_id


send("Orders", b"x")
send("Orders", 42)  # error
a = PullConsumer("cg", consume_from="first", pull_batch_size=32)
b = PullConsumer("cg", consume_fromm="first")  # error
c = PullConsumer("cg", pull_batch_size="32")  # error
d = AsyncPullConsumer("cg", auto_commit=False, options=ConsumerOptions())
e = AsyncPushConsumer("cg", threads=4, batch_size=8)
f = AsyncPushConsumer("cg", threads="4")  # error
g = PushConsumer("cg", consume_from="first", consume_threads=4, pop=True)
h = PushConsumer("cg", consume_form="first")  # error
rows = Admin(namesrv="127.0.0.1:9876").consumer_progress("cg")
lag: int = rows[0]["lag"]
owner: int = rows[0]["client_id"]  # error
status = Admin(namesrv="127.0.0.1:9876").topic_status("Orders")[0]["last_store_tme"]  # error
"""


def test_a_user_program_type_checks_against_the_dev_install(tmp_path):
    # a program outside the checkout, mypy as a user runs it (no MYPYPATH, no config): the SDK is
    # found through the venv's path (scripts/bootstrap.sh), not only its editable import hook;
    # misspelt or mistyped arguments are errors, so mypy sees the SDK's types rather than Any
    (tmp_path / "app.py").write_text(USER_PROGRAM)
    env = {k: v for k, v in os.environ.items() if k != "MYPYPATH"}
    out = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--no-error-summary",
                          "app.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    report = out.stdout + out.stderr
    assert "Cannot find implementation" not in report, report
    wrong = {i for i, line in enumerate(USER_PROGRAM.splitlines(), 1) if line.endswith("# error")}
    found = {int(m) for m in re.findall(r"^app\.py:(\d+): error", report, re.M)}
    assert found == wrong, report


def test_consumer_settings_hold_every_option_with_its_type():
    from quiver.client.options import _SHORT, ConsumerOptions, ConsumerSettings
    fields = typing.get_type_hints(ConsumerOptions)
    keywords = typing.get_type_hints(ConsumerSettings)
    assert {k: v for k, v in keywords.items() if k not in _SHORT} == fields
    assert {k: keywords[k] for k in _SHORT} == {k: fields[v] for k, v in _SHORT.items()}


def _exported():
    for module in EXPORTERS:
        for name in module.__all__:
            yield f"{module.__name__}.{name}", getattr(module, name)


def _own_doc(obj) -> str:
    return (obj.__dict__.get("__doc__") if inspect.isclass(obj) else getattr(obj, "__doc__", None)) or ""


def _public_members(cls):
    """(name, function) of every public method and property `cls` has from a quiver module,
    inherited ones included: a user sees them on the class."""
    for name in dir(cls):
        if name.startswith("_"):
            continue
        attr = inspect.getattr_static(cls, name)
        fn = attr.fget if isinstance(attr, property) else getattr(attr, "__func__", attr)
        if inspect.isfunction(fn) and fn.__module__.startswith("quiver"):
            yield name, fn


def undocumented() -> list[str]:
    missing = []
    for qualname, obj in _exported():
        if not inspect.isclass(obj):
            if inspect.isfunction(obj) and not _own_doc(obj).strip():
                missing.append(qualname)
            continue
        if not _own_doc(obj).strip():
            missing.append(f"class {qualname}")
        for name, fn in _public_members(obj):
            if not (fn.__doc__ or "").strip():
                missing.append(f"{qualname}.{name} ({fn.__qualname__})")
    return sorted(set(missing))


def test_every_public_class_and_method_has_a_docstring():
    assert undocumented() == []


def test_the_docstring_check_sees_what_it_must():
    names = dict(_public_members(quiver.aio.AsyncAdmin))
    assert {"create_topic", "reset_offset", "start", "shutdown"} <= set(names)    # inherited ones too
    members = dict(_public_members(quiver.Admin))
    assert "acl_grant" in members and "topic_status" in members                   # the mixins' verbs
    assert "with_traceback" not in dict(_public_members(quiver.QuiverError))      # not Python's own

    class Bare:
        def visible(self):
            pass
    Bare.__module__ = Bare.visible.__module__ = "quiver.example"
    quiver.Bare = Bare
    quiver.__all__.append("Bare")
    try:
        assert {"class quiver.Bare", "quiver.Bare.visible (test_the_docstring_check_sees_what_it_must."
                "<locals>.Bare.visible)"} <= set(undocumented())
    finally:
        quiver.__all__.remove("Bare")
        del quiver.Bare
