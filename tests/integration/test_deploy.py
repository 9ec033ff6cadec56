"""compose.yaml is valid, matches the service folders, and `quiver up` runs it locally."""

import json
import os
import shutil
import subprocess
import sys
import time

import pytest
import yaml

from quiver import Admin, Message, Producer, PullConsumer
from quiver.tools import compose
from quiver.tools.local import LocalCluster

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMPOSE = os.path.join(ROOT, "compose.yaml")
FOLDER_OF_MODULE = {"quiver_namesrv": "namesrv", "quiver_broker": "broker-store", "quiver_filter": "filter",
                    "quiver_scheduler": "scheduler", "quiver_txn": "txn-checker", "quiver_console": "console",
                    "quiver_proxy": "proxy", "quiver_kafka": "kafka"}


def test_docker_compose_config_accepts_the_file():
    exe = shutil.which("docker-compose")
    if exe is None:
        pytest.skip("docker-compose is not installed (.ci/run installs Debian's package)")
    for args in ([], ["--profile", "postgres"], ["--profile", "spark"], ["--profile", "ha"], ["--profile", "failover"]):
        out = subprocess.run([exe, "-f", COMPOSE, *args, "config"], capture_output=True, text=True, cwd=ROOT)
        assert out.returncode == 0, out.stderr


def test_every_service_folder_has_a_compose_service_and_back():
    with open(COMPOSE) as f:
        services = yaml.safe_load(f)["services"]
    ours = {name: svc for name, svc in services.items() if "build" in svc and not svc.get("profiles")}
    folders = {d for d in os.listdir(os.path.join(ROOT, "services")) if d != "__pycache__" and not d.startswith(".")}
    assert set(ours) == folders
    for name, svc in ours.items():
        assert FOLDER_OF_MODULE[svc["command"][2]] == name
        assert "healthcheck" in svc and "quiver" in svc["healthcheck"]["test"]
        assert all(k.startswith("QUIVER_") for k in svc["environment"])


@pytest.mark.parametrize("secure", [False, True], ids=["auth-off", "auth-on"])
def test_quiver_up_scale_status_down_leaves_no_process(tmp_path, secure):
    """With auth on too: the demo's SQL92 (filter server), delay (scheduler), transaction and push
    consumer run over CURVE with the admin key the cluster made."""
    quiver = [sys.executable, "-m", "quiver.tools.cli"]
    data = str(tmp_path / "up")
    out = subprocess.run([*quiver, "up", "--data-dir", data, "--free-ports", "--scale", "broker-store=2",
                          "--demo", "--detach", *(["--secure"] if secure else [])],
                         capture_output=True, text=True, timeout=180, cwd=ROOT)
    if secure:
        quiver += ["--credentials", os.path.join(data, "auth", "admin.key")]
    state = json.load(open(os.path.join(data, "quiver-up.json"))) if out.returncode == 0 else None
    try:
        assert out.returncode == 0, out.stdout + out.stderr
        for line in ("consumer with tag filter 'paid' got 499", "query by key order-42 -> ['order #42']",
                     "(10 messages)", "delivered by the scheduler", "consumer got 1", "push consumer listener"):
            assert line in out.stdout, out.stdout  # the README's first command shows every feature
        roles = [s["role"] for s in state["services"]]
        assert roles.count("broker") == 2 and roles.count("namesrv") == 1
        for svc in state["services"]:   # every service serves /metrics, its URL printed (the console's too)
            assert svc["metrics"] and f"metrics http://{svc['metrics']}/metrics" in out.stdout, svc
        kafka = [s for s in state["services"] if s["role"] == "kafka"]
        if secure:   # the gateway needs SASL users with auth on: left out, saying so
            assert not kafka and "Kafka gateway is not started" in out.stdout, out.stdout
        else:        # Kafka clients get the cluster's topics through the gateway
            from confluent_kafka.admin import AdminClient
            assert f"bootstrap.servers={kafka[0]['url']}" in out.stdout, out.stdout
            meta = AdminClient({"bootstrap.servers": kafka[0]["url"]}).list_topics(timeout=30)
            assert meta.brokers and meta.topics, meta
        st = subprocess.run([*quiver, "status", "--data-dir", data], capture_output=True, text=True, timeout=60)
        assert st.returncode == 0 and st.stdout.count(" UP ") == len(state["services"]), st.stdout
    finally:
        subprocess.run([*quiver, "down", "--data-dir", data], capture_output=True, text=True, timeout=60)
    for svc in (state or {}).get("services", []):
        with pytest.raises(ProcessLookupError):
            os.kill(svc["pid"], 0)


