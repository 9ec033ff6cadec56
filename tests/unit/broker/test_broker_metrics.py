"""The broker's collector (metrics.py) on a stub broker: traffic per topic and group, send and
pull latency, lag from its sample step equal to GET_CONSUME_STATS (per group and topic, or per
queue with per_queue), topic and consumer offsets, consumers online, dead letters per group and
stored, message sizes, store gauges and the deprecated CommitLog names."""

import concurrent.futures

from support.scrape import samples, value

from quiver.wire import record
from quiver.wire import requests as rq
from quiver.wire.codes import RequestCode
from quiver.wire.requests import ConsumerData
from quiver.testing import stub_cluster
from quiver_broker.metrics import BrokerMetrics

TOPIC = "Mt"


def _on_service_thread(app, fn):
    fut = concurrent.futures.Future()
    app.service.call_soon_threadsafe(lambda: fut.set_result(fn()))
    return fut.result(5)


def test_broker_collector_counts_traffic_and_samples_lag():
    with stub_cluster() as c:
        net, addr, app = c.network, c.broker_addrs["broker-a"], c.broker()
        c.admin().create_topic(TOPIC, queues=2)
        for body in (b"a", b"bb", "ccé".encode()):
            net.call(addr, RequestCode.SEND_MESSAGE, {"t": TOPIC, "q": 0, "m": [[0, "TAGS\x01A\x02"]]}, [body])
        env = net.call(addr, rq.PullMessage(topic=TOPIC, queue_id=0, offset=0, group="mg", max_msgs=2,
                                            commit_offset=-1))
        assert env.code == 0
        net.call(addr, rq.UpdateConsumerOffset(group="mg", topic=TOPIC, queue_id=0, offset=2))
        m = BrokerMetrics(app.service, ("broker-a", "C", addr), app.store, app.topics, app.metadata, app.clients,
                          app.puller, app.traffic, app.ha, per_queue=True)
        assert "quiver_consumer_lag_messages" not in samples(m)   # nothing sampled yet: no stale zeros
        _on_service_thread(app, m.sample_step)
        got = samples(m)
        assert value(got, "quiver_messages_in_total", topic=TOPIC) == 3
        assert value(got, "quiver_throughput_in_bytes_total", topic=TOPIC) == 1 + 2 + 4
        assert value(got, "quiver_messages_out_total", topic=TOPIC, consumer_group="mg") == 2
        assert value(got, "quiver_throughput_out_bytes_total", topic=TOPIC, consumer_group="mg") > 3
        assert value(got, "quiver_send_latency_seconds_count") == 3
        assert value(got, "quiver_pull_latency_seconds_count") == 1
        lag = {(r["topic"], r["queue_id"]): r["lag"] for r in c.admin().consumer_progress("mg")}
        assert lag == {(TOPIC, 0): 1, (TOPIC, 1): 0}
        for (topic, qid), n in lag.items():
            assert value(got, "quiver_consumer_lag_messages", consumer_group="mg", topic=topic, queue_id=qid) == n
        assert value(got, "quiver_consumer_lag_seconds", consumer_group="mg", topic=TOPIC, queue_id=0) >= 0
        assert value(got, "quiver_consumer_lag_seconds", consumer_group="mg", topic=TOPIC, queue_id=1) == 0
        assert value(got, "quiver_consumer_offset", consumer_group="mg", topic=TOPIC, queue_id=0) == 2
        assert value(got, "quiver_topic_max_offset", topic=TOPIC, queue_id=0) == 3
        assert value(got, "quiver_topic_max_offset", topic=TOPIC, queue_id=1) == 0
        assert value(got, "quiver_topic_min_offset", topic=TOPIC, queue_id=0) == 0
        assert value(got, "quiver_commitlog_max_offset_bytes") == app.store.stats()["max_phys_offset"] > 0
        assert value(got, "quiver_commitlog_max_offset") == value(got, "quiver_commitlog_max_offset_bytes")
        assert value(got, "quiver_commitlog_min_offset_bytes") == value(got, "quiver_commitlog_min_offset") == 0
        assert 0 <= value(got, "quiver_storage_disk_ratio") <= 1
        assert value(got, "quiver_storage_disk_full_ratio") == app.store.disk.full_ratio
        assert value(got, "quiver_storage_writes_refused") == 0
        assert value(got, "quiver_held_pulls") == 0 and value(got, "quiver_topics") >= 1
        assert value(got, "quiver_broker_info", broker="broker-a", role="master") == 1
        assert value(got, "quiver_half_messages") == 0
        # sizes of the three bodies: 1, 2 and 4 bytes, all under the first bound
        assert value(got, "quiver_message_size_bytes_bucket", le="64.0") == 3
        assert value(got, "quiver_message_size_bytes_sum") == 7
        assert value(got, "quiver_consumers_online", consumer_group="mg") == 0   # an offset, nobody online


