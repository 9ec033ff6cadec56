"""SQL92 reaches every broker's topics: a topic on a broker with no filter server of its own is
read through a filter server attached to another broker of the cluster (issue 16), over real
processes. The expected set is the engine evaluated on what was sent (tests/unit/filter/ tests
the engine itself).
"""

import random
import time

import pytest

from quiver import Admin, Message, MessageSelector, Producer, PullConsumer
from quiver.errors import SubscriptionParseError
from quiver.tools.local import wait_healthy
from quiver_filter import sql92

EXPR = "(region = 'eu' AND amount BETWEEN 100 AND 500) OR TAGS = 'vip'"


def _send(namesrv: str, topic: str, count: int) -> set[str]:
    """Send `count` messages; the seqs of those EXPR matches."""
    rng, sel, want = random.Random(16), sql92.compile(EXPR), set()
    msgs = []
    for i in range(count):
        props = {"seq": str(i), "amount": str(rng.randint(0, 1000)), "region": rng.choice(["eu", "us", "ap"])}
        tag = rng.choice(["vip", "std", "std", "std", "std"])
        msgs.append(Message(topic, f"m-{i}".encode(), tags=tag, properties=props))
        if sel.matches({**props, "TAGS": tag}):
            want.add(str(i))
    with Producer("fab-pg", namesrv=namesrv) as p:
        for f in [p.send_async(m) for m in msgs]:
            f.result(30)
    return want


def _until(what: str, probe, timeout: float = 15.0):
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.1)


def test_topic_only_on_a_broker_without_filter_server_is_read_with_sql92(make_cluster):
    cluster = make_cluster(brokers=2)
    broker_a, broker_b = [s for s in cluster.services if s.role == "broker"]
    filt = cluster.add_service("filter", "quiver_filter", "--broker", broker_a.addr, "--register-interval-ms", "500",
                               data=False)
    wait_healthy([filt])
    topic = "SqlOnB"
    with Admin(namesrv=cluster.namesrv) as admin:
        admin.create_topic(topic, queues=4, brokers=[broker_b.name])
        # the route names broker B only, which has no filter server; the cluster's one is offered
        route = _until("filter server in the route", lambda: (lambda r: r if filt.addr in
                       r.get("cluster_filter_servers", []) else None)(admin.topic_route(topic)))
        assert [b["broker_name"] for b in route["brokers"]] == [broker_b.name] and route["filter_servers"] == {}
        # the filter server (attached to A by --broker) has learned broker B from the name server
        _until("filter server serving broker B", lambda: broker_b.addr in admin.status(filt.addr).get(
            "serves_brokers", []))
        assert admin.status(filt.addr)["broker"] == broker_a.addr

        bad = PullConsumer("fab-bad", namesrv=cluster.namesrv)
        bad.subscribe(topic, MessageSelector.sql("amount >"))
        with pytest.raises(SubscriptionParseError):   # checked by the cluster's filter server
            bad.start()
        bad.shutdown()

        want = _send(cluster.namesrv, topic, 800)
        assert 0 < len(want) < 800
        got = []
        with PullConsumer("fab", namesrv=cluster.namesrv, consume_from="first") as c:
            c.subscribe(topic, MessageSelector.sql(EXPR))
            deadline = time.monotonic() + 30
            while len(got) < len(want) and time.monotonic() < deadline:
                got.extend(c.poll(0.3))
            settle = time.monotonic() + 1.0   # anything extra (unmatched, duplicates) shows up now
            while time.monotonic() < settle:
                got.extend(c.poll(0.1))
        seqs = [m.properties["seq"] for m in got]
        assert len(seqs) == len(set(seqs)), "duplicates"
        assert set(seqs) == want
        assert {m.broker for m in got} == {broker_b.name} and {m.queue_id for m in got} == {0, 1, 2, 3}
        assert admin.status(filt.addr).get("counters", {}).get("pulls", 0) > 0
    assert filt.alive()
