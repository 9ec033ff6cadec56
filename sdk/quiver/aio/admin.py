"""AsyncAdmin: every Admin call awaited, run on the client's control thread (bridge.py).

Admin calls are few and multi-step (a topic on every broker, then waiting for
its route), so they reuse Admin as is, one at a time, off the loop. Does not
own any admin logic (quiver.client.admin).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from quiver.aio.bridge import AsyncClient
from quiver.client.acl_admin import AclChange
from quiver.client.admin import Admin, OffsetReset
from quiver.client.admin_types import ConsumerStats, HaRow, ProgressRow, QueueStatus, TraceEvent
from quiver.client.base import MessageQueue
from quiver.client.message import MessageExt, SendResult
from quiver.wire import requests as rq
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
                           write_queues: int | None = None, force: bool = False,
                           compact: bool | None = None) -> dict[str, Any]:
        """Create (or update) a topic on every broker (or the named ones); returns once routed.
        Lowering read queues that hold a backlog raises IllegalOperationError unless `force`;
        `compact=True`: a compacted topic (`Admin.create_topic`)."""
        return await self._blocking(self._sync.create_topic, topic, queues, perm, order, brokers, wait_s,
                                    write_queues=write_queues, force=force, compact=compact)

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
        """The name server's cluster info (`Admin.cluster_info`)."""
        return await self._blocking(self._sync.cluster_info)

    # ---- messages -------------------------------------------------------------------------

    async def query_by_key(self, topic: str, key: str, max_num: int = 32, begin_ms: int = 0,
                           end_ms: int = 2 ** 62) -> list[MessageExt]:
        """Messages of `topic` with this key or unique id, oldest first (`Admin.query_by_key`)."""
        return await self._blocking(self._sync.query_by_key, topic, key, max_num, begin_ms, end_ms)

    async def trace(self, msg_id: str, max_records: int = 256) -> list[TraceEvent]:
        """The message's trace timeline (`Admin.trace`)."""
        return await self._blocking(self._sync.trace, msg_id, max_records)

    async def view_message(self, msg_id: str, topic: str | None = None) -> MessageExt:
        """One message by offset msgId, or by unique id within `topic` (`Admin.view_message`)."""
        return await self._blocking(self._sync.view_message, msg_id, topic)

    # ---- offsets and groups ------------------------------------------------------------------

    async def max_offset(self, mq: MessageQueue) -> int:
        """The queue's next offset to be written."""
        return await self._blocking(self._sync.max_offset, mq)

    async def min_offset(self, mq: MessageQueue, local: bool = False, compacted: bool = False) -> int:
        """The queue's first offset still stored (`local`, `compacted`: as `Admin.min_offset`)."""
        return await self._blocking(self._sync.min_offset, mq, local, compacted)

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

    async def consumer_stats(self, group: str) -> ConsumerStats:
        """Every broker's view of `group`: rows per queue, members, conflicts (`Admin.consumer_stats`)."""
        return await self._blocking(self._sync.consumer_stats, group)

    async def consumer_progress(self, group: str, topics: list[str] | None = None) -> list[ProgressRow]:
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

    # ---- the rest of Admin, awaited (a test holds the two surfaces equal) --------------------

    async def acl_add_user(self, name: str, super_user: bool = False) -> Credentials:
        """Add a user with a new key pair (or give an existing user a new one: its old key stops
        working at once). Returns the user's Credentials: save them with
        `quiver.wire.curve.write_credentials(path, creds)` and hand the file to the user."""
        return await self._blocking(self._sync.acl_add_user, name, super_user)

    async def acl_delete_user(self, name: str) -> AclChange:
        """Remove a user (its key stops working) on every master."""
        return await self._blocking(self._sync.acl_delete_user, name)

    async def acl_grant(self, user: str, resource: str, actions: str | Iterable[str], deny: bool = False,
                        source: str | None = None) -> AclChange:
        """Allow (or with deny=True, deny) `actions` ("PUB", "SUB", ... or "ALL") on `resource`
        ("cluster", "topic:NAME", "group:NAME", a trailing '*' for a prefix), from `source` (CIDR)."""
        return await self._blocking(self._sync.acl_grant, user, resource, actions, deny, source)

    async def acl_list(self) -> dict[str, dict[str, Any]]:
        """Each master's ACL: broker name -> {"version", "users": [[name, key, type]],
        "rules": [[user, resource, actions, decision, source]]} (or {"error": text})."""
        return await self._blocking(self._sync.acl_list)

    async def acl_revoke(self, user: str, resource: str, actions: str | Iterable[str] | None = None,
                         deny: bool = False, source: str | None = None) -> AclChange:
        """Remove `user`'s rules on `resource` of this decision (`deny`) and `source` on every
        master, or only `actions` ("PUB", "SUB", ...) of them (None: all)."""
        return await self._blocking(self._sync.acl_revoke, user, resource, actions, deny, source)

    async def backup(self, broker: str, name: str, timeout: float = 600.0, url: str | None = None,
                     endpoint: str | None = None) -> rq.BrokerBackupReply:
        """Snapshot a running broker (`broker`: its address, or a broker name whose master is
        taken) into `name` under its --backup-dir, or uploaded to `url` (`Admin.backup`)."""
        return await self._blocking(self._sync.backup, broker, name, timeout, url, endpoint)

    async def broker_statuses(self) -> dict[str, dict[str, Any]]:
        """broker name -> its master's STATUS (groups, effective config, store ...)."""
        return await self._blocking(self._sync.broker_statuses)

    async def clean_expired(self, broker_addr: str) -> int:
        """Delete the broker's expired CommitLog segments now; how many were deleted."""
        return await self._blocking(self._sync.clean_expired, broker_addr)

    async def clean_expired_all(self) -> dict[str, int | str]:
        """Delete expired CommitLog segments now on every broker (RocketMQ cleanExpiredCQ /
        deleteExpiredCommitLog): deleted segment count, or the error, per broker."""
        return await self._blocking(self._sync.clean_expired_all)

    async def compact_topic(self, topic: str, timeout: float = 600.0) -> dict[str, dict[str, int]]:
        """Run a compaction pass over a compacted topic on every broker that has it, now; returns
        per broker name the queues compacted and the records read and kept."""
        return await self._blocking(self._sync.compact_topic, topic, timeout)

    async def delete_group(self, group: str, clean_offset: bool = True) -> list[str]:
        """Delete a group's config (and offsets) on every broker (RocketMQ deleteSubGroup); the
        brokers that knew it. Raises SubscriptionGroupNotExistError when none did."""
        return await self._blocking(self._sync.delete_group, group, clean_offset)

    async def group_config(self, group: str) -> dict[str, dict[str, Any] | None]:
        """broker name -> the group's stored config on it (None: not configured there)."""
        return await self._blocking(self._sync.group_config, group)

    async def group_list(self) -> dict[str, dict[str, Any]]:
        """Every consumer group some broker knows: {group: {brokers, config, offsets, online}}
        (config: the stored one, None where the broker's defaults apply)."""
        return await self._blocking(self._sync.group_list)

    async def ha_status(self) -> list[HaRow]:
        """One row per broker address (master id 0, slaves >= 1): role, CommitLog max
        offset and, for a slave, its replication lag in bytes and ms as its master counts
        it (lag_ms: age of the oldest byte the slave has not acknowledged)."""
        return await self._blocking(self._sync.ha_status)

    async def message_at(self, mq: MessageQueue, offset: int) -> MessageExt | None:
        """The message at a queue offset (RocketMQ queryMsgByOffset), None when there is none."""
        return await self._blocking(self._sync.message_at, mq, offset)

    async def messages_between(self, topic: str, begin_ms: int, end_ms: int, max_num: int = 32) -> list[MessageExt]:
        """Messages of `topic` stored in [begin_ms, end_ms), oldest first, at most `max_num`: each
        queue is read from its first offset stored at or after `begin_ms` (the web console's
        search by time)."""
        return await self._blocking(self._sync.messages_between, topic, begin_ms, end_ms, max_num)

    async def purge_topic(self, topic: str) -> dict[str, dict[str, Any]]:
        """Drop every message of `topic`: each broker that has it deletes it (config, ConsumeQueue
        files, offsets) and creates it again with the same queues, perm, order and compaction. Sends in
        between fail (or, with auto-create on, make the topic with default queues). Returns the
        config re-created per broker; raises TopicNotExistError when no broker has the topic."""
        return await self._blocking(self._sync.purge_topic, topic)

    async def scheduler_addrs(self, group: str = "SCHEDULE_CONSUMER") -> list[str]:
        """Addresses of the live schedulers (their client ids, listed by the brokers, name them)."""
        return await self._blocking(self._sync.scheduler_addrs, group)

    async def scheduler_status(self, group: str = "SCHEDULE_CONSUMER") -> dict[str, dict[str, Any]]:
        """STATUS of every scheduler: pending per level and timers, delivery lag p50/p99."""
        return await self._blocking(self._sync.scheduler_status, group)

    async def shrink_topic(self, topic: str, queues: int, wait_s: float = 0.0, poll_s: float = 2.0) -> dict[str, Any]:
        """RocketMQ's safe way to take queues from a topic: every broker's write queues go down to
        `queues` at once (no new message lands on the others), the read queues only once every
        group consumed what the others hold (the broker refuses earlier). Tries for up to
        `wait_s`; returns {"brokers", "write_done", "read_done", "behind": the broker's remark
        while a backlog remains}. Raises TopicNotExistError when no broker has the topic."""
        return await self._blocking(self._sync.shrink_topic, topic, queues, wait_s, poll_s)

    async def subscription_conflicts(self, group: str) -> dict[str, Any]:
        """topic -> {"TAG:expr": [client ids]} where members of `group` subscribe differently."""
        return await self._blocking(self._sync.subscription_conflicts, group)

    async def topic_configs(self) -> dict[str, dict[str, Any]]:
        """broker name -> {topic: {read, write, perm, order, ...}} as each broker stores them."""
        return await self._blocking(self._sync.topic_configs)

    async def topic_status(self, topic: str) -> list[QueueStatus]:
        """One row per queue: broker, queue_id, min/max offset, local_min_offset (offsets below it are
        served from the broker's tiered store), compacted_to (offsets below it keep only the latest
        message of each key: a compacted topic), last store time (epoch ms, None for an empty
        queue) - RocketMQ's topicStatus. Raises TopicNotExistError."""
        return await self._blocking(self._sync.topic_status, topic)