def test_lag_is_per_group_and_topic_by_default_and_counts_consumers_online():
    with stub_cluster() as c:
        net, addr, app = c.network, c.broker_addrs["broker-a"], c.broker()
        c.admin().create_topic(TOPIC, queues=2)
        for q, n in ((0, 3), (1, 2)):
            for _ in range(n):
                net.call(addr, RequestCode.SEND_MESSAGE, {"t": TOPIC, "q": q, "m": [[0, ""]]}, [b"x" * 300])
        net.call(addr, rq.UpdateConsumerOffset(group="g1", topic=TOPIC, queue_id=0, offset=1))
        data = ConsumerData(group="g1", subscriptions={}, consume_type="PULL")
        for client in ("c1", "c2"):
            _on_service_thread(app, lambda cid=client: app.clients.heartbeat(cid, cid.encode(), [], [data]))
        m = BrokerMetrics(app.service, ("broker-a", "C", addr), app.store, app.topics, app.metadata, app.clients,
                          app.puller, app.traffic, app.ha)
        _on_service_thread(app, m.sample_step)
        got = samples(m)
        assert got["quiver_consumer_lag_messages"] == [({"consumer_group": "g1", "topic": TOPIC}, 2 + 2)]
        assert [l for l, _ in got["quiver_consumer_lag_seconds"]] == [{"consumer_group": "g1", "topic": TOPIC}]
        assert value(got, "quiver_consumer_offset", consumer_group="g1", topic=TOPIC) == 1
        assert value(got, "quiver_topic_max_offset", topic=TOPIC) == 5
        assert all("queue_id" not in l for name in got for l, _ in got[name])
        assert value(got, "quiver_consumers_online", consumer_group="g1") == 2
        assert value(got, "quiver_message_size_bytes_bucket", le="256.0") == 0
        assert value(got, "quiver_message_size_bytes_bucket", le="1024.0") == 5


def test_dead_letters_are_counted_per_group_and_their_depth_sampled():
    with stub_cluster() as c:
        net, addr, app = c.network, c.broker_addrs["broker-a"], c.broker()
        c.admin().create_topic(TOPIC, queues=1)
        for body in (b"a", b"b", b"c"):
            net.call(addr, RequestCode.SEND_MESSAGE, {"t": TOPIC, "q": 0, "m": [[0, ""]]}, [body])
        phys = _phys_offsets(app, 3)
        for group, which in (("dg", phys[:2]), ("eg", phys[2:])):
            for off in which:
                env = net.call(addr, rq.ConsumerSendMsgBack(group=group, offset=off, delay_level=-1,
                                                             origin_topic=TOPIC))
                assert env.code == 0, env.remark
        m = BrokerMetrics(app.service, ("broker-a", "C", addr), app.store, app.topics, app.metadata, app.clients,
                          app.puller, app.traffic, app.ha)
        _on_service_thread(app, m.sample_step)
        got = samples(m)
        assert value(got, "quiver_send_to_dlq_messages_total", consumer_group="dg") == 2
        assert value(got, "quiver_send_to_dlq_messages_total", consumer_group="eg") == 1
        assert value(got, "quiver_dlq_messages", consumer_group="dg") == 2
        assert value(got, "quiver_dlq_messages", consumer_group="eg") == 1


def _phys_offsets(app, n: int) -> list[int]:
    """CommitLog offsets of the first `n` messages of TOPIC queue 0."""
    res = app.store.get_messages(TOPIC, 0, 0, n)
    return [r.phys_offset for r in record.decode_many(res.data)]


def test_service_events_have_named_families_and_loop_failures_a_loop_label():
    with stub_cluster() as c:
        app = c.broker()
        app.counters["replicated_bytes"] += 10
        app.counters["trace_put_failed"] += 1
        app.counters["flush_failed"] += 2
        m = BrokerMetrics(app.service, ("broker-a", "C", "x"), app.store, app.topics, app.metadata, app.clients,
                          app.puller, app.traffic, app.ha)
        got = samples(m)
        assert value(got, "quiver_ha_replicated_bytes_total") == 10
        assert value(got, "quiver_trace_put_failures_total") == 1
        assert value(got, "quiver_loop_failures_total", loop="flush") == 2
        assert value(got, "quiver_loop_failures_total", loop="trace_put") is None   # a named family, not a loop
        assert value(got, "quiver_service_events_total", event="flush_failed") == 2   # deprecated, kept


def test_the_broker_setting_turns_per_queue_series_on():
    from quiver_broker.metrics import collector
    with stub_cluster(broker_options={"metrics_per_queue": True}) as c:
        app = c.broker()
        c.admin().create_topic(TOPIC, queues=2)
        m = _on_service_thread(app, lambda: collector(app))
        _on_service_thread(app, m.sample_step)
        got = samples(m)
        assert m.per_queue and value(got, "quiver_topic_max_offset", topic=TOPIC, queue_id=1) == 0
