"""Producer -> broker -> pull consumer over real sockets."""

import time

import pytest

from quiver import Admin, Message, PullConsumer, Producer, SendStatus


def _drain(consumer, want, timeout=30.0):
    got, deadline = [], time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        got.extend(consumer.poll(0.5))
    return got


# direct_poll: poll() holds the pulls on its own socket; the same guarantees must hold
DIRECT = pytest.mark.parametrize("direct", [False, True], ids=["io", "direct"])


@DIRECT
def test_10k_messages_over_4_queues_complete_and_in_queue_order(cluster, direct):
    admin = Admin(namesrv=cluster.namesrv)
    admin.create_topic("Orders", queues=4)
    with Producer("pg", namesrv=cluster.namesrv) as p:
        futs = [p.send_async(Message("Orders", f"m-{i}".encode(), keys=[f"k{i}"])) for i in range(10_000)]
        results = [f.result(30) for f in futs]
    assert all(r.status is SendStatus.SEND_OK for r in results)
    assert {r.queue_id for r in results} == {0, 1, 2, 3}
    sent = {(r.queue_id, r.queue_offset): r.msg_id for r in results}
    assert len(sent) == 10_000
    with PullConsumer("cg", namesrv=cluster.namesrv, consume_from="first", direct_poll=direct) as c:
        c.subscribe("Orders")
        got = _drain(c, 10_000)
    assert len(got) == 10_000
    assert {(m.queue_id, m.queue_offset): m.msg_id for m in got} == sent
    per_queue = {}
    for m in got:
        per_queue.setdefault(m.queue_id, []).append(m.queue_offset)
    for offsets in per_queue.values():
        assert offsets == sorted(offsets) == list(range(len(offsets)))
    admin.shutdown()


def test_sync_send_batch_orderly_oneway(cluster):
    with Producer("pg", namesrv=cluster.namesrv) as p:
        r = p.send(Message("Mixed", b"one", tags="T", keys="a b", properties={"region": "eu"}))
        assert r.status is SendStatus.SEND_OK and len(r.msg_id) == 32
        batch = p.send_batch([Message("Mixed", f"b{i}".encode()) for i in range(100)])
        assert len({(b.queue_id, b.queue_offset) for b in batch}) == 100
        assert [b.queue_offset for b in batch] == list(range(batch[0].queue_offset, batch[0].queue_offset + 100))
        ordered = [p.send_orderly(Message("Mixed", f"o{i}".encode()), sharding_key="order-7") for i in range(20)]
        assert len({o.queue_id for o in ordered}) == 1
        offs = [o.queue_offset for o in ordered]
        assert offs == sorted(offs)
        p.send_oneway(Message("Mixed", b"fire-and-forget", keys=["oneway-key"]))
    admin = Admin(namesrv=cluster.namesrv)
    deadline = time.monotonic() + 5
    while not admin.query_by_key("Mixed", "oneway-key") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [m.body for m in admin.query_by_key("Mixed", "oneway-key")] == [b"fire-and-forget"]
    m = admin.view_message(r.offset_msg_id)
    assert (m.body, m.tags, m.keys, m.properties["region"]) == (b"one", "T", ["a", "b"], "eu")
    assert admin.view_message(r.msg_id, topic="Mixed").body == b"one"
    assert [x.body for x in admin.query_by_key("Mixed", "b")] == [b"one"]
    admin.shutdown()


def test_tag_filter_on_broker_and_client(cluster):
    with Producer("pg", namesrv=cluster.namesrv) as p:
        for i in range(300):
            p.send_async(Message("Tagged", str(i).encode(), tags=["A", "B", "C"][i % 3])).result(10)
    with PullConsumer("tags", namesrv=cluster.namesrv, consume_from="first") as c:
        c.subscribe("Tagged", "A || C")
        got = _drain(c, 200, timeout=15)
        time.sleep(0.3)
        got += c.poll(0.2)
    assert len(got) == 200 and {m.tags for m in got} == {"A", "C"}


@DIRECT
def test_offsets_commit_and_resume(cluster, direct):
    with Producer("pg", namesrv=cluster.namesrv) as p:
        for i in range(100):
            p.send(Message("Resume", str(i).encode()))
    with PullConsumer("resumer", namesrv=cluster.namesrv, consume_from="first", auto_commit=False,
                      direct_poll=direct) as c:
        c.subscribe("Resume")
        first = _drain(c, 100)
        c.commit()
    with Producer("pg", namesrv=cluster.namesrv) as p:
        for i in range(100, 150):
            p.send(Message("Resume", str(i).encode()))
    with PullConsumer("resumer", namesrv=cluster.namesrv, consume_from="first", direct_poll=direct) as c:
        c.subscribe("Resume")
        second = _drain(c, 50)
        time.sleep(0.3)
        second += c.poll(0.2)
    assert len(first) == 100
    assert sorted(int(m.body) for m in second) == list(range(100, 150))


