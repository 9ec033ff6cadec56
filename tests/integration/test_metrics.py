"""Every service's /metrics over HTTP after a known workload, `quiver status --json/-v`, and
`--log-format json`: real processes on loopback, metrics on free ports.

Workload: 30 messages to Obs, all consumed by group obs-g (committed), then 7 more
that nobody consumes; a SQL92 group reads the 37 through the filter server; one
delayed message goes through the scheduler; one transaction is left UNKNOWN and
committed by the txn-checker's check. Counters must equal what was sent
and consumed; lag must equal what Admin.consumer_progress says. The console's
counters must equal the pages loaded from it.
"""

import json
import time
import urllib.error
import urllib.request

import pytest
from support.scrape import parse, value

from quiver import Admin, Message, MessageSelector, Producer, PullConsumer, TransactionState
from quiver.client.transaction_producer import TransactionProducer
from quiver.tools import cli
from quiver.tools.local import free_port, wait_healthy
from quiver.wire.names import HALF_TOPIC

TOPIC, GROUP = "Obs", "obs-g"


def scrape(addr: str) -> dict:
    """name of each sample -> [(labels, value)], over HTTP."""
    with urllib.request.urlopen(f"http://{addr}/metrics", timeout=5) as r:
        assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain")
        return parse(r.read().decode())


