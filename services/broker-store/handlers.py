"""The broker's request table: `table(parts, is_slave)` -> {RequestCode: fn}.

Every part owns its codes and says which in its `handlers()`: send (sending.py),
pull (pulling.py), POP (pop.py), transactions, schedule, retry, locks, filter servers, consume
stats, replication (ha_master / ha_slave), and the small ones below (topics,
offsets, offset resets, messages, clients). app.py builds the parts and passes them here; a
code claimed twice is a wiring mistake and fails at start.
"""

import logging

from quiver.wire import protocol
from quiver.wire import requests as rq
from quiver.wire.codes import RequestCode, ResponseCode
from quiver.errors import IllegalOperationError, InvalidParameterError, QueryNotFoundError, TopicNotExistError
from quiver.wire.access import GET, SUB, topic_resource
from quiver.wire.names import check_topic
from quiver.wire.transport import next_request_id

from . import visibility
from .tiered_reads import answer_when_cached, local_min_offset

log = logging.getLogger(__name__)

# A slave only replicates: what writes the store or the topic table goes to the master.
SLAVE_REFUSES = (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE,
                 RequestCode.END_TRANSACTION, RequestCode.CONSUMER_SEND_MSG_BACK, RequestCode.SCHEDULE_REPUT,
                 RequestCode.SCHEDULE_INIT, RequestCode.TRANSACTION_CHECK, RequestCode.UPDATE_AND_CREATE_TOPIC,
                 RequestCode.DELETE_TOPIC_IN_BROKER, RequestCode.ACL_UPDATE_USER, RequestCode.ACL_DELETE_USER,
                 RequestCode.ACL_GRANT, RequestCode.ACL_REVOKE, RequestCode.DELETE_SUBSCRIPTIONGROUP,
                 RequestCode.POP_MESSAGE, RequestCode.ACK_MESSAGE, RequestCode.CHANGE_INVISIBLE_DURATION,
                 RequestCode.SEND_REPLY_MESSAGE)


def table(parts, is_slave: bool) -> dict:
    """Merge the parts' `handlers()`; on a slave, SLAVE_REFUSES answer SERVICE_NOT_AVAILABLE."""
    out: dict = {}
    for part in parts:
        own = part.handlers()
        twice = out.keys() & own.keys()
        if twice:
            raise TypeError(f"{type(part).__name__} claims codes already taken: {sorted(twice)}")
        out.update(own)
    if is_slave:
        out.update({code: _refuse_on_slave for code in SLAVE_REFUSES if code in out})
    return out


def _refuse_on_slave(req) -> None:
    req.reply(ResponseCode.SERVICE_NOT_AVAILABLE,
              f"this broker is a slave: request {req.env.code} goes to the master of its broker name")


class TopicRequests:
    """UPDATE_AND_CREATE_TOPIC, DELETE_TOPIC_IN_BROKER, GET_ALL_TOPIC_CONFIG, ADMIN_COMPACT_TOPIC (a pass
    on the compaction thread; `post` hands its result back to the service thread, which replies)."""

    def __init__(self, topics, compactor=None, post=None):
        self.topics = topics
        self.compactor = compactor
        self.post = post

    def handlers(self) -> dict:
        return {RequestCode.UPDATE_AND_CREATE_TOPIC: self.create, RequestCode.DELETE_TOPIC_IN_BROKER: self.delete,
                RequestCode.GET_ALL_TOPIC_CONFIG: self.all_topics, RequestCode.ADMIN_COMPACT_TOPIC: self.compact}

    def compact(self, req) -> None:
        topic = req.args.topic
        if topic not in self.topics:
            raise TopicNotExistError(f"topic {topic!r} does not exist on this broker")
        if not self.topics.is_compacted(topic):
            raise InvalidParameterError(f"topic {topic!r} is not a compacted topic: create it with "
                                        f"`quiver topic create {topic} --compact` first")

        def done(results, error) -> None:
            if error is not None:
                req.reply(ResponseCode.SYSTEM_ERROR, f"compaction failed, nothing was replaced: {error}")
                return
            req.reply(ResponseCode.SUCCESS, "", rq.CompactTopicReply(
                queues=sum(1 for r in results if not r.skipped), read=sum(r.read for r in results),
                kept=sum(r.kept for r in results)))

        self.compactor.submit([topic], self.post, done, force=True)

    def create(self, req) -> None:
        a = req.args
        check_topic(a.topic, for_create=True)
        write = a.read if a.write is None else a.write
        behind = {} if a.force else self.topics.shrink_backlog(a.topic, a.read)
        if behind:
            raise IllegalOperationError(shrink_refusal(a.topic, a.read, behind))
        conf = self.topics.put(a.topic, a.read, write, a.perm, order=a.order, compact=a.compact)
        req.reply(ResponseCode.SUCCESS, "", rq.TopicConfigReply(topic=a.topic, config=rq.TopicConfig(**conf)))

    def delete(self, req) -> None:
        topic = req.args.topic
        check_topic(topic, for_delete=True)
        if topic not in self.topics:
            raise TopicNotExistError(f"topic {topic!r} does not exist on this broker")
        self.topics.delete(topic)
        req.reply(ResponseCode.SUCCESS)

    def all_topics(self, req) -> None:
        req.reply(ResponseCode.SUCCESS, "", rq.TopicConfigsReply(topics=self.topics.rows))


