"""`quiver` verbs that must not hide, skip or misroute data, and exit codes a script can trust:
each verb run as its own process against a real name server and broker on loopback."""

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from quiver.client.access import broker_access
from quiver.client.admin import Admin
from quiver.tools.local import free_port

pytestmark = pytest.mark.timeout(300)


def quiver(namesrv: str | None, *args, input=None, cwd=None, env=None, timeout=90):
    argv = [sys.executable, "-m", "quiver.tools.cli"] + (["--namesrv", namesrv] if namesrv else [])
    base = {k: v for k, v in os.environ.items() if k not in ("QUIVER_NAMESRV", "QUIVER_DATA_DIR")}
    return subprocess.run(argv + [str(a) for a in args], capture_output=True, text=True, input=input, cwd=cwd,
                          timeout=timeout, env={**base, "NO_COLOR": "1", **(env or {})})


def as_json(namesrv, *args, code: int = 0):
    out = quiver(namesrv, *args, "-o", "json")
    assert out.returncode == code, out.stdout + out.stderr
    return json.loads(out.stdout)


def _send(ns: str, topic: str, n: int) -> None:
    assert as_json(ns, "msg", "send", "--topic", topic, "--body", "m", "--count", n)["sent"] == n


def _config(admin: Admin, topic: str) -> dict:
    (conf,) = [t[topic] for t in admin.topic_configs().values()]
    return conf


def test_shrinking_queues_that_hold_a_backlog_is_refused_and_the_safe_way_works(cluster):
    ns, admin = cluster.namesrv, Admin(namesrv=cluster.namesrv)
    try:
        as_json(ns, "topic", "create", "Shrink", "--queues", 8)
        _send(ns, "Shrink", 16)                                   # round robin: 2 per queue
        admin.reset_offset("billing", "Shrink", offset=0)          # billing has read nothing yet

        refused = quiver(ns, "topic", "create", "Shrink", "--queues", 2)
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert "queue 2: billing" in refused.stderr and "queue 7: billing" in refused.stderr
        assert "write queues" in refused.stderr
        assert _config(admin, "Shrink")["read"] == 8              # nothing changed

        step = quiver(ns, "topic", "shrink", "Shrink", "--queues", 2, "-o", "json")
        assert step.returncode == 1 and "billing" in step.stderr
        assert (_config(admin, "Shrink")["write"], _config(admin, "Shrink")["read"]) == (2, 8)
        _send(ns, "Shrink", 4)                                    # new messages land on queues 0-1 only
        status = as_json(ns, "topic", "status", "Shrink")["queues"]
        assert [q["max_offset"] for q in status] == [4, 4, 2, 2, 2, 2, 2, 2]

        admin.reset_offset("billing", "Shrink", offset=2)          # billing drained queues 2-7
        done = as_json(ns, "topic", "shrink", "Shrink", "--queues", 2, "--wait", 30)
        assert done["read_done"] is True
        assert (_config(admin, "Shrink")["write"], _config(admin, "Shrink")["read"]) == (2, 2)

        as_json(ns, "topic", "create", "Unread", "--queues", 4)
        _send(ns, "Unread", 8)
        nobody = quiver(ns, "topic", "create", "Unread", "--queues", 1)
        assert nobody.returncode == 1 and "no group" in nobody.stderr
        forced = as_json(ns, "topic", "create", "Unread", "--queues", 1, "--force")
        assert forced["broker-a"]["read"] == 1
    finally:
        admin.shutdown()


