"""SQL92 subscriptions through filter servers, over real processes.

The expected set is always the engine evaluated on what was sent, so the
tests check the wiring (filter server, broker registration, routes, SDK
routing and failover), not the engine again (tests/unit/filter/ does that).
"""

import random
import time

import pytest

from quiver import Admin, Message, MessageSelector, Producer, PullConsumer
from quiver.errors import SubscriptionParseError
from quiver.tools.local import wait_healthy
from quiver_filter import sql92

EXPR = "(region = 'eu' AND amount BETWEEN 100 AND 500) OR TAGS = 'vip' OR (prio > 7 AND region IS NOT NULL)"
REGIONS = ["eu", "us", "ap", None]


def _message(topic: str, i: int, rng: random.Random) -> Message:
    props = {"seq": str(i), "amount": str(rng.randint(0, 1000)), "prio": str(rng.randint(0, 9))}
    region = rng.choice(REGIONS)
    if region:
        props["region"] = region
    return Message(topic, f"m-{i}".encode(), tags=rng.choice(["vip", "std", "std", "std"]), keys=[f"k{i}"],
                   properties=props)


def _expected(sent: list[Message], expr: str) -> set[str]:
    sel = sql92.compile(expr)
    out = set()
    for m in sent:
        props = dict(m.properties)
        if m.tags:
            props["TAGS"] = m.tags
        props["KEYS"] = " ".join(m.key_list())
        if sel.matches(props):
            out.add(m.properties["seq"])
    return out


def _add_filters(cluster, n: int, topic: str):
    filters = [cluster.add_service("filter", "quiver_filter", "--register-interval-ms", "1000", data=False)
               for _ in range(n)]
    wait_healthy(filters)
    _wait_route_filters(cluster, topic, {f.addr for f in filters})
    return filters


def _wait_route_filters(cluster, topic: str, want: set[str], timeout: float = 15.0) -> None:
    admin = Admin(namesrv=cluster.namesrv)
    try:
        deadline = time.monotonic() + timeout
        while True:
            route = admin.topic_route(topic)
            have = {a for addrs in route.get("filter_servers", {}).values() for a in addrs}
            if want <= have:
                return
            assert time.monotonic() < deadline, f"filter servers {want} not in the route of {topic}: {route}"
            time.sleep(0.1)
    finally:
        admin.shutdown()


def _send(cluster, topic: str, count: int, seed: int, start: int = 0) -> list[Message]:
    rng = random.Random(seed)
    msgs = [_message(topic, i, rng) for i in range(start, start + count)]
    with Producer("fpg", namesrv=cluster.namesrv) as p:
        futs = [p.send_async(m) for m in msgs]
        for f in futs:
            f.result(30)
    return msgs


def _drain(consumer, want: int, timeout: float = 30.0, settle: float = 1.0) -> list:
    got, deadline = [], time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        got.extend(consumer.poll(0.3))
    end = time.monotonic() + settle           # anything extra (unmatched, duplicates) shows up now
    while time.monotonic() < end:
        got.extend(consumer.poll(0.1))
    return got


def _topic(cluster, name: str) -> str:
    admin = Admin(namesrv=cluster.namesrv)
    admin.create_topic(name, queues=4)
    admin.shutdown()
    return name


def test_pull_consumer_gets_exactly_the_matching_messages(cluster):
    topic = _topic(cluster, "Sql4")
    _add_filters(cluster, 1, topic)
    sent = _send(cluster, topic, 2000, seed=1)
    want = _expected(sent, EXPR)
    assert 0 < len(want) < len(sent)
    with PullConsumer("sqlpull", namesrv=cluster.namesrv, consume_from="first") as c:
        c.subscribe(topic, MessageSelector.sql(EXPR))
        got = _drain(c, len(want))
        seqs = [m.properties["seq"] for m in got]
        assert len(seqs) == len(set(seqs)), "duplicates"
        assert set(seqs) == want
        assert {m.queue_id for m in got} == {0, 1, 2, 3}
        # the position moved past the non-matching tail too: commit reaches every queue's end
        c.commit()
        admin = Admin(namesrv=cluster.namesrv)
        for mq in admin.queues(topic):
            assert admin.consumer_offset("sqlpull", mq) == admin.max_offset(mq)
        admin.shutdown()
        # long polling through the filter: a new matching message arrives promptly
        with Producer("fpg", namesrv=cluster.namesrv) as p:
            p.send(Message(topic, b"late-miss", properties={"region": "us", "amount": "1", "prio": "0", "seq": "x1"}))
            t0 = time.monotonic()
            p.send(Message(topic, b"late-hit", tags="vip", properties={"seq": "x2"}))
            late = []
            while not late and time.monotonic() - t0 < 5:
                late = c.poll(0.05)
        assert [m.body for m in late] == [b"late-hit"]
        assert time.monotonic() - t0 < 2.0


def test_bad_expression_fails_at_start_with_position(cluster):
    topic = _topic(cluster, "SqlBad")
    _add_filters(cluster, 1, topic)
    c = PullConsumer("sqlbad", namesrv=cluster.namesrv)
    c.subscribe(topic, MessageSelector.sql("region = 'eu' AND amount >"))
    with pytest.raises(SubscriptionParseError) as info:
        c.start()
    assert info.value.position == len("region = 'eu' AND amount >")
    assert "not valid SQL92" in str(info.value)
    c.shutdown()


