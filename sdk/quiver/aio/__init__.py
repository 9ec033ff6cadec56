"""quiver.aio: the SDK's clients for asyncio.

    from quiver import Message
    from quiver.aio import AsyncProducer

    async with AsyncProducer("pg", namesrv="127.0.0.1:9876") as p:
        r = await p.send(Message("Orders", b"o-1"))

Each async client wraps the sync client of the same name and reuses its
machinery (IO thread, batching, retries, rebalancing, the consume pool): sends
and pulls complete on the IO thread and are handed to the loop with
`call_soon_threadsafe`, with no thread or task per call; the few blocking
steps (start, shutdown, route refresh, commit, admin) run on one control
thread per client. bridge.py describes the design.
"""

from quiver.aio.admin import AsyncAdmin
from quiver.aio.consumer import AsyncPullConsumer
from quiver.aio.producer import AsyncProducer, AsyncTransactionProducer
from quiver.aio.deliveries import Delivery
from quiver.aio.push_consumer import AsyncPushConsumer
from quiver.aio.simple_consumer import AsyncSimpleConsumer

__all__ = ["AsyncAdmin", "AsyncProducer", "AsyncPullConsumer", "AsyncPushConsumer", "AsyncSimpleConsumer",
           "AsyncTransactionProducer", "Delivery"]
