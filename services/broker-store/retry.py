"""Retry and dead letters: CONSUMER_SEND_MSG_BACK and the subscription group config.

A consumer sends a failed message back by its CommitLog offset. The broker
copies it to `%RETRY%<group>` with delay level 3 + reconsume times (so it goes
through SCHEDULE_TOPIC_XXXX like any delayed message; the scheduler service
re-puts it when due), or, once the reconsume count reached the group's max
(or the consumer asked with delay < 0), to `%DLQ%<group>`. Both topics have one
queue and are created on demand. The reconsume count travels in the record's
RECONSUMETIMES field (and the RECONSUME_TIME property, for re-puts that copy
only properties). The origin topic is the message's own, or for a retry
topic's copy the RETRY_TOPIC the broker wrote (never the request's origin topic
field nor a client's property: a DLQ resend writes there); a malformed
RECONSUME_TIME is ignored and counted (`bad_system_properties`). Handlers read
the typed request (`req.args`: quiver.wire.requests.ConsumerSendMsgBack,
UpdateSubscriptionGroup), already checked and ranged. This module does not
deliver delayed messages.
"""

import logging
import time

from quiver.wire import names, record
from quiver.wire.codes import RequestCode, ResponseCode
from quiver.errors import MessageIllegalError, QueryNotFoundError, SubscriptionGroupNotExistError
from quiver.wire.ids import host_str
from quiver.wire.access import SUB, topic_resource
from quiver.wire.names import DLQ_PREFIX, RETRY_PREFIX
from quiver.wire.requests import SendMessage
from quiver.wire.replies import GroupConfig, GroupConfigReply
from quiver.wire.properties import (DELAY, DLQ_ORIGIN_MESSAGE_ID, DLQ_ORIGIN_TOPIC, INT32_MAX, MAX_RECONSUME_TIMES,
                                    ORIGIN_MESSAGE_ID, REAL_QID, REAL_TOPIC, RECONSUME_TIME, RETRY_TOPIC,
                                    TIMER_DELIVER_MS, UNIQ_KEY, read_int)
from quiver.wire.property_string import format_properties

from .tracing import is_traced

log = logging.getLogger(__name__)

DEFAULT_MAX_RECONSUME_TIMES = 16
_DROP = (DELAY, REAL_TOPIC, REAL_QID)


def max_reconsume_times(groups: dict, group: str, asked: int | None) -> int:
    """The group's configured retry_max_times wins; else what the consumer asked; else 16."""
    conf = groups.get(group)
    if conf is not None:
        return conf["retry_max_times"]
    return asked if asked is not None and 0 <= asked <= INT32_MAX else DEFAULT_MAX_RECONSUME_TIMES


def _origin(rec, props: dict) -> str:
    """The topic the message was first sent to, as the broker recorded it: a retry topic's copy
    keeps the RETRY_TOPIC the broker wrote when it sent it back (clients cannot send one), any
    other message is from its own topic. Never a field of the request: the DLQ resend writes
    there with an administrator's rights. Raises MessageIllegalError for a name that is not a
    valid topic."""
    if not rec.topic.startswith(RETRY_PREFIX) or not props.get(RETRY_TOPIC):
        return rec.topic
    origin = props[RETRY_TOPIC]
    problem = names.topic_problem(origin)
    if problem is not None:
        raise MessageIllegalError(f"property {RETRY_TOPIC} must be a topic name: {problem}")
    return origin


