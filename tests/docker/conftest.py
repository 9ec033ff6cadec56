"""Fixtures for compose on a real Docker engine: the image, one compose project, a client container.

Needs a Docker engine (`.ci/run` starts dockerd when none answers) and docker-compose
(v1, Debian's package) or the `docker compose` plugin. Tests skip only when no engine
answers `docker info`. Everything a test creates carries the compose project's label and is
removed by that label at teardown: containers (also the client's), networks and volumes.
"""

import contextlib
import json
import os
import shutil
import socket
import subprocess
import time
import uuid

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
IMAGE = "quiver:latest"           # compose.yaml's image for every service
TARGET = "service"                # and the Dockerfile target it builds
PROJECT_LABEL = "com.docker.compose.project"
SERVICE_LABEL = "com.docker.compose.service"
CLIENT = os.path.join(ROOT, "tests", "docker", "client.py")


def run(*args, timeout: float = 300, check: bool = True, env=None) -> subprocess.CompletedProcess:
    out = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                         env={**os.environ, **(env or {})})
    if check and out.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited {out.returncode}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return out


def engine_answers() -> str | None:
    """None when a Docker engine answers, else why not."""
    if shutil.which("docker") is None:
        return "no docker CLI (.ci/run installs Debian's docker.io)"
    out = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True,
                         timeout=30)
    if out.returncode != 0:
        return f"no Docker engine answers `docker info` (.ci/run starts dockerd): {out.stderr.strip()[-300:]}"
    return None


