"""A whole cluster behind the gRPC proxy, and RocketMQ 5 client helpers (the official client from PyPI)."""

import contextlib
import time

from rocketmq import ClientConfiguration, Credentials, FilterExpression, Producer, SimpleConsumer

from quiver import Admin
from quiver.tools.local import LocalCluster

TXN_FLAGS = ("--check-interval-ms", "300", "--transaction-timeout-ms", "2000")


def proxy_cluster(data_dir: str, *proxy_args: str):
    """Name server, broker, scheduler, txn-checker and a proxy (POP groups start from the first message).
    Returns (cluster, proxy service, Admin); stop with `cluster.stop()`."""
    c = LocalCluster(data_dir)
    try:
        c.add_core()
        c.add_service("scheduler", "quiver_scheduler")
        c.add_service("txn-checker", "quiver_txn", *TXN_FLAGS)
        proxy = c.add_proxy("--pop-consume-from", "first", *proxy_args)
        c.wait()
    except BaseException:
        c.stop()
        raise
    return c, proxy, Admin(namesrv=c.namesrv)


def config(proxy) -> ClientConfiguration:
    return ClientConfiguration(proxy.url, Credentials(), request_timeout=5)


@contextlib.contextmanager
def started(client):
    client.startup()
    try:
        yield client
    finally:
        client.shutdown()


def producer(proxy, *topics, checker=None):
    return started(Producer(config(proxy), topics, checker=checker))


def simple_consumer(proxy, group, topic, await_s=1, tag="*"):
    return started(SimpleConsumer(config(proxy), group, {topic: FilterExpression(tag)}, await_duration=await_s))


def receive_until(consumer, count, timeout, invisible_s=20, ack=True):
    """Receive (and ack) until `count` messages or the deadline; the messages in arrival order."""
    got, deadline = [], time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        for m in consumer.receive(16, invisible_s):
            if ack:
                consumer.ack(m)
            got.append(m)
    return got
