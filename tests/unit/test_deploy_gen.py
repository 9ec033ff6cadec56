"""deploy/swarm and deploy/k8s are what `python -m quiver.tools.deploy_gen` makes of compose.yaml,
and the swarm stack keeps the promises its docs make (identity per slot, secrets, policies)."""

import pathlib
import shutil
import subprocess

import pytest
import yaml

from quiver.tools import deploy_gen

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _stack() -> dict:
    return yaml.safe_load((ROOT / "deploy/swarm/stack.yaml").read_text())


def test_committed_files_are_the_generators_output():
    files = deploy_gen.generate(str(ROOT))
    assert {"deploy/swarm/stack.yaml", "deploy/k8s/broker.yaml", "deploy/k8s/kustomization.yaml"} <= set(files)
    stale = [rel for rel, text in files.items() if (ROOT / rel).read_text() != text]
    assert not stale, f"run: python -m quiver.tools.deploy_gen   (differs: {stale})"
    assert deploy_gen.main(["--check", "--root", str(ROOT)]) == 0


def test_check_reports_a_stale_file(tmp_path):
    (tmp_path / "compose.yaml").write_text((ROOT / "compose.yaml").read_text())
    assert deploy_gen.main(["--root", str(tmp_path)]) == 0           # writes them all
    assert deploy_gen.main(["--check", "--root", str(tmp_path)]) == 0
    stack = tmp_path / "deploy/swarm/stack.yaml"
    stack.write_text(stack.read_text().replace("replicas: 3", "replicas: 2", 1))
    assert deploy_gen.main(["--check", "--root", str(tmp_path)]) == 1


def test_settings_follow_compose(tmp_path):
    """A setting changed in compose.yaml reaches both orchestrators."""
    compose = (ROOT / "compose.yaml").read_text().replace('QUIVER_METRICS_LISTEN: "0.0.0.0:9303"',
                                                          'QUIVER_METRICS_LISTEN: "0.0.0.0:9403"')
    (tmp_path / "compose.yaml").write_text(compose)
    files = deploy_gen.generate(str(tmp_path))
    assert "0.0.0.0:9403" in yaml.safe_load(files["deploy/swarm/stack.yaml"])["services"]["filter"]["environment"][
        "QUIVER_METRICS_LISTEN"]
    assert "containerPort: 9403" in files["deploy/k8s/filter.yaml"]


def test_every_compose_service_is_deployed():
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]
    built = {n for n, s in compose.items() if "build" in s and not s.get("profiles")}
    assert {p.base for p in deploy_gen.PARTS} == built
    kafka = yaml.safe_load((ROOT / "deploy/swarm/kafka.yaml").read_text())
    modules = {s["command"][-1].split("python -m ")[1].split()[0]
               for s in [*_stack()["services"].values(), *kafka["services"].values()]}
    assert modules == {deploy_gen.module(compose[n]) for n in built}


def test_replicas_keep_an_identity_per_slot():
    svcs = _stack()["services"]
    for name in ("namesrv", "broker"):
        s = svcs[name]
        assert s["hostname"] == f"{name}-{{{{.Task.Slot}}}}"
        assert s["deploy"]["replicas"] == 3 and s["deploy"]["update_config"]["order"] == "stop-first"
        assert _stack()["volumes"][s["volumes"][0]["source"]]["name"] == "{{.Service.Name}}-{{.Task.Slot}}"
    b = svcs["broker"]["environment"]
    assert b["QUIVER_ADVERTISE"] == "broker-{{.Task.Slot}}:10911" and b["QUIVER_BROKER_ID"] == "{{.Task.Slot}}"
    assert b["QUIVER_AUTO_FAILOVER"] == "true" and b["QUIVER_NAMESRV"] == "namesrv-1:9876;namesrv-2:9876;namesrv-3:9876"
    n = svcs["namesrv"]["environment"]
    assert n["QUIVER_CONTROLLER"] == "true" and n["QUIVER_CONTROLLER_RAFT"] == "namesrv-{{.Task.Slot}}:9877"


def test_secrets_policies_and_network():
    stack = _stack()
    assert all(s == {"external": True} for s in stack["secrets"].values())
    assert stack["networks"]["quiver"]["driver"] == "overlay"
    for name, s in stack["services"].items():
        d = s["deploy"]
        assert d["endpoint_mode"] == "dnsrr", name
        for policy in (d["update_config"], d["rollback_config"]):
            assert policy["parallelism"] == 1 and policy["order"] in ("stop-first", "start-first")
            assert policy["failure_action"] in ("rollback", "pause")
        assert s["healthcheck"]["test"][:2] == ["CMD", "quiver"] and "ping" in s["healthcheck"]["test"]
        assert all(sec["mode"] == 0o400 for sec in s["secrets"])
        # keys only as mounted secrets: nothing secret in a setting, no admin token
        assert "QUIVER_ADMIN_TOKEN" not in s["environment"] and "QUIVER_CREDENTIALS" not in s["environment"]
    admin = {n for n, s in stack["services"].items() if any(x["source"] == "quiver-admin-key" for x in s["secrets"])}
    server = {n for n, s in stack["services"].items() if any(x["source"] == "quiver-server-key" for x in s["secrets"])}
    assert admin == server == set(stack["services"])   # every one holds an auth dir (not the Kafka gateway)
    kafka = yaml.safe_load((ROOT / "deploy/swarm/kafka.yaml").read_text())["services"]["kafka"]
    assert [x["source"] for x in kafka["secrets"]] == ["quiver-kafka-key"]


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason=".ci/run installs docker-compose")
def test_compose_schema_accepts_the_stack():
    """docker-compose knows the v3 schema (deploy, secrets, long port syntax) `docker stack` reads."""
    out = subprocess.run(["docker-compose", "-f", "deploy/swarm/stack.yaml", "-f", "deploy/swarm/kafka.yaml",
                          "config", "-q"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
