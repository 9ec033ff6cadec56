"""`quiver consumer ...` against a stub cluster, and the two configuration traps of issue 20:
`consumer config GROUP` without a flag shows (never writes) the stored config, and compose.yaml
gives broker-store QUIVER_METADATA_URL (the postgres profile)."""

import pathlib
import time

import pytest
import yaml

from quiver.client.message import Message, parse_offset_msg_id
from quiver.client.producer import Producer
from quiver.testing import stub_cluster, wait_until
from quiver.wire import requests as rq
from support.cli_runner import StubCli

ROOT = pathlib.Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def stub():
    with stub_cluster() as c:
        cli = StubCli(c)
        cli.json("topic", "create", "Work", "--queues", "2")
        cli.json("msg", "send", "--topic", "Work", "--body", "w", "--count", "8")
        yield c, cli


def test_config_without_flags_shows_and_never_writes(stub):
    c, qcli = stub
    res = qcli("consumer", "config", "shown-only")
    assert res.exit_code == 1 and "no stored config" in res.stderr
    assert "shown-only" not in c.broker().metadata.groups          # the trap: it used to store 16
    assert qcli.json("consumer", "config", "shown-only", "--retry-max-times", "3", "--create")["brokers"]["broker-a"] == {
        "retry_max_times": 3, "consume_enable": True}
    again = qcli.json("consumer", "config", "shown-only")
    assert again["brokers"]["broker-a"]["retry_max_times"] == 3     # shown as stored, not reset to 16
    assert c.broker().metadata.groups["shown-only"]["retry_max_times"] == 3


def test_list_and_delete(stub):
    c, qcli = stub
    qcli.json("consumer", "config", "listed", "--retry-max-times", "5", "--create")
    qcli.json("consumer", "reset", "listed", "--topic", "Work", "--to", "latest")
    groups = qcli.json("consumer", "list")["groups"]
    assert groups["listed"] == {"brokers": ["broker-a"], "config": {"retry_max_times": 5, "consume_enable": True},
                                "offsets": 2, "online": 0}
    res = qcli("consumer", "delete", "listed")
    assert res.exit_code == 0 and "deleted group listed on broker-a" in res.stdout
    assert "listed" not in qcli.json("consumer", "list")["groups"]
    assert not any(k[0] == "listed" for k in c.broker().metadata.offsets)
    gone = qcli("consumer", "delete", "listed")
    assert gone.exit_code == 1 and "not known to any broker" in gone.stderr


def test_reset_to_earliest_latest_offset_time_and_dry_run(stub):
    _, qcli = stub
    late = qcli.json("consumer", "reset", "resetter", "--topic", "Work", "--to", "latest", "--create")
    assert late["online"] is False and sum(q["offset"] for q in late["queues"]) == 8
    plan = qcli.json("consumer", "reset", "resetter", "--topic", "Work", "--to", "earliest", "--dry-run")
    assert plan["dry_run"] and [q["new"] for q in plan["queues"]] == [0, 0]
    assert sum(q["current"] for q in plan["queues"]) == 8           # unchanged by the dry run
    assert sum(q["current"] for q in qcli.json("consumer", "reset", "resetter", "--topic", "Work", "--to",
                                               "earliest", "--dry-run")["queues"]) == 8
    one = qcli.json("consumer", "reset", "resetter", "--topic", "Work", "--to", "offset:1")
    assert [q["offset"] for q in one["queues"]] == [1, 1]
    future = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() + 3600))   # read as UTC
    by_time = qcli.json("consumer", "reset", "resetter", "--topic", "Work", "--to", future)
    assert sum(q["offset"] for q in by_time["queues"]) == 8          # nothing stored after it: the end
    text = qcli("consumer", "reset", "resetter", "--topic", "Work", "--timestamp", "0")
    assert "group resetter is not online: offsets stored" in text.stdout


def test_progress_of_an_unknown_group_exits_1(stub):
    _, qcli = stub
    assert qcli("consumer", "progress", "nobody-here").exit_code == 1
    qcli.json("consumer", "reset", "progressing", "--topic", "Work", "--to", "offset:2", "--create")
    doc = qcli.json("consumer", "progress", "progressing")
    assert doc["lag"] == 4 and {r["topic"] for r in doc["rows"]} == {"Work"}


def _dead_letter(c, group: str, body: bytes) -> str:
    """A message sent to Work and straight to %DLQ%<group> (delay level -1, as a consumer does)."""
    with c.client(Producer, "dlq-pg") as p:
        sent = p.send(Message("Work", body))
    _, phys = parse_offset_msg_id(sent.offset_msg_id)
    c.network.call(c.broker_addrs["broker-a"], rq.ConsumerSendMsgBack(group=group, offset=phys, delay_level=-1))
    return sent.msg_id


def test_dlq_and_resend_of_unknown_ids_exit_1_resending_nothing(stub):
    c, qcli = stub
    assert qcli("consumer", "dlq", "dead-g").exit_code == 1
    assert qcli("consumer", "resend", "dead-g").exit_code == 1
    origin = _dead_letter(c, "dead-g", b"poison")
    assert wait_until(lambda: qcli("consumer", "dlq", "dead-g").exit_code == 0, 5)
    letters = qcli.json("consumer", "dlq", "dead-g")["messages"]
    assert [m["properties"]["DLQ_ORIGIN_MESSAGE_ID"] for m in letters] == [origin]
    before = qcli.json("topic", "status", "Work")["messages"]
    bad = qcli("consumer", "resend", "dead-g", "--id", origin, "--id", "F" * 32)
    assert bad.exit_code == 1 and "F" * 32 in bad.stderr and "nothing resent" in bad.stderr
    assert qcli.json("topic", "status", "Work")["messages"] == before
    done = qcli.json("consumer", "resend", "dead-g", "--id", origin)
    assert [r["topic"] for r in done["resent"]] == ["Work"]
    assert qcli.json("topic", "status", "Work")["messages"] == before + 1


def test_compose_gives_broker_store_the_metadata_url():
    """The README's `QUIVER_METADATA_URL=... docker compose --profile postgres up` reaches the brokers."""
    services = yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]
    env = services["broker-store"]["environment"]
    assert env["QUIVER_METADATA_URL"].startswith("${QUIVER_METADATA_URL")
    assert "postgres" in services and "postgres" in services["postgres"]["profiles"]
