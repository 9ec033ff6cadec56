"""Every ```python and ```bash block of README.md and of every docs/ page runs, in order within its
page, against a live local cluster.

The cluster is real processes on loopback ports: a name server, broker `broker-a` (auto-create
on, as under `quiver up`), a scheduler, a txn-checker and a filter server, so delayed,
transactional and SQL92 snippets meet the services they need. Each block runs in a fresh
process, in its own temp dir (the repo's `examples/` linked in):

- a ```python block: `python test_snippet.py`; one that defines `test_*` functions is a test file
  and runs under `python -m pytest`;
- a ```bash (or sh/shell) block: `bash -e -o pipefail`, `quiver` and `python` from this venv
  first on PATH, QUIVER_NAMESRV set to the live name server, NO_COLOR=1.

Conventions for README and docs authors:

- Write the default address: `ns = "127.0.0.1:9876"`, `--namesrv 127.0.0.1:9876`. The test
  rewrites that literal (and nothing else of the name server) to the live cluster's address.
  It also rewrites port 8088 (the example HTTP service) to a free port and adds `--free-ports`
  to `quiver up`, so a run never binds a well-known port another cluster may hold.
- Each block is complete on its own: imports, `ns`, topics created before use, clients closed,
  waits bounded (a block gets SNIPPET_TIMEOUT_S). Blocks may rely on the blocks above them
  in the same page only for state in the cluster (a topic an earlier block created, messages
  in it), never for Python names, and never on another page's blocks: pages run README.md
  first, then docs/ in path order, but each must pass alone (`-k docs/features/pop.md`, or every
  page on a fresh cluster of its own: QUIVER_SNIPPETS_CLUSTER_PER_PAGE=1).
- A block that cannot run here by its nature (installs or starts a whole deployment, needs
  Docker or other hosts, starts a server in the foreground) carries, on the line right before
  its fence, `<!-- snippet: skip (why) -->`. The test lists it as skipped with that reason.
  Any other ```python / ```bash block runs, so a new snippet cannot be forgotten: it passes or
  it is marked. A skip marker not directly before a block fails the test.
- Blocks without a language or with another one (synopses, tables, trees, output) are text,
  not snippets.

A run passes when it exits 0 and prints no Python traceback; a failure shows its output.
Python blocks, skipped ones included, are also checked for names used but never defined or
imported, also inside functions a run never calls (a listener, a test function).
Every process started here (cluster, snippet, anything a snippet's `quiver up` left) is
stopped by PID.
"""

import builtins
import json
import os
import re
import signal
import subprocess
import symtable
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from quiver import Admin
from quiver.errors import QuiverError
from quiver.tools.local import LocalCluster, free_port, wait_healthy

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))
DEFAULT_NAMESRV = "127.0.0.1:9876"
SNIPPET_TIMEOUT_S = 120
LANGS = {"python": "python", "py": "python", "bash": "bash", "sh": "bash", "shell": "bash"}
FENCE = re.compile(r"^```\s*([\w+-]*)\s*$")
SKIP = re.compile(r"^<!--\s*snippet:\s*skip\s*\((?P<why>.+)\)\s*-->\s*$")


@dataclass(frozen=True)
class Snippet:
    page: str          # path from the repo root
    line: int          # 1-based line of the opening fence
    lang: str          # "python" | "bash"
    code: str
    skip: str | None   # the marker's reason

    @property
    def id(self) -> str:
        first = next((ln.strip() for ln in self.code.splitlines() if ln.strip()), "")
        return f"{self.page}:L{self.line}-{self.lang}-{re.sub(r'[^A-Za-z0-9_.-]+', '_', first)[:40]}"

    @property
    def where(self) -> str:
        return f"{self.page} line {self.line}"


