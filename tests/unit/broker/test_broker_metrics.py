"""The broker's collector (metrics.py) on a stub broker: traffic per topic and group, send and
pull latency, lag from its sample step equal to GET_CONSUME_STATS, store gauges."""

import concurrent.futures

from support.scrape import samples, value

from quiver.wire import requests as rq
from quiver.wire.codes import RequestCode
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
                          app.puller, app.traffic, app.ha)
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
        assert value(got, "quiver_commitlog_max_offset") == app.store.stats()["max_phys_offset"] > 0
        assert 0 <= value(got, "quiver_storage_disk_ratio") <= 1
        assert value(got, "quiver_held_pulls") == 0 and value(got, "quiver_topics") >= 1
        assert value(got, "quiver_broker_info", broker="broker-a", role="master") == 1
        assert value(got, "quiver_half_messages") == 0
