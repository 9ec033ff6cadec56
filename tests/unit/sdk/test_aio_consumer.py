"""quiver.aio consumers against real brokers on quiver.testing's fake network (no processes)."""

import asyncio

import pytest

from quiver import ConsumeResult, Message, Producer
from quiver.aio import AsyncPullConsumer, AsyncPushConsumer
from quiver.errors import ClientError, TopicNotExistError
from quiver.testing import stub_cluster
from quiver.wire.codes import RequestCode


@pytest.fixture
def one():
    with stub_cluster() as c:
        c.admin().create_topic("Orders", queues=2)
        yield c


def _produce(cluster, n, topic="Orders", key=None):
    with cluster.client(Producer, "pg") as p:
        for i in range(n):
            msg = Message(topic, b"m%d" % i)
            p.send_orderly(msg, key) if key else p.send(msg)


def test_async_for_commit_and_resume_where_committed(one):
    _produce(one, 20)

    async def read(n):
        c = one.client(AsyncPullConsumer, "cg", consume_from="first", auto_commit=False)
        c.subscribe("Orders")
        got = []
        async with c:
            async for msg in c:
                got.append(msg.body)
                if len(got) == n:
                    await c.commit()
                    break
            rest = await c.poll(0.2)
        return got, rest
    first, _ = asyncio.run(read(12))
    second, rest = asyncio.run(read(8))
    assert len(set(first)) == 12 and len(set(second)) == 8
    assert set(first) | set(second) == {b"m%d" % i for i in range(20)} and rest == []


def test_poll_waits_without_blocking_the_loop_and_iteration_ends_at_shutdown(one):
    async def main():
        c = one.client(AsyncPullConsumer, "cg", consume_from="first")
        c.subscribe("Orders")
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1
        t = asyncio.create_task(ticker())
        await c.start()
        empty = await c.poll(0.3)
        await asyncio.get_running_loop().run_in_executor(None, _produce, one, 1)
        arrived = await c.poll(5.0)
        it = asyncio.create_task(_drain(c))
        await asyncio.sleep(0.05)
        await c.shutdown()
        drained = await asyncio.wait_for(it, 5)
        t.cancel()
        return empty, arrived, ticks, drained
    empty, arrived, ticks, drained = asyncio.run(main())
    assert empty == [] and [m.body for m in arrived] == [b"m0"]
    assert ticks > 5          # the loop ran other tasks while poll waited
    assert drained == []      # `async for` ended when the consumer shut down


async def _drain(c):
    return [m async for m in c]


def test_poll_of_a_missing_topic_raises_with_wait_for_topic_false(one):
    async def main():
        c = one.client(AsyncPullConsumer, "cg", wait_for_topic=False)
        c.subscribe("NoSuchTopic")
        async with c:
            with pytest.raises(TopicNotExistError):
                await c.poll(2.0)
        waiting = one.client(AsyncPullConsumer, "cg-waits")
        waiting.subscribe("NoSuchTopic")
        async with waiting:
            assert await waiting.poll(0.5) == [] and waiting.stats()["missing_topics"] == ["NoSuchTopic"]
    asyncio.run(main())


def test_push_listener_coroutine_success_and_retry(one):
    async def main():
        seen, done = [], asyncio.Event()

        async def handle(msgs):
            await asyncio.sleep(0)
            seen.extend(m.body for m in msgs)
            if len(seen) >= 3:
                done.set()
            if msgs[0].body == b"m1":
                return ConsumeResult.RECONSUME_LATER
            if msgs[0].body == b"m2":
                raise RuntimeError("counts as RECONSUME_LATER")
            return ConsumeResult.SUCCESS
        c = one.client(AsyncPushConsumer, "cg", consume_from="first")
        c.subscribe("Orders")
        c.register(handle)
        async with c:
            await asyncio.get_running_loop().run_in_executor(None, _produce, one, 3)
            await asyncio.wait_for(done.wait(), 10)
        return seen
    seen = asyncio.run(main())
    assert sorted(seen) == [b"m0", b"m1", b"m2"]
    assert one.network.count(RequestCode.CONSUMER_SEND_MSG_BACK) == 2   # both failures went back


