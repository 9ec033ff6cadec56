"""compose.yaml + compose.secure.yaml on a real Docker engine: auth on, as the README says.

The one-shot auth-init makes the keys into the quiver-auth volume, every service comes up
healthy with its service key (healthchecks with the admin key), a client container given the
admin key runs every feature once (tests/docker/client.py traffic), and the same client
without a key gets no connection.
"""

import importlib.util
import json
import pathlib
import subprocess

import pytest

# this directory's conftest, by path ("conftest" on sys.path is tests/conftest.py)
_spec = importlib.util.spec_from_file_location("quiver_docker_support", pathlib.Path(__file__).with_name("conftest.py"))
_support = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_support)
CLIENT, IMAGE, PROJECT_LABEL, Project, new_project, run = (_support.CLIENT, _support.IMAGE, _support.PROJECT_LABEL,
                                                           _support.Project, _support.new_project, _support.run)

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(600)]

ONE = {"namesrv": 1, "broker-store": 1, "filter": 1, "scheduler": 1, "txn-checker": 1}


class SecureProject(Project):
    def compose(self, *args, timeout: float = 300) -> subprocess.CompletedProcess:
        return run(*self.cmd, "-f", "compose.yaml", "-f", "compose.secure.yaml", "-p", self.name, *args,
                   timeout=timeout, env=self.env)

    def secure_client(self, step: str, credentials: bool = True, **args) -> subprocess.CompletedProcess:
        keys = ["-v", f"{self.name}_quiver-auth:/auth:ro", "-e", "QUIVER_CREDENTIALS=/auth/admin.key"] \
            if credentials else []
        return run("docker", "run", "--rm", "--network", self.network(), "--label", f"{PROJECT_LABEL}={self.name}",
                   *keys, "-v", f"{CLIENT}:/client/client.py:ro", IMAGE, "python", "/client/client.py", step,
                   json.dumps(args), timeout=180, check=False)


@pytest.fixture(scope="module")
def secure(image):
    with new_project() as p:
        p.__class__ = SecureProject
        p.up()
        p.wait_healthy(ONE, timeout_s=180)
        yield p


def test_every_feature_with_auth_on(secure):
    out = secure.secure_client("traffic", topic="SecureOrders")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["send"]["ok"], result
    for check in ("consume", "tags", "key", "msgid", "sql92", "delay", "transaction"):
        assert result[check]["ok"], (check, result[check])
    assert len(result["sql92"]["bodies"]) == 10


def test_a_client_without_a_key_gets_no_connection(secure):
    out = secure.secure_client("brokers", credentials=False)
    assert out.returncode != 0
    assert "auth on; pass credentials" in out.stdout + out.stderr


def test_keys_survive_down_and_up(secure):
    """The auth-init keeps the keys it made: after down + up the same admin key still works."""
    before = secure.compose("run", "--rm", "--no-deps", "auth-init", "cat", "/auth/server.key").stdout
    secure.compose("down", "--timeout", "5")
    secure.up()
    secure.wait_healthy(ONE, timeout_s=180)
    after = secure.compose("run", "--rm", "--no-deps", "auth-init", "cat", "/auth/server.key").stdout
    assert before and before == after
    out = secure.secure_client("brokers")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