def wait_for(fn, what: str, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while True:
        got = fn()
        if got:
            return got
        assert time.monotonic() < deadline, f"no {what} in {timeout} s"
        time.sleep(0.2)


@pytest.fixture
def observed(make_cluster):
    """(cluster, {service name: metrics address}) with every service's metrics on."""
    ports = {name: f"127.0.0.1:{free_port()}" for name in ("namesrv", "broker", "scheduler", "txn", "filter",
                                                           "console")}
    c = make_cluster(namesrv_args=("--metrics-listen", ports["namesrv"], "--log-format", "json"),
                     broker_args=("--metrics-listen", ports["broker"]))
    extra = [c.add_service("scheduler", "quiver_scheduler", "--metrics-listen", ports["scheduler"]),
             c.add_service("txn-checker", "quiver_txn", "--metrics-listen", ports["txn"], "--check-interval-ms", "300",
                           "--transaction-timeout-ms", "300"),
             c.add_service("filter", "quiver_filter", "--metrics-listen", ports["filter"], "--register-interval-ms",
                           "500", data=False),
             c.add_console("--metrics-listen", ports["console"])]
    wait_healthy(extra)
    ports["console_url"] = extra[-1].url
    return c, ports


def _drain(consumer, want: int, timeout: float = 30.0) -> list:
    got, deadline = [], time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        got.extend(consumer.poll(0.3))
    return got


def test_every_service_counts_the_workload(observed, capsys):
    c, ports = observed
    admin = Admin(namesrv=c.namesrv)
    admin.create_topic(TOPIC, queues=2)
    bodies = [f"body-{i}-é".encode() for i in range(37)]
    with Producer("obs-p", namesrv=c.namesrv) as p:
        for i, body in enumerate(bodies[:30]):
            p.send(Message(TOPIC, body, properties={"n": str(i)}))
        with PullConsumer(GROUP, namesrv=c.namesrv, consume_from="first", suspend_ms=200) as consumer:
            consumer.subscribe(TOPIC)
            assert len(_drain(consumer, 30)) == 30
            consumer.commit()
        # no pull of obs-g may still be held when the rest arrive: it would take them
        wait_for(lambda: value(scrape(ports["broker"]), "quiver_held_pulls") == 0, "held pulls drained")
        for i, body in enumerate(bodies[30:], 30):
            p.send(Message(TOPIC, body, properties={"n": str(i)}))
        p.send(Message("ObsDelay", b"later", delay_level=1))

    broker = scrape(ports["broker"])
    assert value(broker, "quiver_messages_in_total", topic=TOPIC) == 37
    assert value(broker, "quiver_throughput_in_bytes_total", topic=TOPIC) == sum(map(len, bodies))
    assert value(broker, "quiver_messages_out_total", topic=TOPIC, consumer_group=GROUP) == 30
    assert value(broker, "quiver_send_latency_seconds_count") >= 38
    assert value(broker, "quiver_pull_latency_seconds_count") >= 1

    # lag: the broker's sample every 2 s, compared with what Admin says now (nothing moves)
    progress = {(r["topic"], r["queue_id"]): r["lag"] for r in admin.consumer_progress(GROUP, [TOPIC])}
    assert sum(progress.values()) == 7

    def lag_matches():   # per group and topic (no --metrics-per-queue): the queues' lags summed
        got = scrape(ports["broker"])
        lag = {l["topic"]: v for l, v in got.get("quiver_consumer_lag_messages", []) if l["consumer_group"] == GROUP}
        return got if lag == {TOPIC: 7} else None
    broker = wait_for(lag_matches, "lag equal to consumer_progress")
    assert value(broker, "quiver_commitlog_max_offset_bytes") > 0 and value(broker, "quiver_topics") >= 1
    assert value(broker, "quiver_consumer_lag_seconds", consumer_group=GROUP, topic=TOPIC) > 0
    assert value(broker, "quiver_consumer_offset", consumer_group=GROUP, topic=TOPIC) == 30
    assert value(broker, "quiver_topic_max_offset", topic=TOPIC) == 37
    assert value(broker, "quiver_message_size_bytes_count") >= 38
    assert value(broker, "quiver_consumers_online", consumer_group=GROUP) == 0   # closed, its offsets kept

    # SQL92 through the filter server: scanned every message, matched what the group got
    with PullConsumer("obs-sql", namesrv=c.namesrv, consume_from="first", suspend_ms=200) as sql:
        sql.subscribe(TOPIC, MessageSelector.sql("n < 10"))
        got = _drain(sql, 10)
    assert len(got) == 10
    filt = wait_for(lambda: (lambda s: s if value(s, "quiver_filter_matched_messages_total") == 10 else None)(
        scrape(ports["filter"])), "filter matched 10")
    assert value(filt, "quiver_filter_scanned_messages_total") >= 37

    sched = wait_for(lambda: (lambda s: s if value(s, "quiver_scheduler_delivered_total") == 1 else None)(
        scrape(ports["scheduler"])), "scheduler delivery")
    assert value(sched, "quiver_scheduler_delivery_lateness_seconds_count") == 1
    txn = _transaction_resolved_by_a_check(c.namesrv, ports)
    ns = scrape(ports["namesrv"])
    assert value(ns, "quiver_namesrv_brokers") == 1
    console = _console_counts_its_pages(ports)

    for samples in (broker, filt, sched, txn, ns, console):
        assert value(samples, "quiver_service_info") == 1
        assert value(samples, "quiver_frames_malformed_total") == 0   # the STATUS counters' own families
        assert value(samples, "process_cpu_seconds_total") is not None   # the default process metrics
        assert all("client" not in label for name in samples for labels, _ in samples[name] for label in labels)
    with urllib.request.urlopen(f"http://{ports['broker']}/", timeout=5) as r:   # an index, not the metrics
        assert r.status == 200 and b'href="/metrics"' in r.read()
    assert _get(f"http://{ports['broker']}/metrics.txt") == 404

    # quiver status --json / -v (no `quiver up` state here: the name server's view)
    assert cli.main(["--namesrv", c.namesrv, "status", "--json", "--data-dir", str(c.data_dir)]) == 0
    doc = json.loads(capsys.readouterr().out)
    by_role = {r["role"]: r for r in doc["services"]}
    assert by_role["broker"]["up"] and by_role["broker"]["status"]["metrics"] == ports["broker"]
    assert by_role["namesrv"]["status"]["metrics"] == ports["namesrv"]
    assert cli.main(["--namesrv", c.namesrv, "status", "-v", "--data-dir", str(c.data_dir)]) == 0
    text = capsys.readouterr().out
    assert f"metrics http://{ports['broker']}/metrics" in text and "  counters:" in text
    admin.shutdown()


def _transaction_resolved_by_a_check(namesrv: str, ports) -> dict:
    """One half message left UNKNOWN, committed when the txn-checker asks: the broker counts one
    half and one commit, and as many checks pushed as the checker counted and the producer answered."""
    with TransactionProducer("obs-tx", namesrv=namesrv, checker=lambda m: TransactionState.COMMIT) as tp:
        r = tp.send_in_transaction(Message("ObsTx", b"pay"), lambda m, a: TransactionState.UNKNOWN)
        assert r.local_state is TransactionState.UNKNOWN

        def settled():
            broker, txn = scrape(ports["broker"]), scrape(ports["txn"])
            checks = (value(broker, "quiver_transaction_checks_total"),
                      value(txn, "quiver_transaction_check_results_total", result="checked"), tp._checks_answered)
            done = value(broker, "quiver_transaction_commit_total") == 1 and checks[0] >= 1 and len(set(checks)) == 1
            return (broker, txn) if done else None
        broker, txn = wait_for(settled, "the check that committed the transaction", timeout=20)
    assert value(broker, "quiver_transaction_half_total") == 1
    assert value(broker, "quiver_transaction_rollback_total") == 0
    assert value(broker, "quiver_messages_in_total", topic=HALF_TOPIC) == 1   # stored as a half message
    assert value(txn, "quiver_transaction_check_rounds_total") >= 1
    assert value(txn, "quiver_transaction_check_results_total", result="discarded") == 0
    return txn


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _console_counts_its_pages(ports) -> dict:
    """Pages loaded from the console: its /metrics counts each by page and status, and the
    Admin calls they made (a missing topic's page: an error of `queues`)."""
    base = ports["console_url"].rstrip("/")
    loads = {"/topics": 200, f"/topics/{TOPIC}": 200, "/topics/NoSuchTopic": 200, "/messages?key=k": 400,
             "/no-such-page": 404}
    for path, status in loads.items():
        assert _get(base + path) == status, path
    assert _get(base + "/topics") == 200
    got = scrape(ports["console"])
    requests = {(l["page"], l["status"]): v for l, v in got["quiver_console_http_requests_total"]}
    assert requests == {("topics", "200"): 2, ("topic", "200"): 2, ("messages", "400"): 1, ("_none", "404"): 1}
    assert value(got, "quiver_console_http_latency_seconds_count", page="topics") == 2
    assert value(got, "quiver_console_admin_calls_total", call="topic_list") >= 2   # once per /topics load
    assert value(got, "quiver_console_admin_calls_total", call="max_offset") >= 2
    assert value(got, "quiver_console_admin_errors_total", call="queues", error="TopicNotExistError") == 1
    return got


def test_log_format_json_is_one_object_a_line(observed):
    c, _ = observed
    namesrv = next(s for s in c.services if s.role == "namesrv")
    c.restart(namesrv)  # a second start: more lines, and the first run's shutdown lines too
    with open(namesrv.log_path) as f:
        lines = [line for line in f.read().splitlines() if line]
    assert len(lines) >= 4
    for line in lines:
        obj = json.loads(line)
        assert {"time", "level", "logger", "message"} <= set(obj) and obj["time"].endswith("Z")
    assert any("metrics on http://" in json.loads(line)["message"] for line in lines)
