"""A RocketMQ 5 PushConsumer's slow listener: the proxy keeps its delivery invisible until it acks.

The proxy runs with --default-invisible-ms 2000; the listener takes 5 s. Without renewal the
message would come back after 2 s and reach the listener again while it still runs. The
proxy's /metrics is scraped as Prometheus does and must count what these tests did.
"""

import threading
import time
import urllib.request

import pytest
from rocketmq import ConsumeResult, FilterExpression, Message, PushConsumer
from rocketmq.v5.consumer.push import MessageListener

from quiver.tools.local import free_port
from support.proxy import config, producer, proxy_cluster
from support.scrape import parse, value
from support.waiting import wait_for

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    metrics = f"127.0.0.1:{free_port()}"
    c, proxy, admin = proxy_cluster(str(tmp_path_factory.mktemp("renewal")), "--default-invisible-ms", "2000",
                                    "--metrics-listen", metrics)
    proxy.metrics = metrics
    yield c, proxy, admin
    admin.shutdown()
    c.stop()


def _send(proxy, topic, body):
    m = Message()
    m.topic, m.body = topic, body
    with producer(proxy, topic) as p:
        p.send(m)


class Listener(MessageListener):
    def __init__(self, seconds, result=ConsumeResult.SUCCESS):
        self.seconds, self.result = seconds, result
        self.calls: list[tuple[bytes, float]] = []
        self.lock = threading.Lock()

    def consume(self, message):
        with self.lock:
            self.calls.append((message.body, time.monotonic()))
        time.sleep(self.seconds)
        return self.result


def _renewing(admin, proxy) -> int:
    return admin.status(proxy.addr)["renewing"]


def _scrape(proxy) -> dict:
    with urllib.request.urlopen(f"http://{proxy.metrics}/metrics", timeout=5) as r:
        return parse(r.read().decode())


def test_a_slow_listener_gets_its_message_once_and_the_ack_ends_the_renewal(env):
    c, proxy, admin = env
    admin.create_topic("PxSlow", queues=1)
    listener = Listener(5.0)
    pc = PushConsumer(config(proxy), "px-slow", listener, {"PxSlow": FilterExpression()})
    pc.startup()
    try:
        _send(proxy, "PxSlow", b"slow-1")
        wait_for(lambda: listener.calls, 30, "the message at the listener")
        assert value(_scrape(proxy), "quiver_proxy_renewing") == 1
        wait_for(lambda: _renewing(admin, proxy) == 0, 20, "the ack of the renewed delivery")
        time.sleep(3)                  # past another invisible time: nothing may come back
        assert [b for b, _ in listener.calls] == [b"slow-1"]
        m = _scrape(proxy)
        assert value(m, "quiver_proxy_renewing") == 0 and value(m, "quiver_proxy_renewals_total") >= 2
        assert value(m, "quiver_proxy_rpcs_total", rpc="SendMessage", code="OK") >= 1
        assert value(m, "quiver_proxy_rpcs_total", rpc="AckMessage", code="OK") >= 1
        assert value(m, "quiver_proxy_rpcs_total", rpc="ReceiveMessage", code="OK") >= 1
        assert value(m, "quiver_proxy_clients") >= 1
    finally:
        pc.shutdown()


def test_a_failed_consume_comes_back_after_the_backoff_not_the_renewal(env):
    c, proxy, admin = env
    admin.create_topic("PxNack", queues=1)
    listener = Listener(0.0, ConsumeResult.FAILURE)
    pc = PushConsumer(config(proxy), "px-nack", listener, {"PxNack": FilterExpression()})
    pc.startup()
    try:
        _send(proxy, "PxNack", b"nack-1")
        wait_for(lambda: len(listener.calls) >= 2, 30, "the redelivery after a failed consume")
        first, second = listener.calls[0][1], listener.calls[1][1]
        assert second - first >= 0.8      # the client's first backoff is 1 s (the proxy's retry policy)
    finally:
        pc.shutdown()