def test_consume_from_last_and_timestamp_and_seek(cluster):
    with Producer("pg", namesrv=cluster.namesrv) as p:
        for i in range(50):
            p.send(Message("Times", f"old{i}".encode()))
        time.sleep(0.05)
        mark = int(time.time() * 1000)
        time.sleep(0.05)
        for i in range(30):
            p.send(Message("Times", f"new{i}".encode()))
    with PullConsumer("ts", namesrv=cluster.namesrv, consume_from=mark) as c:
        c.subscribe("Times")
        got = _drain(c, 30)
        time.sleep(0.3)
        got += c.poll(0.2)
        assert sorted(m.body for m in got) == sorted(f"new{i}".encode() for i in range(30))
        c.seek_to_timestamp(0)
        again = _drain(c, 80)
        assert len(again) == 80
    with PullConsumer("latest", namesrv=cluster.namesrv, consume_from="last") as c:
        c.subscribe("Times")
        assert c.poll(0.5) == []


@DIRECT
def test_long_poll_wakes_on_arrival_not_on_a_tick(cluster, direct):
    Admin(namesrv=cluster.namesrv).create_topic("Wake", queues=1)
    with PullConsumer("waker", namesrv=cluster.namesrv, consume_from="last", direct_poll=direct) as c, \
            Producer("pg", namesrv=cluster.namesrv) as p:
        c.subscribe("Wake")
        c.poll(0.5)              # the pull is now parked on the broker
        lat = []
        for i in range(20):
            t0 = time.perf_counter()
            p.send(Message("Wake", b"x"))
            msgs = []
            while not msgs and time.perf_counter() - t0 < 5:
                msgs = c.poll(0.01)
            lat.append(time.perf_counter() - t0)
        lat.sort()
    # held pulls answer on arrival: far below any polling interval (1 s) or the 15 s suspend
    assert lat[len(lat) // 2] < 0.05 and lat[-1] < 0.5, lat


@DIRECT
def test_pull_consumers_of_one_group_share_the_queues(cluster, direct):
    Admin(namesrv=cluster.namesrv).create_topic("Shared", queues=4)
    with Producer("pg", namesrv=cluster.namesrv) as p:
        for i in range(400):
            p.send_async(Message("Shared", str(i).encode()))
        p.send(Message("Shared", b"last"))
    a = PullConsumer("sharers", namesrv=cluster.namesrv, consume_from="first", direct_poll=direct).__enter__()
    a.subscribe("Shared")
    b = PullConsumer("sharers", namesrv=cluster.namesrv, consume_from="first", direct_poll=direct)
    b.subscribe("Shared")
    b.start()
    try:
        deadline = time.monotonic() + 10       # b joined: the broker tells a, which gives up half
        while time.monotonic() < deadline and not (len(a.assignment()) == 2 and len(b.assignment()) == 2):
            time.sleep(0.05)
        assert len(a.assignment()) == len(b.assignment()) == 2
        assert not set(a.assignment()) & set(b.assignment())
        got, deadline = [], time.monotonic() + 15
        while len(got) < 401 and time.monotonic() < deadline:
            got += a.poll(0.2) + b.poll(0.2)
        bodies = [m.body for m in got]
        # a may have consumed some of b's queues before the rebalance: duplicates are bounded by that
        assert set(bodies) == {str(i).encode() for i in range(400)} | {b"last"}
    finally:
        a.shutdown()
        b.shutdown()


def test_send_async_never_batches_delayed_messages(cluster):
    """Batches cannot carry a delay: a burst of delayed send_async calls must all be accepted."""
    with Producer("pg", namesrv=cluster.namesrv) as p:
        futs = [p.send_async(Message("Later", str(i).encode(), delay_level=18)) for i in range(300)]
        futs += [p.send_async(Message("Later", b"t", deliver_at=int(time.time() * 1000) + 3_600_000))
                 for _ in range(100)]
        results = [f.result(30) for f in futs]
    assert all(r.status is SendStatus.SEND_OK for r in results)