def test_push_orderly_keeps_queue_order(one):
    async def main():
        seen, done = [], asyncio.Event()

        async def handle(msgs):
            for m in msgs:
                await asyncio.sleep(0.001)   # yields: another queue's call may run, this one's may not
                seen.append(m.body)
            if len(seen) >= 10:
                done.set()
            return ConsumeResult.SUCCESS
        c = one.client(AsyncPushConsumer, "og", consume_from="first")
        c.subscribe("Orders")
        c.register(handle, orderly=True)
        async with c:
            await asyncio.get_running_loop().run_in_executor(None, _produce, one, 10, "Orders", "k")
            await asyncio.wait_for(done.wait(), 10)
        return seen
    assert asyncio.run(main()) == [b"m%d" % i for i in range(10)]


def test_push_needs_a_listener_and_enters_only_when_ready(one):
    async def main():
        c = one.client(AsyncPushConsumer, "cg")
        async with c:                       # nothing registered: not started, as PushConsumer's `with`
            assert c.assignment() == []
        c.subscribe("Orders")
        with pytest.raises(ClientError, match="listener"):
            await c.start()
    asyncio.run(main())


def test_async_for_over_push_deliveries_settles_each_message(one):
    async def main():
        c = one.client(AsyncPushConsumer, "cg", consume_from="first")
        c.subscribe("Orders")
        await asyncio.get_running_loop().run_in_executor(None, _produce, one, 4)
        acked, later = [], []
        async for d in c:                       # starts the consumer
            if d.message.body == b"m1":
                d.later()                       # sent back to the retry topic
                later.append(d.message.body)
            else:
                d.ack()
                acked.append(d.message.body)
            with pytest.raises(ClientError, match="settled already"):
                d.ack()
            if len(acked) + len(later) == 4:
                await c.shutdown()              # the loop ends
        return acked, later
    acked, later = asyncio.run(main())
    assert sorted(acked) == [b"m0", b"m2", b"m3"] and later == [b"m1"]
    assert one.network.count(RequestCode.CONSUMER_SEND_MSG_BACK) == 1


def test_an_unsettled_delivery_goes_back_and_does_not_hold_the_shutdown(one):
    async def main():
        c = one.client(AsyncPushConsumer, "cg", consume_from="first")
        c.subscribe("Orders")
        await asyncio.get_running_loop().run_in_executor(None, _produce, one, 2)
        seen = []
        async for d in c.deliveries(settle_timeout_s=0.3):
            seen.append(d)                      # never settled
            if len(seen) == 2:
                break
        assert await asyncio.wait_for(_sent_back(one, 2), 10)   # the settle timeout passed: both went back
        await asyncio.wait_for(c.shutdown(), 20)
        other = one.client(AsyncPushConsumer, "cg2", consume_batch_size=4)
        other.subscribe("Orders")
        with pytest.raises(ClientError, match="consume_batch_size"):
            async for _ in other:
                pass
        return seen
    assert len(asyncio.run(main())) == 2


def test_shutdown_with_deliveries_in_hand_returns(one):
    async def main():
        c = one.client(AsyncPushConsumer, "cg", consume_from="first")
        c.subscribe("Orders")
        await asyncio.get_running_loop().run_in_executor(None, _produce, one, 3)
        async for d in c:                       # 15 minutes to settle: the shutdown must not wait
            break
        await asyncio.wait_for(c.shutdown(), 20)
        return d.settled
    assert asyncio.run(main())                  # counted as later(): redelivered, never lost


async def _sent_back(cluster, n):
    while cluster.network.count(RequestCode.CONSUMER_SEND_MSG_BACK) < n:
        await asyncio.sleep(0.05)
    return True


def test_shutdown_inside_the_loop_ends_it_at_once(one):
    async def main():
        c = one.client(AsyncPushConsumer, "cg", consume_from="first")
        c.subscribe("Orders")
        await asyncio.get_running_loop().run_in_executor(None, _produce, one, 6)
        seen = 0
        async for d in c:
            seen += 1
            d.ack()
            await asyncio.sleep(0.2)            # the others queue up meanwhile
            await c.shutdown()                  # those are not handed out: no settled ones show
        return seen
    assert asyncio.run(main()) == 1