def parse(text: str, page: str = "README.md") -> tuple[list[Snippet], list[int]]:
    """A page's runnable blocks, and the lines of skip markers that precede no block."""
    lines = text.splitlines()
    snippets, stray, i = [], [], 0
    while i < len(lines):
        if SKIP.match(lines[i]) and not (i + 1 < len(lines) and FENCE.match(lines[i + 1])):
            stray.append(i + 1)
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, lang = i, m.group(1).lower()
        i += 1
        while i < len(lines) and not lines[i].startswith("```"):
            i += 1
        mark = SKIP.match(lines[start - 1]) if start else None
        if lang in LANGS:
            snippets.append(Snippet(page, start + 1, LANGS[lang], "\n".join(lines[start + 1:i]) + "\n",
                                    mark.group("why") if mark else None))
        i += 1
    return snippets, stray


def collect(pages: list[Path]) -> tuple[list[Snippet], list[str]]:
    """Every page's blocks; a block that repeats one run earlier (the README's SDK block is also
    the SDK page's first) is skipped as that one, so CI runs it once."""
    snippets, stray, seen = [], [], {}
    for page in pages:
        name = str(page.relative_to(ROOT))
        found, lines = parse(page.read_text(), name)
        for s in found:
            first = seen.setdefault((s.lang, s.code), s)
            if first is not s and not s.skip and not first.skip:
                s = replace(s, skip=f"the same block as {first.where}, which runs")
            snippets.append(s)
        stray += [f"{name} line {n}" for n in lines]
    return snippets, stray


SNIPPETS, STRAY_MARKERS = collect(PAGES)


def test_skip_markers_sit_right_before_a_block():
    assert not STRAY_MARKERS, f"{STRAY_MARKERS}: a snippet skip marker must be the line before a fence"


def test_the_readme_has_snippets():
    readme = [s for s in SNIPPETS if s.page == "README.md" and not s.skip]
    assert readme, "the parser found no runnable README block"
    assert len([s for s in SNIPPETS if not s.skip]) >= 15, "the parser found (almost) no runnable docs block"


def undefined_names(code: str) -> set[str]:
    """Names a block reads that it neither defines, imports nor gets from builtins, in any scope
    (symtable resolves closures; what is left global must exist at module level)."""
    top = symtable.symtable(code, "<snippet>", "exec")
    defined, read = set(dir(builtins)), set()

    def walk(table, nested):
        for sym in table.get_symbols():
            name = sym.get_name()
            if sym.is_assigned() or sym.is_imported():
                if not nested or sym.is_declared_global():
                    defined.add(name)
            if sym.is_referenced() and (not nested or sym.is_global()):
                read.add(name)
        for child in table.get_children():
            walk(child, True)

    walk(top, False)
    return read - defined


PY_SNIPPETS = [s for s in SNIPPETS if s.lang == "python"]


@pytest.mark.parametrize("snippet", PY_SNIPPETS, ids=[s.id for s in PY_SNIPPETS])
def test_python_snippet_defines_what_it_uses(snippet: Snippet):
    missing = undefined_names(snippet.code)
    assert not missing, f"{snippet.where}: undefined names {sorted(missing)}:\n{snippet.code}"


PER_PAGE = os.environ.get("QUIVER_SNIPPETS_CLUSTER_PER_PAGE") == "1"


def start_cluster(root: Path) -> LocalCluster:
    """namesrv + broker-a + scheduler + txn-checker + filter (stopped by PID by the caller)."""
    c = LocalCluster(str(root))
    try:
        c.add_namesrv()
        c.wait()
        c.add_broker()
        c.wait()
        c.wait_registered(1)
        services = [c.add_service("scheduler", "quiver_scheduler"),
                    c.add_service("txn-checker", "quiver_txn"),
                    c.add_service("filter", "quiver_filter", "--register-interval-ms", "1000", data=False)]
        wait_healthy(services)
        _wait_filter_routed(c)
        return c
    except BaseException:
        stop_cluster(c)
        raise


def stop_cluster(c: LocalCluster) -> None:
    for svc in c.services:
        svc.kill()


