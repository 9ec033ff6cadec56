"""The pull path and long polling.

A pull that finds nothing new is held (up to its suspend time) per
(topic, queue) and re-run the moment a put for that queue becomes visible —
not on a timer tick. The reply body is the stored records, concatenated, in
one frame; the SDK decodes them with one struct format.
"""

import logging

from quiver import tags
from quiver.codes import ResponseCode
from quiver.errors import InvalidParameterError, TopicNotExistError

log = logging.getLogger(__name__)

_FOUND = "FOUND"


class Puller:
    def __init__(self, app):
        self.app = app
        self.store = app.store
        self.held: dict[tuple[str, int], list] = {}
        self.max_suspend_ms = app.config.long_poll_max_ms

    def handle(self, req) -> None:
        a = req.args
        topic, queue_id, offset = a.topic, a.queue_id, a.offset
        conf = self.app.topics.get(topic)
        if conf is None:
            raise TopicNotExistError(f"topic {topic!r} does not exist on this broker")
        if queue_id >= max(conf["read"], 1):
            raise InvalidParameterError(f"queue {queue_id} is not a read queue of {topic!r} (it has {conf['read']})")
        if a.expression_type not in ("TAG", None):
            raise InvalidParameterError("SQL92 subscriptions are pulled through a filter server, not the broker")
        if a.group and a.commit_offset is not None and a.commit_offset >= 0:
            # forward only: a pull sent before its queue moved may arrive after the final commit
            self.app.metadata.advance_offset(a.group, topic, queue_id, a.commit_offset)
        suspend_ms = min(a.suspend_ms, self.max_suspend_ms)
        key = (topic, queue_id)
        task = [req, topic, queue_id, offset, min(a.max_msgs, 1024), tags.hashes(a.expression), a.max_bytes, None]
        if not self._try(task, final=suspend_ms <= 0):
            task[7] = self.app.service.call_later(suspend_ms / 1000, self._expire, key, task)
            self.held.setdefault(key, []).append(task)
            self.app.counters["pulls_held"] += 1

    def _try(self, task, final: bool) -> bool:
        """Run the pull; answer unless it found nothing new and may wait. True if answered."""
        req, topic, queue_id, offset, max_msgs, hashes, max_bytes, _ = task
        res = self.store.get_messages(topic, queue_id, offset, max_msgs, hashes, max_bytes)
        status = res.status.name
        ext = {"next": res.next_offset, "min": res.min_offset, "max": res.max_offset}
        if status == _FOUND and res.count > 0:
            self.app.counters["pulled_messages"] += res.count
            req.reply(ResponseCode.SUCCESS, "", ext, (res.data,))
            return True
        if status == "NO_MATCHED_MESSAGE":
            req.reply(ResponseCode.PULL_RETRY_IMMEDIATELY, "no message matched the subscription", ext)
            return True
        if status == "OFFSET_TOO_SMALL":
            req.reply(ResponseCode.PULL_OFFSET_MOVED, f"offset {offset} is below the queue's min {res.min_offset}", ext)
            return True
        if status == "OFFSET_OVERFLOW_BADLY":
            req.reply(ResponseCode.PULL_OFFSET_MOVED, f"offset {offset} is beyond the queue's max {res.max_offset}", ext)
            return True
        if status == "NO_MESSAGE_IN_QUEUE" and offset != 0:
            ext["next"] = 0
            req.reply(ResponseCode.PULL_OFFSET_MOVED, "the queue is empty; start from 0", ext)
            return True
        # nothing new yet (OFFSET_OVERFLOW_ONE, empty queue at 0, or not yet flushed)
        if not final:
            return False
        ext["next"] = offset
        req.reply(ResponseCode.PULL_NOT_FOUND, "no new message", ext)
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
                self.app.service.cancel(task[7])
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