def compose_command() -> list[str]:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    pytest.fail("neither docker-compose nor the `docker compose` plugin is installed (.ci/run installs docker-compose)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def image() -> dict:
    """quiver:latest built from this tree: the base is made offline when it cannot be pulled,
    and Docker's layer cache makes a rebuild of an unchanged context take about a second."""
    why = engine_answers()
    if why:
        pytest.skip(why)
    base = next(line.split()[1] for line in open(os.path.join(ROOT, "Dockerfile")) if line.startswith("FROM "))
    if run("docker", "image", "inspect", base, check=False).returncode != 0:
        run("bash", "scripts/docker-base.sh", timeout=900)
    old = run("docker", "image", "inspect", "-f", "{{.Id}}", IMAGE, check=False).stdout.strip()
    t0 = time.monotonic()
    new = run("docker", "build", "-q", "--target", TARGET, "-t", IMAGE, ".", timeout=900).stdout.strip()
    if old and old != new:
        run("docker", "rmi", old, check=False)  # the replaced image; its build cache stays
    size = int(run("docker", "image", "inspect", "-f", "{{.Size}}", IMAGE).stdout)
    return {"base": base, "size_bytes": size, "build_s": time.monotonic() - t0}


class Project:
    """One compose project with its own name, published ports and volumes."""

    def __init__(self, name: str):
        self.name = name
        self.cmd = compose_command()
        # every port compose publishes on the host is this project's own: two projects run at once
        self.env = {"QUIVER_NAMESRV_PORT": str(free_port()), "QUIVER_DEV_BROKER_PORT": str(free_port()),
                    "QUIVER_CONSOLE_PORT": str(free_port()), "QUIVER_SPARK_UI_PORT": str(free_port()),
                    "QUIVER_PROXY_PORT": str(free_port()), "QUIVER_KAFKA_PORT": str(free_port())}
        self.env["QUIVER_KAFKA_ADVERTISE"] = f"127.0.0.1:{self.env['QUIVER_KAFKA_PORT']}"

    @property
    def namesrv_port(self) -> int:
        return int(self.env["QUIVER_NAMESRV_PORT"])

    @property
    def kafka_port(self) -> int:
        return int(self.env["QUIVER_KAFKA_PORT"])

    @property
    def dev_broker_port(self) -> int:
        return int(self.env["QUIVER_DEV_BROKER_PORT"])

    def compose(self, *args, timeout: float = 300) -> subprocess.CompletedProcess:
        return run(*self.cmd, "-f", "compose.yaml", "-p", self.name, *args, timeout=timeout, env=self.env)

    def docker(self, *args, timeout: float = 120) -> subprocess.CompletedProcess:
        return run("docker", *args, timeout=timeout)

    def up(self, *args) -> None:
        self.compose("up", "-d", "--no-build", *args)

    def containers(self, service: str | None = None) -> list[dict]:
        """The project's containers (not the client's), with service, number, state and health."""
        ids = run("docker", "ps", "-aq", "--filter", f"label={PROJECT_LABEL}={self.name}").stdout.split()
        if not ids:
            return []
        # the whole State as JSON: a container without a healthcheck (a one-shot) has no Health key
        fmt = '{"id": "{{.Id}}", "name": "{{.Name}}", "service": "{{index .Config.Labels "%s"}}", "s": {{json .State}}}' \
            % SERVICE_LABEL
        rows = []
        for line in run("docker", "inspect", "-f", fmt, *ids).stdout.splitlines():
            row = json.loads(line)
            st = row.pop("s")
            rows.append({**row, "state": st["Status"], "started": st["StartedAt"],
                         "health": (st.get("Health") or {}).get("Status", "")})
        return [r for r in rows if r["service"] and (service is None or r["service"] == service)]

    def wait_healthy(self, expected: dict[str, int], timeout_s: float = 120) -> float:
        """Until exactly `expected` running containers per service are all healthy; seconds taken."""
        t0 = time.monotonic()
        while True:
            rows = [r for r in self.containers() if r["state"] == "running"]
            counts = {s: sum(r["service"] == s for r in rows) for s in expected}
            if counts == expected and all(r["health"] == "healthy" for r in rows if r["service"] in expected):
                return time.monotonic() - t0
            if time.monotonic() - t0 > timeout_s:
                logs = self.compose("logs", "--tail", "30", timeout=60).stdout[-6000:]
                raise AssertionError(f"not healthy in {timeout_s} s: want {expected}, have "
                                     f"{[(r['name'], r['state'], r['health']) for r in self.containers()]}\n{logs}")
            time.sleep(1)

    def network(self) -> str:
        nets = run("docker", "network", "ls", "-q", "--filter", f"label={PROJECT_LABEL}={self.name}").stdout.split()
        assert len(nets) == 1, f"project {self.name} has networks {nets}"
        return nets[0]

    def client(self, step: str, timeout_s: float = 120, **args) -> dict:
        """tests/docker/client.py <step> in a container of the image on the project's network."""
        out = run("docker", "run", "--rm", "--network", self.network(), "--label", f"{PROJECT_LABEL}={self.name}",
                  "-v", f"{CLIENT}:/client/client.py:ro", IMAGE, "python", "/client/client.py", step,
                  json.dumps(args), timeout=timeout_s)
        return json.loads(out.stdout.strip().splitlines()[-1])

    def remove_everything(self) -> None:
        """`down -v`, then whatever still carries the project's label (client containers too)."""
        self.compose("--profile", "dev", "--profile", "postgres", "--profile", "failover", "down", "-v",
                     "--remove-orphans", "--timeout", "5",
                     timeout=180)
        label = f"label={PROJECT_LABEL}={self.name}"
        for kind, ls in (("container", ["docker", "ps", "-aq"]), ("network", ["docker", "network", "ls", "-q"]),
                         ("volume", ["docker", "volume", "ls", "-q"])):
            ids = run(*ls, "--filter", label).stdout.split()
            if ids:
                run("docker", kind, "rm", "-f", *ids) if kind != "network" else run("docker", "network", "rm", *ids)

    def leftovers(self) -> list[str]:
        label = f"label={PROJECT_LABEL}={self.name}"
        return (run("docker", "ps", "-aq", "--filter", label).stdout.split()
                + run("docker", "network", "ls", "-q", "--filter", label).stdout.split()
                + run("docker", "volume", "ls", "-q", "--filter", label).stdout.split())


@contextlib.contextmanager
def new_project():
    """A Project of its own name; everything it made is removed on exit, and checked gone."""
    volumes = set(run("docker", "volume", "ls", "-q").stdout.split())
    p = Project(f"quivertest{uuid.uuid4().hex[:8]}")
    try:
        yield p
    finally:
        p.remove_everything()
        assert p.leftovers() == [], f"project {p.name} left {p.leftovers()}"
        unlabelled = set(run("docker", "volume", "ls", "-q").stdout.split()) - volumes  # anonymous ones
        assert not unlabelled, f"project {p.name} left anonymous volumes {sorted(unlabelled)}"


@pytest.fixture(scope="module")
def project(image):
    with new_project() as p:
        yield p


@pytest.fixture(scope="session")
def postgres_image(image) -> str:
    """compose.yaml's postgres image: present, pulled, or the stand-in scripts/docker-postgres.sh builds."""
    with open(os.path.join(ROOT, "compose.yaml")) as f:
        name = next(line.split()[1] for line in f if line.strip().startswith("image: postgres"))
    if run("docker", "image", "inspect", name, check=False).returncode != 0:
        run("bash", "scripts/docker-postgres.sh", timeout=900)
    return name


@pytest.fixture
def postgres_project(postgres_image):
    """A project of its own for the postgres profile (the module's `project` keeps SQLite)."""
    with new_project() as p:
        yield p