def test_broker_relays_check_client_config(cluster):
    from quiver.wire.codes import RequestCode, ResponseCode
    from quiver.wire.transport import Transport
    broker = next(s for s in cluster.services if s.role == "broker")
    t = Transport("t")
    try:
        ext = {"tp": "SQL92", "sub": "a >", "g": "g", "t": "T"}
        env = t.call(broker.addr, RequestCode.CHECK_CLIENT_CONFIG, ext, ok=tuple(ResponseCode))
        assert env.code == ResponseCode.SYSTEM_ERROR and "no filter server" in env.remark
        _add_filters(cluster, 1, _topic(cluster, "Relay"))
        env = t.call(broker.addr, RequestCode.CHECK_CLIENT_CONFIG, ext, ok=tuple(ResponseCode))
        assert env.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and env.ext["position"] == 3
        ext["sub"] = "a > 3"
        assert t.call(broker.addr, RequestCode.CHECK_CLIENT_CONFIG, ext).code == ResponseCode.SUCCESS
        ext.update(tp="TAG", sub="A || B")
        assert t.call(broker.addr, RequestCode.CHECK_CLIENT_CONFIG, ext).code == ResponseCode.SUCCESS
    finally:
        t.close()


def test_push_consumer_gets_exactly_the_matching_messages(cluster):
    import threading

    from quiver import ConsumeResult, PushConsumer
    topic = _topic(cluster, "SqlPush")
    _add_filters(cluster, 1, topic)
    sent = _send(cluster, topic, 1000, seed=2)
    want = _expected(sent, EXPR)
    got, lock, done = [], threading.Lock(), threading.Event()

    def listener(msgs):
        with lock:
            got.extend(m.properties["seq"] for m in msgs)
            if len(got) >= len(want):
                done.set()
        return ConsumeResult.SUCCESS

    c = PushConsumer("sqlpush", namesrv=cluster.namesrv, consume_from="first", threads=4)
    c.subscribe(topic, MessageSelector.sql(EXPR))
    c.register(listener)
    c.start()
    try:
        assert done.wait(30), f"{len(got)} of {len(want)}"
        time.sleep(1.0)
    finally:
        c.shutdown()
    assert len(got) == len(set(got)) and set(got) == want


def test_filter_server_killed_mid_run_nothing_lost_nothing_unmatched(cluster):
    topic = _topic(cluster, "SqlKill")
    f1, f2 = _add_filters(cluster, 2, topic)
    first = _send(cluster, topic, 1500, seed=3)
    want = _expected(first, EXPR)
    with PullConsumer("sqlkill", namesrv=cluster.namesrv, consume_from="first", pull_batch_size=16) as c:
        c.subscribe(topic, MessageSelector.sql(EXPR))
        got = c.poll(1.0)
        # queues are spread over both filter servers by hash: kill the busier one mid-stream
        admin = Admin(namesrv=cluster.namesrv)
        pulls = {f.addr: admin.status(f.addr).get("counters", {}).get("pulls", 0) for f in (f1, f2)}
        admin.shutdown()
        victim, survivor = (f1, f2) if pulls[f1.addr] >= pulls[f2.addr] else (f2, f1)
        assert pulls[victim.addr] > 0
        victim.kill()
        more = _send(cluster, topic, 1500, seed=4, start=1500)
        want |= _expected(more, EXPR)
        got += _drain(c, len(want) - len(got), timeout=40, settle=1.5)
    seqs = [m.properties["seq"] for m in got]
    assert set(seqs) == want, (len(set(seqs)), len(want), sorted(set(seqs) ^ want)[:10])
    # at-least-once: a pull answered by the dead server may be re-pulled, but nothing unmatched
    assert set(seqs) <= want
    assert survivor.alive()


def test_two_brokers_filter_servers_spread_one_each_and_serve_their_broker(make_cluster):
    cluster = make_cluster(brokers=2)
    topic = _topic(cluster, "Sql2b")
    filters = _add_filters(cluster, 2, topic)
    admin = Admin(namesrv=cluster.namesrv)
    deadline = time.monotonic() + 15
    while True:  # started together they may pick the same broker; one moves within a register round
        fs = admin.topic_route(topic)["filter_servers"]
        if len(fs) == 2 and all(len(v) == 1 for v in fs.values()):
            break
        assert time.monotonic() < deadline, fs
        time.sleep(0.2)
    admin.shutdown()
    sent = _send(cluster, topic, 1200, seed=5)
    want = _expected(sent, EXPR)
    with PullConsumer("sql2b", namesrv=cluster.namesrv, consume_from="first") as c:
        c.subscribe(topic, MessageSelector.sql(EXPR))
        got = _drain(c, len(want))
    seqs = [m.properties["seq"] for m in got]
    assert len(seqs) == len(set(seqs)) and set(seqs) == want
    assert len({m.broker for m in got}) == 2 and all(f.alive() for f in filters)
