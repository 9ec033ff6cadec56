"""Consumer offsets: on the broker (clustering) or in a local JSON file (broadcasting).

Both stores keep offsets in memory (`update` only moves forward unless told
otherwise) and persist them every few seconds, when a queue is dropped, and
on shutdown. `read` gives the stored offset of a queue or None when the group
never stored one (then the consumer applies consume_from: `start_offset`, the
one reading of consume_from for both consumers).

Local files live at `<dir>/<instance>/<group>/offsets.json`, RocketMQ's
LocalFileOffsetStore layout; they are replaced atomically (write + rename).
"""

import json
import logging
import os
import threading

from quiver.wire import requests as rq
from quiver.client.base import MessageQueue, _ignore
from quiver.errors import QueryNotFoundError, QuiverError
from quiver.wire.validation import RETRY_PREFIX

log = logging.getLogger(__name__)

DEFAULT_OFFSET_DIR = os.path.join(os.path.expanduser("~"), ".quiver_offsets")


def query_offset(client, group: str, mq: MessageQueue, addr: str) -> int | None:
    """The offset `group` stored for `mq` on the broker at `addr`, or None if it never stored one."""
    req = rq.QueryConsumerOffset(group=group, topic=mq.topic, queue_id=mq.queue_id)
    try:
        return rq.OffsetReply.decode(client.call_broker(addr, req).ext).offset
    except QueryNotFoundError:
        return None


def start_offset(client, mq: MessageQueue, addr: str, consume_from) -> int:
    """Where a group with no stored offset for `mq` starts (RocketMQ's computePullFromWhere):
    "first" the queue's min, "last" its max, an epoch-ms time the first message stored at
    or after it; a retry topic from its min ("first", "last") or its max (a time)."""
    retry = mq.topic.startswith(RETRY_PREFIX)
    if consume_from == "first" or (retry and consume_from == "last"):
        req = rq.GetMinOffset(topic=mq.topic, queue_id=mq.queue_id)
    elif consume_from == "last" or retry:
        req = rq.GetMaxOffset(topic=mq.topic, queue_id=mq.queue_id)
    else:
        req = rq.SearchOffsetByTimestamp(topic=mq.topic, queue_id=mq.queue_id, timestamp=consume_from)
    return rq.OffsetReply.decode(client.call_broker(addr, req).ext).offset


class _Memory:
    def __init__(self):
        self.offsets: dict[MessageQueue, int] = {}
        self.lock = threading.Lock()

    def update(self, mq: MessageQueue, offset: int, increase_only: bool = True) -> None:
        with self.lock:
            old = self.offsets.get(mq)
            if old is None or not increase_only or offset > old:
                self.offsets[mq] = offset

    def get(self, mq: MessageQueue) -> int | None:
        return self.offsets.get(mq)

    def remove(self, mq: MessageQueue) -> None:
        with self.lock:
            self.offsets.pop(mq, None)


class RemoteOffsetStore(_Memory):
    """Offsets kept by the broker of each queue (UPDATE/QUERY_CONSUMER_OFFSET)."""

    def __init__(self, client, group: str):
        super().__init__()
        self.client = client
        self.group = group

    def read(self, mq: MessageQueue, addr: str) -> int | None:
        return query_offset(self.client, self.group, mq, addr)

    def persist(self, mq: MessageQueue, addr: str, sync: bool = False) -> None:
        off = self.get(mq)
        if off is None:
            return
        req = rq.UpdateConsumerOffset(group=self.group, topic=mq.topic, queue_id=mq.queue_id, offset=off)
        if sync:
            self.client.call_broker(addr, req)
        else:
            self.client.transport.send(addr, req, None, (), _ignore, self.client.request_timeout)

    def persist_all(self, addrs: dict[MessageQueue, str], sync: bool = False) -> None:
        for mq, addr in addrs.items():
            try:
                self.persist(mq, addr, sync)
            except QuiverError as exc:
                log.warning("offset of %s not stored: %s", mq, exc)


class LocalFileOffsetStore(_Memory):
    """Offsets of one client instance and group in a JSON file (broadcasting)."""

    def __init__(self, directory: str | None, instance: str, group: str):
        super().__init__()
        base = directory or os.environ.get("QUIVER_OFFSET_DIR") or DEFAULT_OFFSET_DIR
        self.path = os.path.join(base, instance, group, "offsets.json")
        self._stored: dict[MessageQueue, int] = {}
        self._load()

    def _load(self) -> None:
        try:
            with open(self.path, "rb") as f:
                data = json.load(f)
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            log.warning("local offsets %s unreadable (%s): starting from consume_from", self.path, exc)
            return
        for row in data.get("offsets", []):
            try:
                self._stored[MessageQueue(row["topic"], row["broker"], int(row["queue_id"]))] = int(row["offset"])
            except (KeyError, TypeError, ValueError):
                continue

    def read(self, mq: MessageQueue, addr: str | None = None) -> int | None:
        return self._stored.get(mq)

    def persist(self, mq: MessageQueue, addr: str | None = None, sync: bool = False) -> None:
        self.persist_all({mq: addr})

    def persist_all(self, addrs=None, sync: bool = False) -> None:
        with self.lock:  # also serialises writers: one tmp file
            self._stored.update(self.offsets)
            rows = [{"topic": mq.topic, "broker": mq.broker, "queue_id": mq.queue_id, "offset": off}
                    for mq, off in sorted(self._stored.items())]
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            tmp = f"{self.path}.tmp"
            with open(tmp, "w") as f:
                json.dump({"offsets": rows}, f, indent=1)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
