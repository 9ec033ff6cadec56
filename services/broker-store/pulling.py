"""The pull path and long polling.

A pull that finds nothing new is held (up to its suspend time) per
(topic, queue) and re-run the moment a put for that queue becomes visible —
not on a timer tick. The reply body is the stored records, concatenated, in
one frame; the SDK decodes them with one struct format.
"""

import logging

from quiver.client import tags
from quiver.wire.codes import RequestCode, ResponseCode
from quiver.errors import InvalidParameterError, TopicNotExistError

from .status_codes import pull_code

log = logging.getLogger(__name__)


class Puller:
    """PULL_MESSAGE; `notify` is what a put (or a replicated chunk) calls for its queue."""

    def __init__(self, store, topics, metadata, service, counters, max_suspend_ms: int):
        self.store = store
        self.topics = topics
        self.metadata = metadata
        self.service = service            # call_later / cancel: the hold timers
        self.counters = counters
        self.max_suspend_ms = max_suspend_ms
        self.held: dict[tuple[str, int], list] = {}

    def handlers(self) -> dict:
        return {RequestCode.PULL_MESSAGE: self.handle}

    def handle(self, req) -> None:
        a = req.args
        topic, queue_id, offset = a.topic, a.queue_id, a.offset
        conf = self.topics.get(topic)
        if conf is None:
            raise TopicNotExistError(f"topic {topic!r} does not exist on this broker")
        if queue_id >= max(conf["read"], 1):
            raise InvalidParameterError(f"queue {queue_id} is not a read queue of {topic!r} (it has {conf['read']})")
        if a.expression_type not in ("TAG", None):
            raise InvalidParameterError("SQL92 subscriptions are pulled through a filter server, not the broker")
        if a.group and a.commit_offset is not None and a.commit_offset >= 0:
            # forward only: a pull sent before its queue moved may arrive after the final commit
            self.metadata.advance_offset(a.group, topic, queue_id, a.commit_offset)
        suspend_ms = min(a.suspend_ms, self.max_suspend_ms)
        key = (topic, queue_id)
        task = [req, topic, queue_id, offset, min(a.max_msgs, 1024), tags.hashes(a.expression), a.max_bytes, None]
        if not self._try(task, final=suspend_ms <= 0):
            task[7] = self.service.call_later(suspend_ms / 1000, self._expire, key, task)
            self.held.setdefault(key, []).append(task)
            self.counters["pulls_held"] += 1

    def _try(self, task, final: bool) -> bool:
        """Run the pull; answer unless it found nothing new and may wait. True if answered."""
        req, topic, queue_id, offset, max_msgs, hashes, max_bytes, _ = task
        res = self.store.get_messages(topic, queue_id, offset, max_msgs, hashes, max_bytes)
        code, remark = pull_code(res.status, offset, res.min_offset, res.max_offset)
        if code == ResponseCode.PULL_NOT_FOUND and not final:
            return False  # nothing new yet (at the queue's end, an empty queue at 0, or not yet flushed)
        ext = {"next": res.next_offset, "min": res.min_offset, "max": res.max_offset}
        if code == ResponseCode.SUCCESS:
            self.counters["pulled_messages"] += res.count
            req.reply(code, "", ext, (res.data,))
        else:
            req.reply(code, remark, ext)
        return True

    def notify(self, topic: str, queue_id: int) -> None:
        key = (topic, queue_id)
        waiting = self.held.get(key)
        if not waiting:
            return
        keep = []
        for task in waiting:
            if task[0].answered:
                continue
            if self._try(task, final=False):
                self.service.cancel(task[7])
            else:
                keep.append(task)
        if keep:
            self.held[key] = keep
        else:
            del self.held[key]

    def _expire(self, key, task) -> None:
        waiting = self.held.get(key)
        if waiting and task in waiting:
            waiting.remove(task)
            if not waiting:
                del self.held[key]
        if not task[0].answered:
            self._try(task, final=True)

    def held_count(self) -> int:
        return sum(len(v) for v in self.held.values())
