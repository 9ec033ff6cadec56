"""Name servers and several brokers: routes, expiry, fail-over of sends."""

import time

from quiver import Admin, Message, Producer, PullConsumer
from quiver.wire.codes import RequestCode
from quiver.wire.transport import Transport


def _live(namesrv_addr):
    t = Transport()
    try:
        return t.call(namesrv_addr, RequestCode.GET_BROKER_CLUSTER_INFO).ext["cluster"]["live"]
    finally:
        t.close()


def test_two_brokers_two_namesrvs_routes_and_spread(make_cluster):
    c = make_cluster(brokers=2, namesrvs=2)
    admin = Admin(namesrv=c.namesrv)
    admin.create_topic("Spread", queues=4, wait_s=60)   # until both name servers route it (registration is async)
    for ns in [s.addr for s in c.services if s.role == "namesrv"]:
        route = Admin(namesrv=ns).topic_route("Spread")   # each name server knows on its own
        assert sorted(b["broker_name"] for b in route["brokers"]) == ["broker-a", "broker-b"]
    with Producer("pg", namesrv=c.namesrv) as p:
        results = [p.send(Message("Spread", str(i).encode())) for i in range(80)]
    assert {r.broker for r in results} == {"broker-a", "broker-b"}
    with PullConsumer("cg", namesrv=c.namesrv, consume_from="first") as pc:
        pc.subscribe("Spread")
        got, deadline = [], time.monotonic() + 10
        while len(got) < 80 and time.monotonic() < deadline:
            got += pc.poll(0.5)
    assert sorted(int(m.body) for m in got) == list(range(80))
    assert len(pc.assignment()) == 8
    admin.shutdown()


def test_broker_expiry_and_send_failover(make_cluster):
    c = make_cluster(brokers=2, namesrv_args=("--broker-expiry-ms", "1500", "--scan-interval-ms", "200"),
                     broker_args=("--register-interval-ms", "500"))
    ns = c.services[0].addr
    Admin(namesrv=c.namesrv).create_topic("Failover", queues=2)
    victim = next(s for s in c.services if s.name == "broker-b")
    with Producer("pg", namesrv=c.namesrv, send_timeout=5.0) as p:
        p.send(Message("Failover", b"warm"))
        victim.kill()
        t0 = time.monotonic()
        results = [p.send(Message("Failover", str(i).encode())) for i in range(40)]
        assert all(r.broker == "broker-a" for r in results[1:])
        assert time.monotonic() - t0 < 10
    deadline = time.monotonic() + 10
    while victim.addr in _live(ns) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert victim.addr not in _live(ns)          # dropped after the expiry, not before long
    victim.start()
    c.wait()
    deadline = time.monotonic() + 10
    while victim.addr not in _live(ns) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert victim.addr in _live(ns)              # rejoins with its data


def test_services_freeze_their_start_up_objects(make_cluster):
    # run_service moves what start-up made out of the cyclic collector's scans (gc.freeze):
    # STATUS says how many objects, and the collections each generation ran
    c = make_cluster(brokers=1)
    admin = Admin(namesrv=c.namesrv)
    for svc in c.services:
        gc_status = admin.status(svc.addr)["gc"]
        assert gc_status["frozen_objects"] > 10_000, (svc.name, gc_status)
        assert len(gc_status["collections"]) == 3
    admin.shutdown()
