"""The five services of a fuzz test as real processes, and what is measured around a fuzz run.

`fuzz_env` (a pytest fixture: import it into the test module) starts name
server, broker, filter, scheduler and txn-checker on loopback ports, in a
layout that keeps path-shaped names harmless::

    tmp_path/
      sandbox/s1/.../s8/cluster/   the cluster's data dir (broker store, scheduler db, logs)
      cwd/c1/.../c11/              the services' working directory
      victim/                      canary.txt, etc/passwd: what "/etc"-style names point at

The data dir sits deeper below tmp_path than any traversal fuzz.path_names
makes, so a service that joins "../../.." to a store path (and even deletes
it) stays inside tmp_path; the parent of tmp_path is snapshotted before and
after to find what was created or deleted outside the data dir. Every process
is stopped by PID at teardown.

Also here: memory of a PID (/proc/<pid>/status), the tree snapshot, the seed,
and `Checks`, which records every check (strict) and fails the test at the
end with all the failures, so one run reports every symptom.
"""

import hashlib
import os
import random
import time
from pathlib import Path

import pytest

from quiver import Admin
from quiver.wire.codes import RequestCode
from quiver.errors import QuiverError
from quiver.tools.local import LocalCluster, ServiceProcess, wait_healthy
from quiver.wire.curve import init_auth_dir
from quiver.wire.transport import Transport

MIN_FRAMES = 20_000                       # issue 13: per service per CI run
RSS_BOUND_BYTES = 300 << 20               # growth allowed, resident and peak
FUZZ_DEADLINE_S = float(os.environ.get("QUIVER_FUZZ_DEADLINE_S", "60"))  # the general phase; others 20-30 s
RANDOM_FRAMES = int(os.environ.get("QUIVER_FUZZ_RANDOM", "4000"))
HUGE_FRAME_BYTES = 256 << 20
DELAY_LEVELS = "1s 5s 10s"
TOPICS = {"FuzzCanary": 4, "FuzzRoundTrip": 2, "FuzzT": 4, "FuzzDelay": 1, "FuzzTx": 2, "FuzzSql": 2,
          "FuzzDeletable": 1}
SANDBOX_DEPTH = 8
CWD_DEPTH = 11


def fuzz_seed() -> int:
    """QUIVER_FUZZ_SEED, or a fresh one (printed by the tests, so a failing run can be replayed)."""
    env = os.environ.get("QUIVER_FUZZ_SEED")
    return int(env) if env else random.SystemRandom().randrange(2**32)


def memory(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak resident) of a process, in bytes."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(rest.split()[0]) * 1024
    return out


def snapshot(root: Path, exclude: Path) -> dict[str, str]:
    """rel path -> "d" or "f:<sha1 of the first 64 KiB>|<size>" of everything under root but `exclude`."""
    out = {}
    exclude = str(exclude)
    for dirpath, dirnames, filenames in os.walk(root):
        if dirpath == exclude or dirpath.startswith(exclude + os.sep):
            dirnames[:] = []
            continue
        rel = os.path.relpath(dirpath, root)
        out[rel] = "d"
        for name in filenames:
            path = os.path.join(dirpath, name)
            try:
                with open(path, "rb") as f:
                    digest = hashlib.sha1(f.read(65536)).hexdigest()
                out[os.path.join(rel, name)] = f"f:{digest}|{os.path.getsize(path)}"
            except OSError as exc:
                out[os.path.join(rel, name)] = f"f:unreadable {exc.errno}"
    return out


def snapshot_diff(before: dict, after: dict) -> list[str]:
    rows = [f"created {p}" for p in sorted(set(after) - set(before))]
    rows += [f"deleted {p}" for p in sorted(set(before) - set(after))]
    rows += [f"changed {p}" for p in sorted(set(before) & set(after)) if before[p] != after[p]]
    return rows


class Checks:
    """Strict checks recorded one by one; `assert_all` fails with every failure listed."""

    def __init__(self, service: str, out):
        self.service = service
        self.out = out
        self.failures: list[str] = []

    def expect(self, ok: bool, name: str, detail: str = "") -> bool:
        line = f"CHECK {self.service}: {'ok  ' if ok else 'FAIL'} {name}" + (f" -- {detail}" if detail else "")
        self.out(line)
        if not ok:
            self.failures.append(line)
        return ok

    def attempt(self, name: str, fn, *args, **kw):
        """Run fn -> (ok, detail) | bool; an exception is a failure with its message."""
        try:
            res = fn(*args, **kw)
        except Exception as exc:  # the symptom is what we report
            self.expect(False, name, f"raised {type(exc).__name__}: {str(exc)[:400]}")
            return False
        ok, detail = res if isinstance(res, tuple) else (bool(res), "")
        return self.expect(ok, name, detail)

    def assert_all(self) -> None:
        assert not self.failures, f"{len(self.failures)} fuzz checks failed:\n" + "\n".join(self.failures)