def shrink_refusal(topic: str, read: int, behind: dict[int, list[str]]) -> str:
    """The remark of a refused shrink: which queues hold what, and RocketMQ's safe way."""
    held = "; ".join(f"queue {q}: {', '.join(groups)}" for q, groups in sorted(behind.items()))
    return (f"lowering {topic}'s read queues to {read} would hide unconsumed messages ({held}): lower the "
            f"write queues to {read} first, let consumers drain the rest, then the read queues "
            f"(quiver topic shrink {topic} --queues {read}); force=true drops them from consumption")


class OffsetRequests:
    """Consumer offsets (QUERY / UPDATE_CONSUMER_OFFSET) and queue offsets (GET_MAX / MIN_OFFSET,
    SEARCH_OFFSET_BY_TIMESTAMP) of a queue the topic has. With `service`, a search by time that reads
    remote records not cached is answered once a read thread fetched them."""

    def __init__(self, topics, metadata, store, service=None):
        self.topics = topics
        self.metadata = metadata
        self.store = store
        self.service = service

    def handlers(self) -> dict:
        return {RequestCode.QUERY_CONSUMER_OFFSET: self.query, RequestCode.UPDATE_CONSUMER_OFFSET: self.update,
                RequestCode.GET_MAX_OFFSET: self.max_offset, RequestCode.GET_MIN_OFFSET: self.min_offset,
                RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: self.by_time}

    def query(self, req) -> None:
        a = req.args
        self.topics.check_queue(a.topic, a.queue_id)
        off = self.metadata.get_offset(a.group, a.topic, a.queue_id)
        if off is None:
            raise QueryNotFoundError(f"group {a.group!r} has no offset for {a.topic}:{a.queue_id}")
        req.reply(ResponseCode.SUCCESS, "", rq.OffsetReply(offset=off))

    def update(self, req) -> None:
        a = req.args
        self.topics.check_queue(a.topic, a.queue_id)
        self.metadata.commit_offset(a.group, a.topic, a.queue_id, a.offset)   # not over a held reset
        req.reply(ResponseCode.SUCCESS)

    def max_offset(self, req) -> None:
        a = req.args
        self.topics.check_queue(a.topic, a.queue_id)
        req.reply(ResponseCode.SUCCESS, "", rq.OffsetReply(offset=self.store.max_offset(a.topic, a.queue_id)))

    def min_offset(self, req) -> None:
        a = req.args
        self.topics.check_queue(a.topic, a.queue_id)
        if a.compacted:   # below it: read from the queue's compacted log
            off = self.store.compaction.watermark(a.topic, a.queue_id, self.store.min_offset(a.topic, a.queue_id))
        elif a.local:
            off = local_min_offset(self.store, a.topic, a.queue_id)
        else:
            off = self.store.min_offset(a.topic, a.queue_id)
        req.reply(ResponseCode.SUCCESS, "", rq.OffsetReply(offset=off))

    def by_time(self, req) -> None:
        a = req.args
        self.topics.check_queue(a.topic, a.queue_id)
        answer_when_cached(self.store, self.service, req, self._by_time)

    def _by_time(self, req) -> None:
        a = req.args
        off = self.store.search_offset_by_time(a.topic, a.queue_id, a.timestamp)
        req.reply(ResponseCode.SUCCESS, "", rq.OffsetReply(offset=off))