def test_reset_to_a_bare_number_is_a_time_never_an_offset(cluster):
    ns = cluster.namesrv
    as_json(ns, "topic", "create", "Times", "--queues", 2)
    _send(ns, "Times", 6)
    time.sleep(1.2)                         # the cut is on a whole second, for the 10-digit form
    cut_s = int(time.time()) + 1
    time.sleep(max(0.0, cut_s - time.time()) + 0.1)
    _send(ns, "Times", 4)

    for when in (str(cut_s * 1000), str(cut_s)):                  # epoch ms (13 digits), epoch s (10)
        plan = as_json(ns, "consumer", "reset", "billing", "--topic", "Times", "--to", when, "--dry-run")
        assert sum(q["new"] for q in plan["queues"]) == 6, plan   # the 4 sent after the cut stay to consume
        assert all(q["new_time"] >= cut_s * 1000 for q in plan["queues"] if q["new"] < q["max_offset"])
    table = quiver(ns, "consumer", "reset", "billing", "--topic", "Times", "--to", str(cut_s * 1000), "--dry-run")
    assert table.returncode == 0 and "new_time" in table.stdout
    by_offset = as_json(ns, "consumer", "reset", "billing", "--topic", "Times", "--to", "offset:1", "--dry-run")
    assert [q["new"] for q in by_offset["queues"]] == [1, 1] and all(q["new_time"] for q in by_offset["queues"])
    assert as_json(ns, "consumer", "reset", "billing", "--topic", "Times", "--to-offset", 1, "--dry-run") == by_offset
    odd = quiver(ns, "consumer", "reset", "billing", "--topic", "Times", "--to", "1200", "--dry-run")
    assert odd.returncode == 2 and "offset:N" in odd.stderr


def test_an_unknown_group_is_not_created_by_reset_config_or_delete(cluster):
    ns = cluster.namesrv
    as_json(ns, "topic", "create", "Groups", "--queues", 2)
    _send(ns, "Groups", 4)
    for argv in (("reset", "nobody", "--topic", "Groups", "--to", "earliest"),
                 ("config", "nobody", "--retry-max-times", 3), ("delete", "nobody")):
        out = quiver(ns, "consumer", *argv)
        assert out.returncode == 1 and "nobody" in out.stderr, (argv, out.stdout, out.stderr)
    assert "nobody" not in as_json(ns, "consumer", "list")["groups"]
    as_json(ns, "consumer", "reset", "nobody", "--topic", "Groups", "--to", "earliest", "--create")
    assert as_json(ns, "consumer", "list")["groups"]["nobody"]["offsets"] == 2
    as_json(ns, "consumer", "config", "nobody", "--retry-max-times", 3)     # known now: no --create needed


EXIT_CODES = [
    (("topic", "create", "bad topic!"), 2),
    (("topic", "status", "bad topic!"), 2),
    (("msg", "send", "--topic", "Codes", "--body", ""), 2),
    (("msg", "send", "--topic", "Codes", "--file", "/nonexistent/body"), 2),
    (("msg", "view", "--id", "garbage"), 2),
    (("msg", "send", "--topic", "SCHEDULE_TOPIC_XXXX", "--body", "x"), 2),      # refused by the SDK, unsent
    (("msg", "send", "--topic", "Codes", "--body", "x", "--props", "UNIQ_KEY=1"), 2),
    (("msg", "cancel", "--id", "0" * 31, "--topic", "Codes"), 2),
    (("topic", "create", "Codes", "--broker", "nope"), 2),
    (("msg", "get", "--topic", "Codes", "--broker", "nope", "--queue", 0, "--offset", 0), 2),
    (("broker", "status", "--broker", "nope"), 2),
    (("--credentials", "/nonexistent/user.key", "topic", "list"), 2),
    (("acl", "grant", "frank", "--resource", "topic:Codes", "--actions", "PUB,FLY"), 2),
    (("consumer", "progress", "bad group!"), 2),
    (("consumer", "reset", "g", "--topic", "Codes", "--to", "someday"), 2),
    (("topic", "list", "-o", "yaml"), 2),
    (("topic", "status", "NoSuchTopic"), 1),
    (("msg", "query", "--topic", "Codes", "--key", "none"), 1),
    (("consumer", "dlq", "nobody"), 1),
    (("topic", "delete", "NoSuchTopic"), 1),
    (("topic", "list"), 0),
]


def test_exit_codes_per_verb(cluster):
    admin = Admin(namesrv=cluster.namesrv)
    admin.create_topic("Codes", queues=1)
    admin.shutdown()
    for argv, code in EXIT_CODES:
        out = quiver(cluster.namesrv, *argv)
        assert out.returncode == code, (argv, out.stdout, out.stderr)
        if code:
            assert out.stderr.strip() and "SYSTEM_ERROR" not in out.stderr, argv


