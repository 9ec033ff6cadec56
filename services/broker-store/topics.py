"""The broker's topic table: lookups, auto-creation, create, delete, and its data version.

Owns which topics exist on this broker and when one may be made: a send may
auto-create an ordinary topic (--auto-create-topics), a system topic is made
only by the broker itself (`system=True`), an admin request names a queue the
topic has. Every change bumps the data version the name servers see and calls
`on_change` (the app re-registers at once, so routes carry the new table).
Does not own the rows (metadata.py keeps them through SQLAlchemy) nor the
files (store.py deletes a topic's queues).
"""

import logging
import time

from quiver.errors import InvalidParameterError, TopicNotExistError
from quiver.wire.names import is_system_topic
from quiver.wire.schema import TOPIC_COMPACT

log = logging.getLogger(__name__)


class Topics:
    def __init__(self, metadata, store, on_change, auto_create: bool, default_queues: int):
        self.metadata = metadata
        self.store = store
        self.on_change = on_change
        self.auto_create = auto_create
        self.default_queues = default_queues
        self.rows: dict[str, dict] = metadata.topics  # name -> {read, write, perm, sysflag, order}: metadata writes it
        store.compaction.is_compacted = self.is_compacted
        self.data_version = {"state": 0, "ts": int(time.time() * 1000), "counter": 0}

    def get(self, topic: str) -> dict | None:
        return self.rows.get(topic)

    def __contains__(self, topic: str) -> bool:
        return topic in self.rows

    def __len__(self) -> int:
        return len(self.rows)

    def config(self, topic: str, create: bool = False, system: bool = False, queues: int | None = None) -> dict:
        """The topic's config; with `create`, made if missing (a system topic only with `system`)."""
        conf = self.rows.get(topic)
        if conf is not None:
            return conf
        if not create or (not system and (not self.auto_create or is_system_topic(topic))):
            raise TopicNotExistError(
                f"topic {topic!r} does not exist: create it (quiver topic create) or run the broker with --auto-create-topics")
        n = queues or self.default_queues
        log.info("auto-creating topic %s with %d queues", topic, n)
        return self.put(topic, n, n, 6)

    def check_queue(self, topic: str, queue_id: int) -> None:
        """An admin request's queue must be one of the topic's (read or write) queues."""
        conf = self.rows.get(topic)
        if conf is None:
            raise TopicNotExistError(f"topic {topic!r} does not exist on this broker")
        if queue_id >= max(conf["read"], conf["write"], 1):
            raise InvalidParameterError(f"queue {queue_id} is not a queue of {topic!r} "
                                        f"(it has {max(conf['read'], conf['write'])})")

    def shrink_backlog(self, topic: str, read: int) -> dict[int, list[str]]:
        """What lowering `topic`'s read queues to `read` would hide: queue id -> the groups whose
        offset there is behind the queue's max ("no group" when messages are held but no group
        has an offset). Empty when nothing unconsumed would be left behind."""
        conf = self.rows.get(topic)
        if conf is None or read >= conf["read"]:
            return {}
        behind: dict[int, list[str]] = {}
        for q in range(read, conf["read"]):
            hi = self.store.max_offset(topic, q)
            if hi <= self.store.min_offset(topic, q):
                continue
            offsets = {g: o for (g, t, qid), o in list(self.metadata.offsets.items()) if t == topic and qid == q}
            groups = sorted(g for g, o in offsets.items() if o < hi)
            if groups or not offsets:
                behind[q] = groups or ["no group"]
        return behind

    def put(self, topic: str, read: int, write: int, perm: int = 6, order: bool = False,
            compact: bool | None = None) -> dict:
        """Create or update a topic; `compact` sets or clears its TOPIC_COMPACT sysflag bit (None: as it is)."""
        sysflag = self.rows.get(topic, {}).get("sysflag", 0)
        if compact is not None:
            sysflag = sysflag | TOPIC_COMPACT if compact else sysflag & ~TOPIC_COMPACT
        conf = self.metadata.put_topic(topic, read, write, perm, sysflag, order=order)
        self.changed()
        return conf

    def is_compacted(self, topic: str) -> bool:
        return bool(self.rows.get(topic, {}).get("sysflag", 0) & TOPIC_COMPACT)

    def delete(self, topic: str) -> None:
        self.metadata.delete_topic(topic)
        self.store.delete_topic(topic)
        self.changed()

    def mirror(self, master: dict) -> bool:
        """A slave takes its master's table (name -> quiver.wire.requests.TopicConfig) as it is:
        rows only, the replicated files stay. True if anything changed (then `changed` ran)."""
        meta, changed = self.metadata, False
        for name, conf in master.items():
            want = {"read": conf.read, "write": conf.write, "perm": conf.perm, "sysflag": conf.sysflag,
                    "order": conf.order}
            if self.rows.get(name) != want:
                meta.put_topic(name, conf.read, conf.write, conf.perm, conf.sysflag, order=conf.order)
                changed = True
        for name in [t for t in self.rows if t not in master]:
            meta.delete_topic(name)
            changed = True
        if changed:
            self.changed()
        return changed

    def changed(self) -> None:
        self.data_version["counter"] += 1
        self.on_change()
