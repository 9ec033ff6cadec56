"""quiver.aio producers against real brokers on quiver.testing's fake network (no processes)."""

import asyncio
import threading

import pytest

from quiver import Message, SendStatus, TransactionState
from quiver.aio import AsyncAdmin, AsyncProducer, AsyncTransactionProducer
from quiver.client.base import MessageQueue
from quiver.client.transaction_producer import transaction_id
from quiver.errors import ClientError, MessageIllegalError, SystemBusyError
from quiver.testing import stub_cluster
from quiver.wire.codes import RequestCode, ResponseCode

SEND = RequestCode.SEND_MESSAGE


@pytest.fixture
def two():
    with stub_cluster(brokers=2) as c:
        c.admin().create_topic("Orders", queues=2)
        yield c


def _stored(cluster, topic):
    return sum(app.store.max_offset(topic, q) for app in cluster.brokers.values() for q in range(4))


def test_send_and_many_in_flight_from_one_task_without_new_threads(two):
    async def main():
        async with two.client(AsyncProducer, "pg") as p:
            first = await p.send(Message("Orders", b"warm"))
            before = threading.active_count()
            futs = [p.send_async(Message("Orders", b"%d" % i)) for i in range(1000)]
            results = await asyncio.gather(*futs)
            return first, results, before, threading.active_count()
    first, results, before, after = asyncio.run(main())
    assert first.status is SendStatus.SEND_OK
    assert len({r.msg_id for r in results}) == 1000 and all(r.status is SendStatus.SEND_OK for r in results)
    assert after == before
    assert _stored(two, "Orders") == 1001


def test_send_orderly_batch_oneway_and_a_new_topic(two):
    async def main():
        async with two.client(AsyncProducer, "pg") as p:
            ordered = [await p.send_orderly(Message("Orders", b"o%d" % i), "order-7") for i in range(5)]
            batch = await p.send_batch([Message("Orders", b"b1"), Message("Orders", b"b2")])
            await p.send_oneway(Message("Orders", b"one-way"))
            fresh = await p.send(Message("BrandNew", b"auto-created"))
            return ordered, batch, fresh
    ordered, batch, fresh = asyncio.run(main())
    assert len({(r.broker, r.queue_id) for r in ordered}) == 1
    assert [r.queue_offset for r in ordered] == sorted(r.queue_offset for r in ordered)
    assert len(batch) == 2 and batch[1].queue_offset == batch[0].queue_offset + 1
    assert fresh.status is SendStatus.SEND_OK
    assert _stored(two, "BrandNew") == 1


def test_send_retries_on_another_broker(two):
    fault = two.network.fail(SEND, ResponseCode.SYSTEM_BUSY)

    async def main():
        async with two.client(AsyncProducer, "pg", auto_batch=False) as p:
            return await p.send(Message("Orders", b"x"))
    r = asyncio.run(main())
    assert r.status is SendStatus.SEND_OK and len(fault.hits) == 1


def test_errors_reach_the_awaiting_task(two):
    two.network.fail(SEND, ResponseCode.SYSTEM_BUSY, times=None)

    async def main():
        async with two.client(AsyncProducer, "pg", retries=1) as p:
            with pytest.raises(MessageIllegalError):
                p.send_async(Message("Orders", b""))          # invalid: raises at once
            with pytest.raises(MessageIllegalError):
                await p.send_orderly(Message("Orders", b"x"), "")
            with pytest.raises(SystemBusyError):
                await p.send(Message("Orders", b"x"))
    asyncio.run(main())


def test_not_started_says_so():
    async def main():
        p = AsyncProducer("pg", namesrv="127.0.0.1:1")
        with pytest.raises(ClientError, match="not started"):
            await p.send(Message("Orders", b"x"))
    asyncio.run(main())


def test_send_to_a_chosen_queue_and_by_selector(two):
    def by_arg(mqs, msg, arg):
        return mqs[arg % len(mqs)]

    async def main():
        async with two.client(AsyncProducer, "pg") as p:
            mq = MessageQueue("Orders", "broker-b", 1)
            direct = await p.send(Message("Orders", b"q"), queue=mq)
            chosen = [await p.send(Message("Orders", b"s"), selector=by_arg, arg=3) for _ in range(3)]
            with pytest.raises(MessageIllegalError):
                await p.send(Message("Orders", b"x"), queue=MessageQueue("Orders", "broker-b", 9))
            return direct, chosen
    direct, chosen = asyncio.run(main())
    assert (direct.broker, direct.queue_id) == ("broker-b", 1)
    assert len({(r.broker, r.queue_id) for r in chosen}) == 1


def test_transaction_with_a_coroutine_execute_commits(two):
    seen = []

    async def execute(msg, arg):
        await asyncio.sleep(0)
        seen.append((transaction_id(msg), arg))
        return TransactionState.COMMIT

    async def main():
        async with two.client(AsyncTransactionProducer, "tpg") as tp:
            ok = await tp.send_in_transaction(Message("Orders", b"tx"), execute, arg="a1")
            broken = await tp.send_in_transaction(Message("Orders", b"tx2"), _raise)
            return ok, broken
    ok, broken = asyncio.run(main())
    assert ok.local_state is TransactionState.COMMIT and seen == [(ok.transaction_id, "a1")]
    assert broken.local_state is TransactionState.UNKNOWN
    assert two.network.count(RequestCode.END_TRANSACTION) >= 2


async def _raise(msg, arg):
    raise RuntimeError("local transaction failed")


def test_admin_calls_are_awaited(two):
    async def main():
        async with two.client(AsyncAdmin) as admin:
            await admin.create_topic("Audit", queues=3)
            return await admin.topic_list(), await admin.queues("Audit"), await admin.call("topic_route", "Audit")
    topics, queues, route = asyncio.run(main())
    assert "Audit" in topics and len(queues) == 6 and route["queues"]