def test_a_declined_prompt_exits_1_and_an_outage_exits_3(cluster):
    ns = cluster.namesrv
    as_json(ns, "topic", "create", "Prompted", "--queues", 1)
    _send(ns, "Prompted", 2)
    for answer in ("n\n", ""):                                    # "no", and no answer at all
        out = quiver(ns, "topic", "purge", "Prompted", input=answer)
        assert out.returncode == 1 and "nothing changed" in out.stderr, out.stderr
    assert as_json(ns, "topic", "status", "Prompted")["messages"] == 2
    down = quiver("127.0.0.1:1", "topic", "list")
    assert down.returncode == 3 and down.stderr.startswith("error:")
    helped = quiver(None, "--help")
    assert "3 server or connection" in helped.stdout and "prompt declined" in helped.stdout


def test_version_in_the_cli_status_and_metrics(make_cluster):
    import quiver as sdk
    c = make_cluster(broker_args=("--metrics-listen", f"127.0.0.1:{free_port()}"))
    out = quiver(None, "--version")
    assert out.returncode == 0 and out.stdout.strip() == f"quiver {sdk.__version__}" and sdk.__version__
    admin = Admin(namesrv=c.namesrv)
    try:
        (addr,) = broker_access(admin).all_broker_addrs().values()
        st = admin.status(addr)
    finally:
        admin.shutdown()
    assert st["version"] == sdk.__version__
    body = urllib.request.urlopen(f"http://{st['metrics']}/metrics", timeout=10).read().decode()
    assert f'quiver_build_info{{version="{sdk.__version__}"}} 1.0' in body


COMPOSE = """
services:
  namesrv:
    build: .
    command: ["python", "-m", "quiver_namesrv"]
    environment:
      QUIVER_LISTEN: "0.0.0.0:{ns}"
  broker-store:
    build: .
    command: ["python", "-m", "quiver_broker"]
    environment:
      QUIVER_LISTEN: "0.0.0.0:{broker}"
      QUIVER_METRICS_LISTEN: "0.0.0.0:{metrics}"
      QUIVER_NAMESRV: "namesrv:{ns}"
      QUIVER_DATA_DIR: "/data/broker"
      QUIVER_BROKER_NAME: "auto"
    depends_on: [namesrv]
"""


def _stop_state(data: str) -> None:
    try:
        with open(os.path.join(data, "quiver-up.json")) as f:
            state = json.load(f)
    except OSError:
        return
    for svc in state["services"]:
        try:
            os.kill(svc["pid"], 9)
        except ProcessLookupError:
            pass


def test_up_refuses_a_taken_port_and_verbs_find_the_cluster_it_started(tmp_path):
    ns_port, broker_port, metrics_port = free_port(), free_port(), free_port()
    compose = tmp_path / "compose.yaml"
    compose.write_text(COMPOSE.format(ns=ns_port, broker=broker_port, metrics=metrics_port))
    data = tmp_path / "data"
    squatter = socket.socket()
    squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    squatter.bind(("127.0.0.1", ns_port))
    squatter.listen()
    try:
        refused = quiver(None, "up", "--compose", compose, "--data-dir", data, "--detach", cwd=tmp_path)
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert f"port {ns_port}" in refused.stderr and f"pid {os.getpid()}" in refused.stderr
        assert "--free-ports" in refused.stderr
        assert not (data / "logs").exists() and not (data / "quiver-up.json").exists()   # nothing started

        up = quiver(None, "up", "--compose", compose, "--data-dir", data, "--detach", "--free-ports", cwd=tmp_path)
        assert up.returncode == 0, up.stdout + up.stderr
        state = json.loads((data / "quiver-up.json").read_text())
        assert f"export QUIVER_NAMESRV='{state['namesrv']}'" in up.stdout
        assert state["namesrv"] != f"127.0.0.1:{ns_port}"
        made = quiver(None, "topic", "create", "FoundByState", "--queues", 1, cwd=tmp_path)   # ./data's state
        assert made.returncode == 0, made.stdout + made.stderr
        elsewhere = quiver(None, "topic", "list", "-o", "json", cwd="/", env={"QUIVER_DATA_DIR": str(data)})
        assert "FoundByState" in json.loads(elsewhere.stdout)["topics"]
        import quiver as sdk
        st = quiver(None, "status", "--data-dir", data)
        assert st.returncode == 0 and st.stdout.count(f"version {sdk.__version__}") == 2, st.stdout
        assert quiver(None, "down", "--data-dir", data).returncode == 0
    finally:
        squatter.close()
        _stop_state(str(data))
