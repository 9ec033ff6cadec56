"""deploy/prometheus.yml and deploy/grafana-dashboard.json (not run here): valid, scraping
exactly the metrics ports compose.yaml serves, and charting only metrics a service's collector
exports (never a deprecated name)."""

import json
import pathlib
import re

import yaml
from support.exported import broker_namesrv_scheduler

from quiver_broker.metrics import DEPRECATED

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _compose_metrics_ports() -> set[int]:
    services = yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]
    return {int(s["environment"]["QUIVER_METRICS_LISTEN"].rsplit(":", 1)[1])
            for s in services.values() if "QUIVER_METRICS_LISTEN" in (s.get("environment") or {})}


def test_prometheus_scrapes_every_metrics_port():
    doc = yaml.safe_load((ROOT / "deploy/prometheus.yml").read_text())
    ports = {sd["port"] for job in doc["scrape_configs"] for sd in job["dns_sd_configs"]}
    assert ports == _compose_metrics_ports() == set(range(9301, 9309))
    assert all(job["job_name"].startswith("quiver-") for job in doc["scrape_configs"])


def test_grafana_dashboard_charts_exported_metrics():
    dash = json.loads((ROOT / "deploy/grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 15 and len({p["id"] for p in dash["panels"]}) == len(dash["panels"])
    names = {m for e in exprs for m in re.findall(r"quiver_[a-z_]+", e)}
    missing = sorted(names - broker_namesrv_scheduler())   # what the collectors serve, not their source
    assert not missing, f"charted but not exported: {missing}"
    for needed in ("quiver_messages_in_total", "quiver_consumer_lag_messages", "quiver_send_latency_seconds_bucket",
                   "quiver_storage_disk_ratio", "quiver_consumers_online", "quiver_commitlog_max_offset_bytes"):
        assert needed in names
    assert not names & {old for old, _ in DEPRECATED}, "the dashboard charts a deprecated name"
