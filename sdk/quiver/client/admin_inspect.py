"""Admin's inspection and housekeeping commands (mixed into `Admin`): a topic's queues with their
bounds and last store time, one message by queue position, consumer groups (list, stored config,
delete), a topic purge, each broker's STATUS and effective config, expired-file cleaning.

Owns no socket and no wire format: it goes through ClientBase's calls and the schemas of
quiver.wire.requests, like the rest of Admin. Does not own the topic and offset basics
(admin.py) nor the ACL commands (acl_admin.py).
"""

import time
from typing import TYPE_CHECKING, Any

from quiver.client import queue_puller
from quiver.client.admin_types import QueueStatus
from quiver.client.base import ClientBase, MessageQueue
from quiver.client.message import MessageExt
from quiver.errors import IllegalOperationError, QuiverError, SubscriptionGroupNotExistError, TopicNotExistError
from quiver.wire import requests as rq
from quiver.wire.schema import TOPIC_COMPACT
from quiver.wire.validation import check_group, check_topic


if TYPE_CHECKING:  # type checkers see the ClientBase these commands run on
    _Base = ClientBase
else:
    _Base = object


class InspectCommands(_Base):
    """Needs ClientBase (call_broker, route, all_broker_addrs) and Admin's offset calls."""

    if TYPE_CHECKING:  # what Admin (admin.py) provides
        def min_offset(self, mq: MessageQueue, local: bool = False, compacted: bool = False) -> int: ...
        def max_offset(self, mq: MessageQueue) -> int: ...
        def status(self, addr: str) -> dict[str, Any]: ...
        def clean_expired(self, broker_addr: str) -> int: ...
        def delete_topic(self, topic: str) -> None: ...
        def create_topic(self, topic: str, queues: int = 4, perm: int = 6, order: bool = False,
                         brokers: list[str] | None = None, wait_s: float = 5.0, *, write_queues: int | None = None,
                         force: bool = False, compact: bool | None = None) -> dict[str, Any]: ...

    # ---- topics ----------------------------------------------------------------------

    def topic_status(self, topic: str) -> list[QueueStatus]:
        """One row per queue: broker, queue_id, min/max offset, local_min_offset (offsets below it are
        served from the broker's tiered store), compacted_to (offsets below it keep only the latest
        message of each key: a compacted topic), last store time (epoch ms, None for an empty
        queue) - RocketMQ's topicStatus. Raises TopicNotExistError."""
        route = self._route(topic, refresh=True)
        rows: list[QueueStatus] = []
        for mq in sorted(route.read_queues, key=lambda q: (q.broker, q.queue_id)):
            lo, hi = self.min_offset(mq), self.max_offset(mq)
            last = self.message_at(mq, hi - 1) if hi > lo else None
            rows.append({"broker": mq.broker, "queue_id": mq.queue_id, "min_offset": lo, "max_offset": hi,
                         "local_min_offset": self.min_offset(mq, local=True),
                         "compacted_to": self.min_offset(mq, compacted=True),
                         "last_store_time": last.store_timestamp if last else None})
        return rows

    def message_at(self, mq: MessageQueue, offset: int) -> MessageExt | None:
        """The message at a queue offset (RocketMQ queryMsgByOffset), None when there is none."""
        addr = self._broker_addr(mq.broker, mq.topic)
        pulled = queue_puller.fetch(self._brokers, addr, queue_puller.request(mq.topic, mq.queue_id, offset, max_msgs=1))
        if pulled.status is not queue_puller.FOUND:
            return None
        msgs = [m for m in pulled.messages(mq.broker) if m.queue_offset == offset]
        return msgs[0] if msgs else None

    def topic_configs(self) -> dict[str, dict[str, Any]]:
        """broker name -> {topic: {read, write, perm, order, ...}} as each broker stores them."""
        out: dict[str, dict[str, Any]] = {}
        for name, addr in sorted(self._all_broker_addrs().items()):
            out[name] = self._call_broker(addr, rq.GetAllTopicConfig()).ext.get("topics", {})
        return out

    def purge_topic(self, topic: str) -> dict[str, dict[str, Any]]:
        """Drop every message of `topic`: each broker that has it deletes it (config, ConsumeQueue
        files, offsets) and creates it again with the same queues, perm, order and compaction. Sends in
        between fail (or, with auto-create on, make the topic with default queues). Returns the
        config re-created per broker; raises TopicNotExistError when no broker has the topic."""
        check_topic(topic, for_create=True)
        had = {b: topics[topic] for b, topics in self.topic_configs().items() if topic in topics}
        if not had:
            raise TopicNotExistError(f"topic {topic!r} is on no broker")
        self.delete_topic(topic)
        out: dict[str, dict[str, Any]] = {}
        for broker, conf in had.items():
            out.update(self.create_topic(topic, queues=conf["read"], perm=conf["perm"],
                                         order=bool(conf.get("order")), brokers=[broker],
                                         write_queues=conf.get("write", conf["read"]),
                                         compact=bool(conf.get("sysflag", 0) & TOPIC_COMPACT)))
        return out

    def shrink_topic(self, topic: str, queues: int, wait_s: float = 0.0, poll_s: float = 2.0) -> dict[str, Any]:
        """RocketMQ's safe way to take queues from a topic: every broker's write queues go down to
        `queues` at once (no new message lands on the others), the read queues only once every
        group consumed what the others hold (the broker refuses earlier). Tries for up to
        `wait_s`; returns {"brokers", "write_done", "read_done", "behind": the broker's remark
        while a backlog remains}. Raises TopicNotExistError when no broker has the topic."""
        check_topic(topic, for_create=True)
        had = {b: topics[topic] for b, topics in self.topic_configs().items() if topic in topics}
        if not had:
            raise TopicNotExistError(f"topic {topic!r} is on no broker")
        for broker, conf in sorted(had.items()):
            if conf["write"] > queues:
                self.create_topic(topic, queues=conf["read"], perm=conf["perm"], order=bool(conf.get("order")),
                                  brokers=[broker], write_queues=queues)
        deadline = time.monotonic() + wait_s
        while True:
            try:
                for broker, conf in sorted(had.items()):
                    if conf["read"] > queues:
                        self.create_topic(topic, queues=queues, perm=conf["perm"], order=bool(conf.get("order")),
                                          brokers=[broker])
                        conf["read"] = queues
                return {"brokers": sorted(had), "write_done": True, "read_done": True, "behind": None}
            except IllegalOperationError as exc:
                if time.monotonic() + poll_s > deadline:
                    return {"brokers": sorted(had), "write_done": True, "read_done": False, "behind": exc.remark}
            time.sleep(poll_s)

    # ---- groups ------------------------------------------------------------------------

    def group_list(self) -> dict[str, dict[str, Any]]:
        """Every consumer group some broker knows: {group: {brokers, config, offsets, online}}
        (config: the stored one, None where the broker's defaults apply)."""
        out: dict[str, dict[str, Any]] = {}
        for broker, st in sorted(self.broker_statuses().items()):
            for group, info in (st.get("groups") or {}).items():
                row = out.setdefault(group, {"brokers": [], "config": None, "offsets": 0, "online": 0})
                row["brokers"].append(broker)
                row["config"] = row["config"] or info.get("config")
                row["offsets"] += info.get("offsets", 0)
                row["online"] = max(row["online"], info.get("online", 0))
        return dict(sorted(out.items()))

    def group_config(self, group: str) -> dict[str, dict[str, Any] | None]:
        """broker name -> the group's stored config on it (None: not configured there)."""
        check_group(group)
        return {broker: ((st.get("groups") or {}).get(group) or {}).get("config")
                for broker, st in sorted(self.broker_statuses().items())}

    def delete_group(self, group: str, clean_offset: bool = True) -> list[str]:
        """Delete a group's config (and offsets) on every broker (RocketMQ deleteSubGroup); the
        brokers that knew it. Raises SubscriptionGroupNotExistError when none did."""
        check_group(group)
        done: list[str] = []
        for name, addr in sorted(self._all_broker_addrs().items()):
            try:
                self._call_broker(addr, rq.DeleteSubscriptionGroup(group=group, clean_offset=clean_offset))
                done.append(name)
            except SubscriptionGroupNotExistError:
                continue
        if not done:
            raise SubscriptionGroupNotExistError(f"no broker knows group {group!r}")
        return done

    # ---- brokers ------------------------------------------------------------------------

    def broker_statuses(self) -> dict[str, dict[str, Any]]:
        """broker name -> its master's STATUS (groups, effective config, store ...)."""
        return {name: self.status(addr) for name, addr in sorted(self._all_broker_addrs().items())}

    def clean_expired_all(self) -> dict[str, int | str]:
        """Delete expired CommitLog segments now on every broker (RocketMQ cleanExpiredCQ /
        deleteExpiredCommitLog): deleted segment count, or the error, per broker."""
        out: dict[str, int | str] = {}
        for name, addr in sorted(self._all_broker_addrs().items()):
            try:
                out[name] = self.clean_expired(addr)
            except QuiverError as exc:
                out[name] = f"error: {exc}"
        return out