@pytest.fixture(scope="module")
def clusters(tmp_path_factory):
    """The live cluster of a page's blocks: one for the whole run, or with
    QUIVER_SNIPPETS_CLUSTER_PER_PAGE=1 a fresh one for each page, which checks that no page
    relies on another page's blocks."""
    held: dict[str, LocalCluster] = {}

    def for_page(page: str) -> LocalCluster:
        key = page if PER_PAGE else ""
        if key not in held:
            for old in held.values():
                stop_cluster(old)
            held.clear()
            held[key] = start_cluster(tmp_path_factory.mktemp("readme-cluster"))
        return held[key]

    try:
        yield for_page
    finally:
        for c in held.values():
            stop_cluster(c)


def _wait_filter_routed(c: LocalCluster, timeout: float = 20.0) -> None:
    """SQL92 subscriptions need a filter server in the routes: wait for it on a probe topic."""
    admin = Admin(namesrv=c.namesrv)
    try:
        admin.create_topic("ReadmeProbe", queues=1)
        deadline = time.monotonic() + timeout
        while True:
            try:
                if any(admin.topic_route("ReadmeProbe").get("filter_servers", {}).values()):
                    return
            except QuiverError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"no filter server in the routes after {timeout} s")
            time.sleep(0.1)
    finally:
        admin.shutdown()


def _rewrite(s: Snippet, namesrv: str, http_port: int) -> str:
    code = s.code.replace(DEFAULT_NAMESRV, namesrv)
    if s.lang == "bash":
        code = re.sub(r"\b(localhost|127\.0\.0\.1):8088\b", rf"\g<1>:{http_port}", code)
        code = re.sub(r"\bquiver up\b(?! --free-ports)", "quiver up --free-ports", code)
    return code


def _command(s: Snippet, path: Path) -> list[str]:
    if s.lang == "bash":
        return ["bash", "-e", "-o", "pipefail", str(path)]
    if re.search(r"^def test_\w*\(", s.code, re.M):
        return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(path)]
    return [sys.executable, str(path)]


def _env(namesrv: str) -> dict:
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.update(QUIVER_NAMESRV=namesrv, NO_COLOR="1", PYTHONUNBUFFERED="1")
    env.pop("QUIVER_CREDENTIALS", None)
    return env


def _stop_group(proc: subprocess.Popen) -> None:
    """The snippet's process and whatever it started in its session, by its PID (= its group id)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(10)


def _stop_quiver_up_leftovers(workdir: Path) -> None:
    """A `quiver up --detach` whose `quiver down` did not run leaves a state file with PIDs."""
    for state in workdir.rglob("quiver-up.json"):
        try:
            pids = [s["pid"] for s in json.loads(state.read_text())["services"]]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


@pytest.mark.parametrize("snippet", SNIPPETS, ids=[s.id for s in SNIPPETS])
def test_readme_snippet(snippet: Snippet, request: pytest.FixtureRequest, tmp_path: Path):
    if snippet.skip:
        pytest.skip(f"{snippet.where}: {snippet.skip}")
    live: LocalCluster = request.getfixturevalue("clusters")(snippet.page)
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    path = tmp_path / ("snippet.sh" if snippet.lang == "bash" else "test_snippet.py")
    path.write_text(_rewrite(snippet, live.namesrv, free_port()))
    proc = subprocess.Popen(_command(snippet, path), cwd=tmp_path, env=_env(live.namesrv), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=SNIPPET_TIMEOUT_S)
        timed_out = False
    except subprocess.TimeoutExpired:
        timed_out = True
        _stop_group(proc)
        out, _ = proc.communicate()
    finally:
        _stop_group(proc)  # also what the snippet left in the background (`server &`)
        _stop_quiver_up_leftovers(tmp_path)
    text = out.decode(errors="replace")
    shown = f"{snippet.where} ({snippet.lang}):\n{path.read_text()}\n--- output ---\n{text[-6000:]}"
    assert not timed_out, f"did not finish in {SNIPPET_TIMEOUT_S} s; {shown}"
    assert proc.returncode == 0, f"exit {proc.returncode}; {shown}"
    assert "Traceback (most recent call last)" not in text, f"a traceback; {shown}"
