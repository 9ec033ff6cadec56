"""The new `quiver` verbs as a user runs them: `python -m quiver.tools.cli` as its own process
against a real name server and broker (processes on loopback, stopped by PID by make_cluster)."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from quiver.client.admin import Admin

pytestmark = pytest.mark.timeout(240)


def quiver(namesrv: str, *args, input=None, timeout=60):
    return subprocess.run([sys.executable, "-m", "quiver.tools.cli", "--namesrv", namesrv, *map(str, args)],
                          capture_output=True, text=True, input=input, timeout=timeout,
                          env={**os.environ, "NO_COLOR": "1"})


def as_json(namesrv: str, *args, code: int = 0, input=None):
    out = quiver(namesrv, *args, "-o", "json", input=input)
    assert out.returncode == code, out.stdout + out.stderr
    return json.loads(out.stdout)


@pytest.fixture
def ns(cluster):
    return cluster.namesrv


def test_topic_and_msg_verbs_over_processes(ns):
    assert as_json(ns, "topic", "create", "CliOrders", "--queues", "2")
    sent = as_json(ns, "msg", "send", "--topic", "CliOrders", "--file", "-", "--props", "region=eu", "--keys", "o-1",
                   input="order one")
    bulk = as_json(ns, "msg", "send", "--topic", "CliOrders", "--body", "bulk", "--count", "5")
    assert bulk["sent"] == 5
    status = as_json(ns, "topic", "status", "CliOrders")
    assert status["messages"] == 6 and all(q["last_store_time"] for q in status["queues"] if q["max_offset"])
    got = as_json(ns, "msg", "get", "--topic", "CliOrders", "--broker", sent["broker"], "--queue", sent["queue_id"],
                  "--offset", sent["queue_offset"])["messages"][0]
    assert got["body"] == "order one" and got["properties"]["region"] == "eu"
    missing = quiver(ns, "msg", "get", "--topic", "CliOrders", "--broker", sent["broker"], "--queue", 0,
                     "--offset", 999)
    assert missing.returncode == 1 and "no message" in missing.stderr
    table = quiver(ns, "topic", "status", "CliOrders")
    assert table.returncode == 0 and "6 message(s) held" in table.stdout and "\x1b[" not in table.stdout

    assert as_json(ns, "topic", "purge", "CliOrders", "--yes")
    assert as_json(ns, "topic", "status", "CliOrders")["messages"] == 0
    assert quiver(ns, "topic", "delete", "CliOrders").returncode == 0
    gone = quiver(ns, "topic", "delete", "CliOrders")
    assert gone.returncode == 1 and "does not exist" in gone.stderr
    down = quiver("127.0.0.1:1", "topic", "list")
    assert down.returncode == 3 and down.stderr.startswith("error:")


def test_msg_tail_follows_until_ctrl_c(ns):
    Admin(namesrv=ns).create_topic("CliTail", queues=2)
    proc = subprocess.Popen([sys.executable, "-m", "quiver.tools.cli", "--namesrv", ns, "msg", "tail", "--topic",
                             "CliTail", "-o", "json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        lines = []
        while len(lines) < 3 and time.monotonic() < deadline:
            as_json(ns, "msg", "send", "--topic", "CliTail", "--body", f"t{len(lines)}")
            time.sleep(0.5)     # tail starts at the end: messages sent before it is ready are not shown
            if proc.poll() is not None:
                break
            lines = _ready_lines(proc, lines)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    bodies = [json.loads(line)["body"] for line in (out.splitlines() + lines) if line.strip()]
    assert proc.returncode == 0, err
    assert len(bodies) >= 1 and all(b.startswith("t") for b in bodies)


def _ready_lines(proc, lines):
    import selectors
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    while sel.select(timeout=0.1):
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
    sel.close()
    return lines


def test_consumer_and_broker_verbs_over_processes(ns):
    Admin(namesrv=ns).create_topic("CliWork", queues=2)
    as_json(ns, "msg", "send", "--topic", "CliWork", "--body", "w", "--count", "6")
    shown = quiver(ns, "consumer", "config", "cli-g")
    assert shown.returncode == 1 and "no stored config" in shown.stderr
    assert "cli-g" not in as_json(ns, "consumer", "list")["groups"]        # showing wrote nothing
    as_json(ns, "consumer", "config", "cli-g", "--retry-max-times", "2", "--create")
    assert as_json(ns, "consumer", "config", "cli-g")["brokers"]["broker-a"]["retry_max_times"] == 2

    plan = as_json(ns, "consumer", "reset", "cli-g", "--topic", "CliWork", "--to", "latest", "--dry-run")
    assert sum(q["new"] for q in plan["queues"]) == 6 and all(q["current"] is None for q in plan["queues"])
    done = as_json(ns, "consumer", "reset", "cli-g", "--topic", "CliWork", "--to", "earliest")
    assert done["online"] is False and {q["offset"] for q in done["queues"]} == {0}
    progress = as_json(ns, "consumer", "progress", "cli-g")
    assert progress["lag"] == 6
    listed = as_json(ns, "consumer", "list")["groups"]["cli-g"]
    assert listed["offsets"] == 2 and listed["config"]["retry_max_times"] == 2

    bad = quiver(ns, "consumer", "resend", "cli-g", "--id", "F" * 32)
    assert bad.returncode == 1 and "nothing resent" in bad.stderr
    assert quiver(ns, "consumer", "delete", "cli-g").returncode == 0
    again = quiver(ns, "consumer", "delete", "cli-g")
    assert again.returncode == 1 and "not known" in again.stderr

    conf = as_json(ns, "broker", "config")
    (name, broker_conf), = conf.items()
    assert broker_conf["broker_name"] == name and "segment_bytes" in broker_conf
    assert as_json(ns, "broker", "clean")["brokers"][name] == 0
    stats = as_json(ns, "stats", "--interval", "0.5", "--topic", "CliWork", "--group", "nobody")
    assert stats["topics"]["CliWork"]["messages"] == 6
    trace = quiver(ns, "msg", "trace", "--id", "0" * 32)
    assert trace.returncode in (1, 3), trace.stderr