class Retry:
    """CONSUMER_SEND_MSG_BACK, UPDATE_AND_CREATE_ / DELETE_SUBSCRIPTIONGROUP; the copy goes out
    through the send path (`sender`: sending.Sender's park and put)."""

    def __init__(self, store, metadata, topics, sender, counters, trace=None):
        self.trace = trace   # tracing.BrokerTrace: Retry and DLQ events of traced messages
        self.store = store
        self.metadata = metadata
        self.topics = topics
        self.sender = sender
        self.counters = counters

    def handlers(self) -> dict:
        return {RequestCode.CONSUMER_SEND_MSG_BACK: self.send_back,
                RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: self.update_group,
                RequestCode.DELETE_SUBSCRIPTIONGROUP: self.delete_group}

    def send_back(self, req) -> None:
        a = req.args   # quiver.wire.requests.ConsumerSendMsgBack
        group, offset = a.group, a.offset
        rec = self.store.lookup(offset)
        if rec is None:
            raise QueryNotFoundError(f"no message at commitlog offset {offset} to send back")
        req.authorize(topic_resource(rec.topic), SUB)
        props = rec.properties()
        for name in _DROP:
            props.pop(name, None)
        origin = _origin(rec, props)
        origin_id = props.get(ORIGIN_MESSAGE_ID) or a.origin_msg_id or props.get(UNIQ_KEY) or ""

        def bad_property(remark: str) -> None:
            self.counters["bad_system_properties"] += 1
            log.warning("send-back of the message at offset %d: %s; ignored", offset, remark)
        reconsume = max(rec.reconsume, a.reconsume or 0, read_int(props, RECONSUME_TIME, 0, bad_property))
        limit = max_reconsume_times(self.metadata.groups, group, a.max_reconsume)
        props[RETRY_TOPIC] = origin
        props[ORIGIN_MESSAGE_ID] = origin_id
        if a.delay_level < 0 or reconsume >= limit:
            topic, queue_id, prop = self._to_dlq(group, props, origin, origin_id, reconsume)
            if self.trace is not None and is_traced(props):
                self.trace.sent_back("DLQ", props, origin_id, origin, group, reconsume, {"dlq_topic": DLQ_PREFIX + group})
        else:
            reconsume += 1
            topic, queue_id, prop = self._to_retry(group, props, a.delay_level, reconsume, limit, a.delay_ms)
            if self.trace is not None and is_traced(props):
                how = {"delay_ms": a.delay_ms} if a.delay_ms else {"delay_level": int(props.get(DELAY) or 0)}
                self.trace.sent_back("Retry", props, origin_id, origin, group, reconsume,
                                     {"retry_topic": RETRY_PREFIX + group, **how})
        put = SendMessage(topic=topic, queue_id=queue_id, metas=([rec.flag], [prop]), born_ts=rec.born_ts,
                          born_host=host_str(rec.born_host), reconsume=reconsume)
        self.sender.put(req, topic, queue_id, [rec.body], [prop], [rec.flag], rec.sys_flag & ~record.TX_MASK, put)

    def _to_dlq(self, group: str, props: dict, origin: str, origin_id: str, reconsume: int):
        topic = f"{DLQ_PREFIX}{group}"
        props[DLQ_ORIGIN_TOPIC] = origin
        props[DLQ_ORIGIN_MESSAGE_ID] = origin_id
        props[RECONSUME_TIME] = str(reconsume)
        self.topics.config(topic, create=True, system=True, queues=1)
        self.counters["dlq_messages"] += 1
        self.sender.traffic.dead_lettered(group)
        log.info("message %a of group %s -> %s after %d reconsumes", origin_id, group, topic, reconsume)
        return topic, 0, format_properties(props)

    def _to_retry(self, group: str, props: dict, delay: int, reconsume: int, limit: int, delay_ms: int | None = None):
        """Parked in the schedule topic for its delay level (or, with `delay_ms`, in the timer
        topic until then: the listener chose the delay), bound for %RETRY%<group>."""
        props[RECONSUME_TIME] = str(reconsume)
        props[MAX_RECONSUME_TIMES] = str(limit)
        topic = f"{RETRY_PREFIX}{group}"
        self.topics.config(topic, create=True, system=True, queues=1)
        if delay_ms:
            props.pop(DELAY, None)
            due = int(time.time() * 1000) + delay_ms
            props[TIMER_DELIVER_MS] = str(due)
            parked = self.sender.park(topic, 0, format_properties(props), None, due)
            self.counters["retry_messages"] += 1
            return parked
        level = min(delay if delay > 0 else 3 + reconsume - 1, INT32_MAX)  # DELAY's range
        props[DELAY] = str(level)
        parked = self.sender.park(topic, 0, format_properties(props), str(level), None)
        self.counters["retry_messages"] += 1
        return parked

    def update_group(self, req) -> None:
        a = req.args   # quiver.wire.requests.UpdateSubscriptionGroup: retry_max_times 0..1000000
        group = a.group
        self.metadata.put_group(group, a.retry_max_times)
        req.reply(ResponseCode.SUCCESS, "", GroupConfigReply(group=group, config=GroupConfig(**self.metadata.groups[group])))

    def delete_group(self, req) -> None:
        a = req.args   # quiver.wire.requests.DeleteSubscriptionGroup
        if not self.metadata.delete_group(a.group, a.clean_offset):
            raise SubscriptionGroupNotExistError(f"group {a.group!r} has no config or offsets on this broker")
        log.info("group %s deleted (offsets %s)", a.group, "too" if a.clean_offset else "kept")
        req.reply(ResponseCode.SUCCESS)