def ping(addr: str, timeout: float = 3.0) -> tuple[bool, str]:
    t = Transport("fuzz-ping")
    try:
        env = t.call(addr, RequestCode.PING, timeout=timeout)
        return env.code == 0, f"{env.remark!r} {env.ext}"
    finally:
        t.close()


def status(addr: str, timeout: float = 3.0) -> dict:
    t = Transport("fuzz-status")
    try:
        return t.call(addr, RequestCode.STATUS, timeout=timeout).ext["status"]
    finally:
        t.close()


def _nested(base: Path, prefix: str, depth: int) -> Path:
    path = base
    for i in range(1, depth + 1):
        path = path / f"{prefix}{i}"
    return path


class FuzzEnv:
    """The five services and the directories around them."""

    def __init__(self, tmp_path: Path, auth: bool = False):
        self.tmp = tmp_path
        self.data_dir = _nested(tmp_path / "sandbox", "s", SANDBOX_DEPTH) / "cluster"
        self.cwd = _nested(tmp_path / "cwd", "c", CWD_DEPTH)
        self.victim = tmp_path / "victim"
        # auth on: the keys live inside the data dir's parent (outside it nothing may change)
        self.credentials = init_auth_dir(str(self.data_dir.parent / "auth")) if auth else None
        self.cluster = LocalCluster(str(self.data_dir), auth_dir=str(self.data_dir.parent / "auth") if auth else None)
        self.snapshot_root = tmp_path.parent
        self.namesrv = self.broker = self.filter = self.scheduler = self.txn = None

    @property
    def ns(self) -> str:
        return self.cluster.namesrv

    @property
    def services(self) -> list[ServiceProcess]:
        return list(self.cluster.services)

    def make_dirs(self) -> None:
        self.cwd.mkdir(parents=True)
        (self.victim / "etc").mkdir(parents=True)
        (self.victim / "canary.txt").write_text("victim canary: must survive the fuzz\n")
        (self.victim / "etc" / "passwd").write_text("root:x:0:0::/root:/bin/sh\n")

    def start(self, namesrv_args=(), broker_args=()) -> "FuzzEnv":
        c = self.cluster
        self.namesrv = c.add_namesrv(None, *namesrv_args)
        c.wait()
        self.broker = c.add_broker(None, None, "--delay-levels", DELAY_LEVELS, "--register-interval-ms", "1000",
                                   "--offset-persist-interval-ms", "500", *broker_args)
        c.wait()
        c.wait_registered(1)
        admin = Admin(namesrv=self.ns, credentials=self.credentials)
        try:
            for topic, queues in TOPICS.items():
                admin.create_topic(topic, queues=queues)
            self.scheduler = c.add_service("scheduler", "quiver_scheduler")
            self.txn = c.add_service("txn-checker", "quiver_txn", "--check-interval-ms", "300",
                                     "--transaction-timeout-ms", "600")
            self.filter = c.add_service("filter", "quiver_filter", "--register-interval-ms", "1000", data=False)
            c.wait()
            self._wait_scheduler(admin)
            self._wait_filter(admin)
        finally:
            admin.shutdown()
        return self

    def _wait_scheduler(self, admin, timeout: float = 20.0) -> None:
        units = len(DELAY_LEVELS.split()) + 1  # level queues + the timer queue of the one broker
        deadline = time.monotonic() + timeout
        while True:
            try:
                owned = admin.status(self.scheduler.addr).get("owned", [])
                if len(owned) >= units:
                    return
            except QuiverError:
                owned = None
            if time.monotonic() > deadline:
                raise RuntimeError(f"scheduler owns {owned} after {timeout} s:\n{self.scheduler.log_tail()}")
            time.sleep(0.1)

    def _wait_filter(self, admin, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                route = admin.topic_route("FuzzSql")
                if any(self.filter.addr in addrs for addrs in route.get("filter_servers", {}).values()):
                    return
            except QuiverError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"filter server not routed in {timeout} s:\n{self.filter.log_tail()}")
            time.sleep(0.1)

    def restart(self, svc: ServiceProcess) -> None:
        svc.stop()
        svc.start()
        wait_healthy([svc], credentials=self.credentials)
        if svc is self.broker:
            self.cluster.wait_registered(1)

    def kill_all(self) -> None:
        for svc in reversed(self.cluster.services):
            if svc.alive():
                svc.kill()


@pytest.fixture
def fuzz_env(tmp_path, monkeypatch):
    """make(namesrv_args=(), broker_args=()) -> a started FuzzEnv; every process killed by PID at teardown."""
    made = []

    def make(namesrv_args=(), broker_args=(), auth: bool = False) -> FuzzEnv:
        env = FuzzEnv(tmp_path, auth)
        made.append(env)
        env.make_dirs()
        monkeypatch.chdir(env.cwd)  # the services inherit it: a relative path they build lands in the sandbox
        return env.start(namesrv_args, broker_args)

    yield make
    for env in made:
        env.kill_all()


@pytest.fixture
def out(capsys):
    """print to the captured output and to the terminal (the CI log shows the fuzz counts)."""
    def emit(line: str) -> None:
        print(line)
        with capsys.disabled():
            print(line, flush=True)
    return emit
