"""quiver.aio against real processes: many sends in flight from one task, a coroutine listener
asking for a retry, and examples/order_service.py over real HTTP."""

import asyncio
import json
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request

import pytest

from quiver import Admin, ConsumeResult, Message, SendStatus
from quiver.aio import AsyncAdmin, AsyncProducer, AsyncPullConsumer, AsyncPushConsumer
from quiver.tools.local import free_port
from support.waiting import wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# 18 levels; the first retry (level 3) is short so a retried message returns well under a second
LEVELS = "100ms 100ms 100ms 200ms 200ms 200ms 200ms 200ms 200ms 200ms 200ms 200ms 200ms 200ms 200ms 200ms 200ms 200ms"


@pytest.fixture
def retry_cluster(make_cluster):
    c = make_cluster(broker_args=("--delay-levels", LEVELS))
    c.add_service("scheduler", "quiver_scheduler")
    c.wait()
    return c


def test_a_thousand_sends_in_flight_from_one_task_then_read_back(cluster):
    Admin(namesrv=cluster.namesrv).create_topic("AioBulk", queues=4)

    async def main():
        async with AsyncProducer("aio-pg", namesrv=cluster.namesrv) as p:
            await p.send(Message("AioBulk", b"warm-up"))
            before = threading.active_count()
            futs = [p.send_async(Message("AioBulk", b"%d" % i)) for i in range(1000)]
            results = await asyncio.gather(*futs)
            more = await asyncio.gather(*(p.send(Message("AioBulk", b"again")) for _ in range(200)))
            after = threading.active_count()
        c = AsyncPullConsumer("aio-cg", namesrv=cluster.namesrv, consume_from="first", auto_commit=False)
        c.subscribe("AioBulk")
        got = set()
        async with c:
            async for msg in c:
                got.add(msg.msg_id)
                if len(got) == 1201:
                    break
            await c.commit()
        async with AsyncAdmin(namesrv=cluster.namesrv) as admin:
            progress = await admin.consumer_progress("aio-cg")
        return results + more, before, after, got, progress
    results, before, after, got, progress = asyncio.run(main())
    assert all(r.status is SendStatus.SEND_OK for r in results) and len({r.msg_id for r in results}) == 1200
    assert after == before            # no thread per send
    assert {r.msg_id for r in results} <= got
    assert sum(row["consumer_offset"] for row in progress if row["topic"] == "AioBulk") == 1201


def test_push_listener_coroutine_returns_a_retry_then_succeeds(retry_cluster):
    c = retry_cluster
    Admin(namesrv=c.namesrv).create_topic("AioWork", queues=2)

    async def main():
        seen, done = [], asyncio.Event()

        async def handle(msgs):
            m = msgs[0]
            seen.append((m.topic, m.body, m.reconsume_times))
            await asyncio.sleep(0)
            if m.reconsume_times < 1:
                return ConsumeResult.RECONSUME_LATER
            done.set()
            return ConsumeResult.SUCCESS
        consumer = AsyncPushConsumer("aio-rg", namesrv=c.namesrv, consume_from="first")
        consumer.subscribe("AioWork")
        consumer.register(handle)
        async with consumer, AsyncProducer("aio-pg", namesrv=c.namesrv) as p:
            sent = await p.send(Message("AioWork", b"job-1"))
            await asyncio.wait_for(done.wait(), 30)
        return sent, seen
    sent, seen = asyncio.run(main())
    assert seen == [("AioWork", b"job-1", 0), ("AioWork", b"job-1", 1)]
    assert sent.status is SendStatus.SEND_OK


def _http(method: str, url: str, body: dict | None = None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:   # 4xx: the service's own answer, JSON or plain text
        is_json = exc.headers.get_content_type() == "application/json"
        return exc.code, json.loads(exc.read()) if is_json else {}
    except (urllib.error.URLError, ConnectionError):
        return 0, {}


def _handled(url: str) -> tuple[int, dict] | None:
    answer = _http("GET", url)
    return answer if answer[0] == 200 else None


@pytest.fixture
def order_service(retry_cluster, tmp_path):
    port = free_port()
    log = open(tmp_path / "order_service.log", "w")
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "examples", "order_service.py"),
                             "--namesrv", retry_cluster.namesrv, "--listen", f"127.0.0.1:{port}",
                             "--consume-from", "first"], stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _http("GET", f"{base}/health")[0] == 200 or proc.poll() is not None, 30,
                 "the order service to answer /health")
        assert proc.poll() is None, (tmp_path / "order_service.log").read_text()
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()


def test_order_service_publishes_and_handles_orders_over_http(order_service):
    base = order_service
    accepted = []
    for i in range(20):
        status, body = _http("POST", f"{base}/orders", {"order_id": f"o-{i}", "item": "flaky" if i == 7 else "book"})
        assert status == 202 and body["status"] == "accepted", body
        accepted.append(body["msg_id"])
    assert len(set(accepted)) == 20
    assert _http("POST", f"{base}/orders", {"item": "no id"})[0] == 400
    for i in range(20):
        status, body = wait_for(lambda: _handled(f"{base}/orders/o-{i}"), 30, f"order o-{i} to be handled")
        assert body["status"] == "handled"
        assert body["deliveries"] == (2 if i == 7 else 1)   # the flaky one came back through a retry
    assert _http("GET", f"{base}/orders/never")[0] == 404


def test_a_coroutine_listener_chooses_its_retry_delay_in_seconds(retry_cluster):
    c = retry_cluster
    Admin(namesrv=c.namesrv).create_topic("AioLater", queues=1)

    async def main():
        seen, done = [], asyncio.Event()

        async def handle(msgs):
            m = msgs[0]
            seen.append(m.reconsume_times)
            if m.reconsume_times == 0:
                return ConsumeResult.later(seconds=0.3)   # through the scheduler's timer, not a level
            done.set()
            return ConsumeResult.SUCCESS
        consumer = AsyncPushConsumer("aio-lg", namesrv=c.namesrv, consume_from="first")
        consumer.subscribe("AioLater")
        consumer.register(handle)
        async with consumer, AsyncProducer("aio-pg", namesrv=c.namesrv) as p:
            await p.send(Message.json("AioLater", {"job": 1}))
            await asyncio.wait_for(done.wait(), 30)
        return seen
    assert asyncio.run(main()) == [0, 1]
