"""AsyncAdmin: every Admin call awaited, run on the client's control thread (bridge.py).

Admin calls are few and multi-step (a topic on every broker, then waiting for
its route), so they reuse Admin as is, one at a time, off the loop. Does not
own any admin logic (quiver.client.admin).
"""

from __future__ import annotations

from typing import Any

from quiver.aio.bridge import AsyncClient
from quiver.client.admin import Admin, OffsetReset
from quiver.client.base import MessageQueue
from quiver.client.message import MessageExt, SendResult
from quiver.wire.curve import Credentials


class AsyncAdmin(AsyncClient[Admin]):
    """Admin for asyncio: the same methods, awaited. Needs no start (as Admin); `async with`
    shuts it down.

        async with AsyncAdmin(namesrv="127.0.0.1:9876") as admin:
            await admin.create_topic("Orders", queues=4)
            rows = await admin.consumer_progress("cg")
    """

    def __init__(self, namesrv: str | list[str] | None = None, timeout: float = 5.0,
                 credentials: str | Credentials | None = None) -> None:
        super().__init__()
        self._sync = self._make(Admin, namesrv, timeout, credentials)
        self._started = True  # Admin starts in its constructor

    async def call(self, method: str, *args: Any, **kw: Any) -> Any:
        """Any other Admin method by name, e.g. `await admin.call("acl_list")`."""
        return await self._blocking(getattr(self._sync, method), *args, **kw)

    # ---- topics -----------------------------------------------------------------------------

    async def create_topic(self, topic: str, queues: int = 4, perm: int = 6, order: bool = False,
                           brokers: list[str] | None = None, wait_s: float = 5.0, *,
                           write_queues: int | None = None, force: bool = False) -> dict[str, Any]:
        """Create (or update) a topic on every broker (or the named ones); returns once routed.
        Lowering read queues that hold a backlog raises IllegalOperationError unless `force`."""
        return await self._blocking(self._sync.create_topic, topic, queues, perm, order, brokers, wait_s,
                                    write_queues=write_queues, force=force)

    async def delete_topic(self, topic: str) -> None:
        """Delete the topic on every broker (`Admin.delete_topic`)."""
        await self._blocking(self._sync.delete_topic, topic)

    async def topic_route(self, topic: str) -> dict[str, Any]:
        """The name server's route of `topic`, as sent (`Admin.topic_route`)."""
        return await self._blocking(self._sync.topic_route, topic)

    async def topic_list(self) -> list[str]:
        """Every topic the name servers route."""
        return await self._blocking(self._sync.topic_list)

    async def queues(self, topic: str) -> list[MessageQueue]:
        """`topic`'s readable queues (TopicNotExistError if it has no route)."""
        return await self._blocking(self._sync.queues, topic)

    async def cluster_info(self) -> dict[str, Any]:
        """The name server's cluster info (`ClientBase.cluster_info`)."""
        return await self._blocking(self._sync.cluster_info)

    # ---- messages -------------------------------------------------------------------------

    async def query_by_key(self, topic: str, key: str, max_num: int = 32, begin_ms: int = 0,
                           end_ms: int = 2 ** 62) -> list[MessageExt]:
        """Messages of `topic` with this key or unique id, oldest first (`Admin.query_by_key`)."""
        return await self._blocking(self._sync.query_by_key, topic, key, max_num, begin_ms, end_ms)

    async def trace(self, msg_id: str, max_records: int = 256) -> list[dict[str, Any]]:
        """The message's trace timeline (`Admin.trace`)."""
        return await self._blocking(self._sync.trace, msg_id, max_records)

    async def view_message(self, msg_id: str, topic: str | None = None) -> MessageExt:
        """One message by offset msgId, or by unique id within `topic` (`Admin.view_message`)."""
        return await self._blocking(self._sync.view_message, msg_id, topic)

    # ---- offsets and groups ------------------------------------------------------------------

    async def max_offset(self, mq: MessageQueue) -> int:
        """The queue's next offset to be written."""
        return await self._blocking(self._sync.max_offset, mq)

    async def min_offset(self, mq: MessageQueue) -> int:
        """The queue's first offset still stored."""
        return await self._blocking(self._sync.min_offset, mq)

    async def search_offset(self, mq: MessageQueue, ts_ms: int) -> int:
        """The queue's first offset stored at or after `ts_ms` (epoch ms)."""
        return await self._blocking(self._sync.search_offset, mq, ts_ms)

    async def consumer_offset(self, group: str, mq: MessageQueue) -> int | None:
        """`group`'s committed offset of the queue, None if none."""
        return await self._blocking(self._sync.consumer_offset, group, mq)

    async def reset_offset(self, group: str, topic: str, ts_ms: int | None = None, *,
                           offset: int | None = None) -> OffsetReset:
        """Move `group`'s offsets on `topic` to a time or an offset (`Admin.reset_offset`)."""
        return await self._blocking(self._sync.reset_offset, group, topic, ts_ms, offset=offset)

    async def consumer_stats(self, group: str) -> dict[str, Any]:
        """Every broker's view of `group`: rows per queue, members, conflicts (`Admin.consumer_stats`)."""
        return await self._blocking(self._sync.consumer_stats, group)

    async def consumer_progress(self, group: str, topics: list[str] | None = None) -> list[dict[str, Any]]:
        """Per queue: offsets, lag, last consume time, owner (`Admin.consumer_progress`)."""
        return await self._blocking(self._sync.consumer_progress, group, topics)

    async def set_group_config(self, group: str, retry_max_times: int = 16) -> None:
        """The group's max reconsume times before the DLQ, on every broker."""
        await self._blocking(self._sync.set_group_config, group, retry_max_times)

    async def dlq_messages(self, group: str, max_num: int = 64) -> list[MessageExt]:
        """Messages in `%DLQ%<group>`, oldest first (`Admin.dlq_messages`)."""
        return await self._blocking(self._sync.dlq_messages, group, max_num)

    async def resend_dlq(self, group: str, msg_ids: list[str] | None = None) -> list[SendResult]:
        """Send dead letters back to their original topic (`Admin.resend_dlq`)."""
        return await self._blocking(self._sync.resend_dlq, group, msg_ids)

    # ---- cluster --------------------------------------------------------------------------

    async def status(self, addr: str) -> dict[str, Any]:
        """The STATUS map of the service at `addr`."""
        return await self._blocking(self._sync.status, addr)

    async def ping(self, addr: str, timeout: float = 1.0) -> dict[str, Any]:
        """PING the service at `addr` (`Admin.ping`)."""
        return await self._blocking(self._sync.ping, addr, timeout)

    async def open_transactions(self, limit: int = 1000) -> dict[str, list[dict[str, Any]]]:
        """Per broker: open half messages, oldest first (`Admin.open_transactions`)."""
        return await self._blocking(self._sync.open_transactions, limit)
