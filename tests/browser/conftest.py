"""A real cluster (name server, broker, scheduler) and the console as processes, and Debian's
headless Chromium driven by Playwright (never `playwright install`: the system's browser).
Every process, the browser included, is stopped by PID at teardown."""

import os
import pathlib
import shutil
import signal
import uuid

import pytest

from quiver import Admin
from quiver.tools.local import LocalCluster
from support.waiting import wait_for

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SHOTS = pathlib.Path(__file__).resolve().parents[2] / "build" / "screenshots"
TOKEN = "browser-test-token"
LEVELS = "100ms 100ms 100ms 200ms 200ms 200ms 200ms 200ms 200ms 200ms 200ms 200ms 200ms 200ms 200ms 200ms 200ms 200ms"


@pytest.fixture(scope="module")
def web_cluster(tmp_path_factory):
    """(cluster, console process, Admin): one name server, one broker, a scheduler (retries reach
    the DLQ through it) and the console with actions on behind an admin token."""
    c = LocalCluster(str(tmp_path_factory.mktemp("web")))
    try:
        c.add_namesrv()
        c.wait()
        c.add_broker(None, None, "--delay-levels", LEVELS)
        c.wait()
        c.wait_registered(1)
        c.add_service("scheduler", "quiver_scheduler")
        console = c.add_console("--allow-actions", "--request-timeout-ms", "3000",
                                env={"QUIVER_ADMIN_TOKEN": TOKEN})   # env, not argv: not in `ps`
        c.wait()
        admin = Admin(namesrv=c.namesrv)
        yield c, console, admin
        admin.shutdown()
    finally:
        for svc in c.services:
            if svc.alive():
                svc.kill()


@pytest.fixture(scope="module")
def browser():
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} missing (.ci/run installs Debian's chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    tag = f"--quiver-test-run={uuid.uuid4().hex}"   # an unknown switch Chromium ignores: finds our PIDs
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=[*ARGS, tag], headless=True)
        pids = _pids_with(tag)
        try:
            yield b
        finally:
            b.close()
            for pid in pids + _pids_with(tag):   # whatever close() left behind, by PID
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def _pids_with(arg: str) -> list[int]:
    """PIDs of processes whose command line holds `arg` (the browser and its helpers)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if arg.encode() in f.read().split(b"\0"):
                        out.append(int(entry))
            except OSError:
                continue
    return out


class Watched:
    """A page whose console errors, page errors and failed responses are collected."""

    def __init__(self, page, base: str):
        self.page, self.base, self.errors = page, base.rstrip("/"), []
        page.on("console", lambda m: m.type == "error" and self.errors.append(f"console: {m.text}"))
        page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))
        page.on("requestfailed", lambda r: self.errors.append(f"failed: {r.url} {r.failure}"))
        page.on("response", lambda r: r.status >= 400 and self.errors.append(f"HTTP {r.status}: {r.url}"))

    def open(self, path: str, shot: str | None = None):
        resp = self.page.goto(self.base + path, wait_until="load")
        assert resp is not None and resp.ok, f"{path}: {resp and resp.status}"
        if shot:
            self.shot(shot)
        return self.page

    def shot(self, name: str) -> None:
        """The whole page as it is now, to build/screenshots/<name>.png."""
        SHOTS.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


@pytest.fixture
def page(browser, web_cluster):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        yield Watched(context.new_page(), web_cluster[1].url)
    finally:
        context.close()


def wait(predicate, what: str, timeout: float = 20.0):
    return wait_for(predicate, timeout, what)


def copy_screenshot(name: str, to: pathlib.Path) -> None:
    shutil.copyfile(SHOTS / f"{name}.png", to)
