"""deploy/prometheus/alerts.yml: valid for promtool, each alert firing (and staying quiet) as
deploy/prometheus/alerts_test.yml says, a rule that stops firing caught by that test, the
Prometheus config loading the rules, and every metric a rule reads one a service exports."""

import pathlib
import re
import shutil
import subprocess

import pytest
import yaml
from support.exported import broker_namesrv_scheduler

ROOT = pathlib.Path(__file__).resolve().parents[2]
RULES_DIR = ROOT / "deploy" / "prometheus"

needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None,
                                    reason="Debian's prometheus package (promtool) is not installed (.ci/run installs it)")


def _promtool(*args, cwd=RULES_DIR) -> subprocess.CompletedProcess:
    return subprocess.run(["promtool", *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def _alerts() -> list[dict]:
    doc = yaml.safe_load((RULES_DIR / "alerts.yml").read_text())
    return [r for g in doc["groups"] for r in g["rules"]]


@needs_promtool
def test_rules_pass_promtool_check_and_their_unit_tests():
    check = _promtool("check", "rules", "alerts.yml")
    assert check.returncode == 0, check.stdout + check.stderr
    tested = _promtool("test", "rules", "alerts_test.yml")
    assert tested.returncode == 0, tested.stdout + tested.stderr


@needs_promtool
def test_prometheus_config_loads_the_rules():
    out = _promtool("check", "config", "prometheus.yml", cwd=ROOT / "deploy")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout + out.stderr and "alerts.yml" in out.stdout + out.stderr


@needs_promtool
@pytest.mark.parametrize("expr", ["vector(1) == 0", "vector(1)"], ids=["never-fires", "always-fires"])
def test_the_unit_tests_catch_each_rule_that_breaks(expr, tmp_path):
    doc = yaml.safe_load((RULES_DIR / "alerts.yml").read_text())
    for group in doc["groups"]:
        for rule in group["rules"]:
            rule["expr"] = expr
    (tmp_path / "alerts.yml").write_text(yaml.safe_dump(doc))
    shutil.copy(RULES_DIR / "alerts_test.yml", tmp_path)
    out = _promtool("test", "rules", "alerts_test.yml", cwd=tmp_path)
    assert out.returncode != 0
    caught = set(re.findall(r"alertname: (\w+)", out.stdout + out.stderr))
    assert caught == {r["alert"] for r in _alerts()}


def test_every_alert_has_a_runbook_entry():
    runbook = (ROOT / "docs" / "alerts.md").read_text()
    headings = {line[3:].strip() for line in runbook.splitlines() if line.startswith("## ")}
    for rule in _alerts():
        assert rule["alert"] in headings, f"docs/alerts.md has no '## {rule['alert']}'"
        assert rule["annotations"]["runbook"] == f"docs/alerts.md#{rule['alert'].lower()}"
        assert rule["labels"]["severity"] in ("warning", "critical")


def test_rules_read_only_metrics_the_services_export():
    exported = broker_namesrv_scheduler() | {"up"}   # up: Prometheus's own, per scrape target
    used = set()
    for rule in _alerts():
        expr = re.sub(r'"[^"]*"|\[[^\]]*\]', "", rule["expr"])   # label values and ranges
        expr = re.sub(r"\{[^}]*\}", "", expr)                      # label matchers
        for word in re.findall(r"[a-zA-Z_][a-zA-Z0-9_]*", expr):
            if word.startswith("quiver_") or word == "up":
                used.add(word)
    assert {"quiver_consumers_online", "quiver_consumer_lag_messages", "quiver_storage_disk_full_ratio", "up"} <= used
    missing = sorted(used - exported)
    assert not missing, f"alert rules read metrics no service exports: {missing}"
