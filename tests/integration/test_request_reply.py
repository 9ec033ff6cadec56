"""Request-reply over real processes: a name server, two brokers, a replier process (a
PushConsumer answering with Producer.reply) and this process asking, 50 requests with the sync
Producer and 50 with AsyncProducer; every reply matched to its request, p50 round trip printed."""

import asyncio
import statistics
import subprocess
import sys
import time

import pytest

from quiver.client.access import broker_access
from quiver import Admin, Message, Producer
from quiver.aio import AsyncProducer
from quiver.wire.properties import CORRELATION_ID
from support.waiting import wait_for

pytestmark = pytest.mark.timeout(120)   # a replier that never says ready fails, not hangs

REPLIER = """
import sys, threading
from quiver import ConsumeResult, Producer, PushConsumer
ns = sys.argv[1]
replier = Producer("rr-replier", namesrv=ns).start()
consumer = PushConsumer("rr-cg", namesrv=ns, consume_from="first")
consumer.subscribe("RrAsk", "*")
def on(msgs):
    for m in msgs:
        replier.reply(m, b"re:" + m.body)
    return ConsumeResult.SUCCESS
consumer.register(on)
consumer.start()
print("ready", flush=True)
sys.stdin.read()   # until the test closes our stdin
consumer.shutdown()
replier.shutdown()
"""


def _ask_sync(ns, n):
    out = []
    with Producer("rr-sync", namesrv=ns) as p:
        for i in range(n):
            t0 = time.perf_counter()
            reply = p.request(Message("RrAsk", b"s%d" % i), timeout=10)
            out.append((b"s%d" % i, reply, time.perf_counter() - t0))
    return out


async def _ask_async(ns, n):
    async with AsyncProducer("rr-async", namesrv=ns) as p:
        async def one(i):
            t0 = time.perf_counter()
            reply = await p.request(Message("RrAsk", b"a%d" % i), timeout=10)
            return b"a%d" % i, reply, time.perf_counter() - t0
        return await asyncio.gather(*(one(i) for i in range(n)))


def test_fifty_sync_and_fifty_asyncio_requests_each_get_their_reply(make_cluster):
    cluster = make_cluster(brokers=2)
    ns = cluster.namesrv
    Admin(namesrv=ns).create_topic("RrAsk", queues=2)
    with Producer("rr-probe", namesrv=ns) as probe:
        routed = broker_access(probe).route
        wait_for(lambda: len(routed("RrAsk", refresh=True).write_queues) == 4, 20, "the route on both brokers")
    proc = subprocess.Popen([sys.executable, "-c", REPLIER, ns], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        sync = _ask_sync(ns, 50)
        aio = asyncio.run(_ask_async(ns, 50))
    finally:
        proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for asked, reply, _ in sync + list(aio):
        assert reply.body == b"re:" + asked
        assert len(reply.properties[CORRELATION_ID]) == 32
    assert len({r.properties[CORRELATION_ID] for _, r, _ in sync + list(aio)}) == 100
    assert len({r.broker for _, r, _ in sync}) == 2   # requests on both brokers, each answered from its own
    p50_sync = statistics.median(t for *_, t in sync) * 1000
    p50_aio = statistics.median(t for *_, t in aio) * 1000
    print(f"request-reply round trip p50: sync {p50_sync:.1f} ms (one at a time), "
          f"asyncio {p50_aio:.1f} ms (50 at once)")
