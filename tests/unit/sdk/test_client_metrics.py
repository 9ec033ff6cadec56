"""The SDK's opt-in client metrics (quiver.client.metrics) over quiver.testing's fake network:
sends by topic and result (sync, batch, async, a refused one), their latency, and a PushConsumer's
listener calls consumed or failed; without one, prometheus_client is not even imported."""

import subprocess
import sys

from prometheus_client import CollectorRegistry, generate_latest
from support.scrape import parse, value

from quiver import ConsumeResult, Message, MessageIllegalError, Producer, PushConsumer
from quiver.client.metrics import ClientMetrics
from quiver.testing import stub_cluster, wait_until


def _scrape(registry) -> dict:
    return parse(generate_latest(registry).decode())


def test_a_producer_records_sends_by_topic_and_result():
    registry = CollectorRegistry()
    metrics = ClientMetrics(registry)
    with stub_cluster() as c:
        c.admin().create_topic("Cm", queues=2)
        with c.client(Producer, "cmp", metrics=metrics, max_message_bytes=100) as p:
            p.send(Message("Cm", b"one"))
            p.send_batch([Message("Cm", b"a"), Message("Cm", b"b")])
            p.send_async(Message("Cm", b"later")).result(10)
            p.send_orderly(Message("Cm", b"o"), "k")
            try:
                p.send(Message("Cm", b"x" * 101))
            except MessageIllegalError:
                pass
            else:
                raise AssertionError("a body over max_message_bytes was sent")
        got = _scrape(registry)
    assert value(got, "quiver_client_send_messages_total", topic="Cm", result="send_ok") == 5
    assert value(got, "quiver_client_send_messages_total", topic="Cm", result="failed") == 1
    assert value(got, "quiver_client_send_errors_total", topic="Cm", error="MessageIllegalError") == 1
    assert value(got, "quiver_client_send_latency_seconds_count", topic="Cm") == 5   # calls: 4 sent, 1 refused


def test_a_push_consumer_records_listener_calls_consumed_and_failed():
    registry = CollectorRegistry()
    metrics = ClientMetrics(registry)
    with stub_cluster() as c:
        c.admin().create_topic("Cq", queues=1)
        with c.client(Producer, "cqp") as p:
            for body in (b"ok-1", b"bad", b"ok-2"):
                p.send(Message("Cq", body))
        failed_once = set()

        def listener(msgs):
            for m in msgs:
                if m.body == b"bad" and m.msg_id not in failed_once:
                    failed_once.add(m.msg_id)
                    raise RuntimeError("first delivery fails")
            return ConsumeResult.SUCCESS
        consumer = c.client(PushConsumer, "cq-g", consume_from="first", batch_size=1, metrics=metrics)
        consumer.subscribe("Cq")
        consumer.register(listener)
        with consumer:
            assert wait_until(lambda: value(_scrape(registry), "quiver_client_consume_messages_total",
                                            consumer_group="cq-g", topic="Cq", result="consumed") == 2, timeout=20)
        got = _scrape(registry)
    assert value(got, "quiver_client_consume_messages_total", consumer_group="cq-g", topic="Cq", result="failed") == 1
    assert value(got, "quiver_client_consume_latency_seconds_count", consumer_group="cq-g") >= 3


def test_clients_without_metrics_do_not_import_prometheus_client():
    code = ("import sys\nfrom quiver.client import producer, push_consumer\n"
            "print('prometheus_client' in sys.modules, producer.Producer('p', namesrv='127.0.0.1:1').metrics)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "None"]