@pytest.mark.slow
def test_three_brokers_spread_and_a_broker_leaving_and_rejoining(tmp_path):
    cluster = LocalCluster(str(tmp_path / "c"))
    specs = [s for s in compose.load(COMPOSE) if s.role in ("namesrv", "broker")]
    overrides = {s.name: {"QUIVER_AUTO_CREATE_TOPICS": "true", "QUIVER_REGISTER_INTERVAL_MS": "500"}
                 for s in specs if s.role == "broker"}
    try:
        compose.start(cluster, specs, {"broker-store": 3}, free_ports=True, overrides=overrides, log=lambda *_: None)
        admin = Admin(namesrv=cluster.namesrv)
        admin.create_topic("Deploy", queues=2)
        brokers = [s for s in cluster.services if s.role == "broker"]
        with Producer("deploy", namesrv=cluster.namesrv, send_timeout=5.0) as p:
            first = [p.send(Message("Deploy", f"a{i}".encode())) for i in range(60)]
            assert {r.broker for r in first} == {"broker-a", "broker-b", "broker-c"}
            brokers[2].stop()
            during = [p.send(Message("Deploy", f"b{i}".encode())) for i in range(60)]
            assert {r.broker for r in during} <= {"broker-a", "broker-b"}
        brokers[2].start()
        cluster.wait()
        with PullConsumer("deploy-c", namesrv=cluster.namesrv, consume_from="first") as c:
            c.subscribe("Deploy")
            got, deadline = [], time.monotonic() + 20
            while len(got) < 120 and time.monotonic() < deadline:
                got += c.poll(0.5)
        assert sorted(m.body for m in got) == sorted([f"a{i}".encode() for i in range(60)]
                                                     + [f"b{i}".encode() for i in range(60)])
        admin.shutdown()
    finally:
        for s in cluster.services:
            if s.alive():
                s.kill()


@pytest.mark.slow
def test_sql92_consumer_through_two_filters_over_three_brokers(tmp_path):
    from quiver import MessageSelector
    from quiver.wire.transport import Transport
    from quiver.wire.codes import RequestCode
    cluster = LocalCluster(str(tmp_path / "f"))
    specs = [s for s in compose.load(COMPOSE) if s.role in ("namesrv", "broker", "filter")]
    overrides = {s.name: {"QUIVER_AUTO_CREATE_TOPICS": "true"} for s in specs if s.role == "broker"}
    try:
        compose.start(cluster, specs, {"broker-store": 3, "filter": 2}, free_ports=True, overrides=overrides,
                      log=lambda *_: None)
        admin = Admin(namesrv=cluster.namesrv)
        admin.create_topic("Sql", queues=4)  # 12 queues: spread over both filters by hash, never all on one
        deadline = time.monotonic() + 30       # filters attach and brokers report them
        while time.monotonic() < deadline:
            if len({a for v in admin.topic_route("Sql")["filter_servers"].values() for a in v}) == 2:
                break
            time.sleep(0.2)
        with Producer("sql", namesrv=cluster.namesrv) as p:
            sent = [p.send(Message("Sql", str(i).encode(), properties={"n": str(i)})) for i in range(90)]
        assert len({r.broker for r in sent}) == 3
        want = sorted(str(i).encode() for i in range(90) if i % 3 == 0)
        with PullConsumer("sql-c", namesrv=cluster.namesrv, consume_from="first") as c:
            c.subscribe("Sql", MessageSelector.sql("n IN ('" + "','".join(str(i) for i in range(0, 90, 3)) + "')"))
            got, deadline = [], time.monotonic() + 30
            while len(got) < len(want) and time.monotonic() < deadline:
                got += c.poll(0.5)
            assert sorted(m.body for m in got) == want
            # both filters serve: one that failed a first pull (still attaching) is avoided for 10 s,
            # then its queues come back to it, so keep the consumer pulling a little longer if needed
            t = Transport()
            filters = [s for s in cluster.services if s.role == "filter"]

            def pulls():
                return {f.name: t.call(f.addr, RequestCode.STATUS).ext["status"]["counters"].get("pulls", 0)
                        for f in filters}
            deadline = time.monotonic() + 20
            while min(pulls().values()) == 0 and time.monotonic() < deadline:
                assert c.poll(0.5) == []   # nothing more, nothing twice
            assert min(pulls().values()) > 0, f"a filter served no pull: {pulls()}"
            t.close()
        admin.shutdown()
    finally:
        for s in cluster.services:
            if s.alive():
                s.kill()
