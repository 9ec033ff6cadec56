"""`quiver topic | msg | broker | cluster | stats` against a stub cluster: what each verb does,
its -o json shape and its exit codes (0 done, 1 nothing there)."""

import json
import time

import pytest

from quiver.testing import stub_cluster
from support.cli_runner import StubCli


@pytest.fixture(scope="module")
def qcli():
    with stub_cluster() as c:
        cli = StubCli(c)
        cli.json("topic", "create", "Orders", "--queues", "2")
        yield cli


def test_topic_create_list_route_status(qcli):
    doc = qcli.json("topic", "create", "Routes", "--queues", "3")
    assert doc["broker-a"]["read"] == doc["broker-a"]["write"] == 3
    assert "Routes" in qcli.json("topic", "list")["topics"]
    route = qcli.json("topic", "route", "Routes")
    assert route["queues"][0]["broker_name"] == "broker-a" and route["queues"][0]["read"] == 3
    table = qcli("topic", "status", "Routes")
    assert table.exit_code == 0 and "0 message(s) held" in table.stdout and "min_offset" in table.stdout


def test_topic_delete_of_a_missing_topic_says_so_and_exits_1(qcli):
    qcli.json("topic", "create", "Doomed", "--queues", "1")
    first = qcli("topic", "delete", "Doomed")
    assert first.exit_code == 0 and "deleted Doomed on broker-a" in first.stdout
    again = qcli("topic", "delete", "Doomed")
    assert again.exit_code == 1 and "does not exist" in again.stderr


def test_msg_send_with_props_keys_count_and_stdin(qcli):
    one = qcli.json("msg", "send", "--topic", "Orders", "--body", "o-1", "--props", "region=eu", "--props",
                    "tier=gold", "--keys", "k-1,k-2", "--tags", "paid")
    assert one["status"] == "SEND_OK" and sorted(one) == ["broker", "msg_id", "offset_msg_id", "queue_id",
                                                          "queue_offset", "status"]
    many = qcli.json("msg", "send", "--topic", "Orders", "--body", "bulk", "--count", "4")
    assert many["sent"] == 4 and len({r["msg_id"] for r in many["results"]}) == 4
    res = qcli("msg", "send", "--topic", "Orders", "--file", "-", "-o", "json", input="from stdin ü")
    assert res.exit_code == 0, res.stderr
    sent = json.loads(res.stdout)
    got = qcli.json("msg", "get", "--topic", "Orders", "--broker", sent["broker"], "--queue", sent["queue_id"],
                    "--offset", sent["queue_offset"])["messages"][0]
    assert got["body"] == "from stdin ü" and got["msg_id"] == sent["msg_id"]
    found = qcli.json("msg", "query", "--topic", "Orders", "--key", "k-2")["messages"]
    assert [m["msg_id"] for m in found] == [one["msg_id"]]
    assert found[0]["properties"]["region"] == "eu" and found[0]["tags"] == "paid"
    view = qcli.json("msg", "view", "--id", one["offset_msg_id"])["messages"][0]
    assert view["body"] == "o-1"


def test_msg_send_delay_level_and_deliver_at_are_scheduled(qcli):
    delayed = qcli.json("msg", "send", "--topic", "Orders", "--body", "later", "--delay-level", "3")
    at = qcli.json("msg", "send", "--topic", "Orders", "--body", "at", "--deliver-at",
                   str(int(time.time() * 1000) + 60_000))
    for sent in (delayed, at):   # parked in the schedule/timer topic, not in Orders yet
        assert sent["status"] == "SEND_OK"
        assert qcli("msg", "query", "--topic", "Orders", "--key", sent["msg_id"]).exit_code == 1
    both = qcli("msg", "send", "--topic", "Orders", "--body", "x", "--delay-level", "1", "--deliver-at", "1")
    assert both.exit_code == 2


def test_msg_get_query_view_of_nothing_exit_1(qcli):
    assert qcli("msg", "get", "--topic", "Orders", "--broker", "broker-a", "--queue", 0, "--offset", 10_000).exit_code == 1
    assert qcli("msg", "query", "--topic", "Orders", "--key", "no-such-key").exit_code == 1
    assert qcli("msg", "view", "--id", "F" * 32, "--topic", "Orders").exit_code == 1
    assert qcli("msg", "view", "--id", "X" * 32, "--topic", "Orders").exit_code == 2   # not a msgId at all


def test_topic_status_counts_and_last_store_time(qcli):
    qcli.json("topic", "create", "Counted", "--queues", "2")
    before = int(time.time() * 1000)
    qcli.json("msg", "send", "--topic", "Counted", "--body", "x", "--count", "6")
    doc = qcli.json("topic", "status", "Counted")
    assert doc["messages"] == 6 and sum(q["max_offset"] for q in doc["queues"]) == 6
    assert all(q["last_store_time"] >= before for q in doc["queues"] if q["max_offset"])


def test_msg_tail_from_earliest_stops_at_count(qcli):
    qcli.json("topic", "create", "Tailed", "--queues", "1")
    qcli.json("msg", "send", "--topic", "Tailed", "--body", "t", "--count", "3")
    res = qcli("msg", "tail", "--topic", "Tailed", "--from", "earliest", "--count", "3", "-o", "json")
    lines = [json.loads(line) for line in res.stdout.splitlines()]
    assert res.exit_code == 0 and [m["queue_offset"] for m in lines] == [0, 1, 2]


def test_topic_purge_drops_messages_keeps_the_topic(qcli):
    qcli.json("topic", "create", "Scratch", "--queues", "2")
    qcli.json("msg", "send", "--topic", "Scratch", "--body", "x", "--count", "5")
    assert qcli("topic", "purge", "Scratch").exit_code == 1          # asked, no answer: aborted
    assert qcli.json("topic", "status", "Scratch")["messages"] == 5
    doc = qcli.json("topic", "purge", "Scratch", "--yes")
    assert doc["broker-a"]["read"] == 2
    assert qcli.json("topic", "status", "Scratch")["messages"] == 0
    assert qcli("topic", "purge", "NeverThere", "--yes").exit_code == 1


def test_cluster_broker_status_config_clean(qcli):
    info = qcli.json("cluster")
    assert "broker-a" in info["brokers"]
    st = qcli.json("broker", "status")
    assert st["broker-a"]["role"] == "broker"
    conf = qcli.json("broker", "config")
    assert conf["broker-a"]["broker_name"] == "broker-a" and conf["broker-a"]["flush"] in ("sync", "async")
    assert qcli("broker", "config", "--broker", "nope").exit_code == 2   # a typo, not an outage
    table = qcli("broker", "config")
    assert "segment_bytes" in table.stdout
    clean = qcli.json("broker", "clean")
    assert clean["brokers"]["broker-a"] == 0


def test_stats_in_rates_from_two_samples(qcli):
    qcli.json("topic", "create", "Rated", "--queues", "1")
    doc = qcli.json("stats", "--interval", "0.3", "--topic", "Rated")
    assert doc["topics"]["Rated"] == {"messages": 0, "in_per_s": 0.0}
    assert set(doc) == {"interval_s", "topics", "groups"}


def test_status_lists_the_stub_services(qcli):
    doc = qcli.json("status")
    assert {s["role"] for s in doc["services"]} == {"namesrv", "broker"}
    assert all(s["up"] for s in doc["services"])