class OffsetResets:
    """INVOKE_BROKER_TO_RESET_OFFSET, RocketMQ's resetOffset: a group's offsets of a topic's queues
    on this broker are stored first, then every online member of the group is told
    (RESET_CONSUMER_CLIENT_OFFSET): it drops what it cached of those queues, pulls them from the
    new offsets and commits them again, which also undoes a commit of the old position that was
    on its way meanwhile. A stopped group has nobody to tell: its next start reads the stored
    offsets. `push(identity, frames) -> bool` sends only over a connection that is there
    (Service.send_if_connected), so the reply's `members` counts the members actually told."""

    def __init__(self, broker_name: str, topics, metadata, store, clients, push):
        self.broker_name = broker_name
        self.topics = topics
        self.metadata = metadata
        self.store = store
        self.clients = clients
        self.push = push

    def handlers(self) -> dict:
        return {RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: self.reset}

    def reset(self, req) -> None:
        a = req.args
        if (a.timestamp is None) == (a.offset is None):
            raise InvalidParameterError("an offset reset goes to a timestamp or to an offset: give exactly one")
        conf = self.topics.get(a.topic)
        if conf is None:
            raise TopicNotExistError(f"topic {a.topic!r} does not exist on this broker")
        if a.queue_id is not None:
            self.topics.check_queue(a.topic, a.queue_id)
        queue_ids = range(conf["read"]) if a.queue_id is None else (a.queue_id,)
        offsets = [(q, self._target(a, q)) for q in queue_ids]
        for q, off in offsets:
            self.metadata.reset_offset(a.group, a.topic, q, off)
        told = self._tell(a.group, a.topic, offsets)
        log.info("offsets of group %s on %s reset to %s (%s); %d online member(s) told", a.group, a.topic,
                 dict(offsets), f"time {a.timestamp}" if a.offset is None else f"offset {a.offset}", told)
        req.reply(ResponseCode.SUCCESS, "", rq.ResetOffsetReply(offsets=offsets, members=told))

    def _target(self, a, queue_id: int) -> int:
        if a.offset is None:
            return self.store.search_offset_by_time(a.topic, queue_id, a.timestamp)
        lo, hi = self.store.min_offset(a.topic, queue_id), self.store.max_offset(a.topic, queue_id)
        return min(max(a.offset, lo), hi)

    def _tell(self, group: str, topic: str, offsets: list) -> int:
        push = rq.ResetConsumerClientOffset(group=group, topic=topic, broker=self.broker_name, offsets=offsets)
        frames = protocol.request(push, next_request_id())
        return sum(1 for info in list(self.clients.consumers.get(group, {}).values())
                   if self.push(info.identity, frames))


class MessageRequests:
    """QUERY_MESSAGE (by key), VIEW_MESSAGE_BY_ID (by CommitLog offset), ADMIN_CLEAN_EXPIRED.
    With `service`, a lookup of a remote record not cached is answered once a read thread fetched it."""

    def __init__(self, store, service=None):
        self.store = store
        self.service = service

    def handlers(self) -> dict:
        return {RequestCode.QUERY_MESSAGE: self.query, RequestCode.VIEW_MESSAGE_BY_ID: self.view,
                RequestCode.ADMIN_CLEAN_EXPIRED: self.clean_expired}

    def query(self, req) -> None:
        answer_when_cached(self.store, self.service, req, self._query)

    def view(self, req) -> None:
        answer_when_cached(self.store, self.service, req, self._view)

    def _query(self, req) -> None:
        a = req.args
        recs = self.store.query_by_key(a.topic, a.key, min(a.max_msgs, 1024), a.begin_ts, a.end_ts)
        recs = [r for r in recs if visibility.record_visible(self.store, r)]
        if not recs:
            raise QueryNotFoundError(f"no message with key {a.key!r} in topic {a.topic!r}")
        req.reply(ResponseCode.SUCCESS, "", rq.QueryMessageReply(count=len(recs)), [r.stored for r in recs])

    def _view(self, req) -> None:
        off = req.args.offset
        rec = self.store.lookup(off)
        if rec is None or not visibility.record_visible(self.store, rec):
            raise QueryNotFoundError(f"no message at commitlog offset {off} (never written, or expired)")
        req.authorize(topic_resource(rec.topic), SUB, GET)
        req.reply(ResponseCode.SUCCESS, "", None, [rec.stored])

    def clean_expired(self, req) -> None:
        n = self.store.clean_expired(force=True)
        req.reply(ResponseCode.SUCCESS, "", rq.CleanExpiredReply(deleted_segments=n))


class ClientRequests:
    """HEART_BEAT, UNREGISTER_CLIENT, GET_CONSUMER_LIST_BY_GROUP; a group whose members changed
    is told through `notify_group_changed(group)`."""

    def __init__(self, clients, notify_group_changed):
        self.clients = clients
        self.notify_group_changed = notify_group_changed

    def handlers(self) -> dict:
        return {RequestCode.HEART_BEAT: self.heartbeat, RequestCode.UNREGISTER_CLIENT: self.unregister,
                RequestCode.GET_CONSUMER_LIST_BY_GROUP: self.consumer_list}

    def heartbeat(self, req) -> None:
        a = req.args
        for group in self.clients.heartbeat(a.client_id, req.identity, a.producers, a.consumers):
            self.notify_group_changed(group)
        req.reply(ResponseCode.SUCCESS)

    def unregister(self, req) -> None:
        a = req.args
        for group in self.clients.unregister(a.client_id, a.producer_group, a.consumer_group):
            self.notify_group_changed(group)
        req.reply(ResponseCode.SUCCESS)

    def consumer_list(self, req) -> None:
        req.reply(ResponseCode.SUCCESS, "", rq.ConsumerListReply(ids=self.clients.consumer_ids(req.args.group)))
