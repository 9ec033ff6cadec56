"""Request handlers of the broker: `make_handlers(app)` -> {RequestCode: fn}.

Send and pull live in sending.py and pulling.py; the small ones are here.
"""

import importlib
import logging

from quiver.codes import RequestCode, ResponseCode
from quiver.errors import InvalidParameterError, QueryNotFoundError, TopicNotExistError
from quiver.validation import check_topic

log = logging.getLogger(__name__)


def _queue(app, topic: str, queue_id: int) -> None:
    conf = app.topics.get(topic)
    if conf is None:
        raise TopicNotExistError(f"topic {topic!r} does not exist on this broker")
    if queue_id >= max(conf["read"], conf["write"], 1):
        raise InvalidParameterError(f"queue {queue_id} is not a queue of {topic!r} "
                                    f"(it has {max(conf['read'], conf['write'])})")


def make_handlers(app):
    store, meta = app.store, app.metadata

    def send(req):
        app.sender.handle(req, batch=False)

    def send_batch(req):
        app.sender.handle(req, batch=True)

    def pull(req):
        app.puller.handle(req)

    def create_topic(req):
        a = req.args
        check_topic(a.topic, for_create=True)
        write = a.read if a.write is None else a.write
        app.put_topic(a.topic, a.read, write, a.perm, order=a.order)
        req.reply(ResponseCode.SUCCESS, "", {"topic": a.topic, "config": app.topics[a.topic]})

    def delete_topic(req):
        topic = req.args.topic
        check_topic(topic, for_delete=True)
        if topic not in app.topics:
            raise TopicNotExistError(f"topic {topic!r} does not exist on this broker")
        app.delete_topic(topic)
        req.reply(ResponseCode.SUCCESS)

    def all_topics(req):
        req.reply(ResponseCode.SUCCESS, "", {"topics": app.topics})

    def query_offset(req):
        a = req.args
        _queue(app, a.topic, a.queue_id)
        off = meta.get_offset(a.group, a.topic, a.queue_id)
        if off is None:
            raise QueryNotFoundError(f"group {a.group!r} has no offset for {a.topic}:{a.queue_id}")
        req.reply(ResponseCode.SUCCESS, "", {"offset": off})

    def update_offset(req):
        a = req.args
        _queue(app, a.topic, a.queue_id)
        meta.set_offset(a.group, a.topic, a.queue_id, a.offset)
        req.reply(ResponseCode.SUCCESS)

    def max_offset(req):
        a = req.args
        _queue(app, a.topic, a.queue_id)
        req.reply(ResponseCode.SUCCESS, "", {"offset": store.max_offset(a.topic, a.queue_id)})

    def min_offset(req):
        a = req.args
        _queue(app, a.topic, a.queue_id)
        req.reply(ResponseCode.SUCCESS, "", {"offset": store.min_offset(a.topic, a.queue_id)})

    def search_by_time(req):
        a = req.args
        _queue(app, a.topic, a.queue_id)
        req.reply(ResponseCode.SUCCESS, "", {"offset": store.search_offset_by_time(a.topic, a.queue_id, a.timestamp)})

    def query_message(req):
        a = req.args
        recs = store.query_by_key(a.topic, a.key, min(a.max_msgs, 1024), a.begin_ts, a.end_ts)
        if not recs:
            raise QueryNotFoundError(f"no message with key {a.key!r} in topic {a.topic!r}")
        req.reply(ResponseCode.SUCCESS, "", {"count": len(recs)}, [r.stored for r in recs])

    def view_message(req):
        off = req.args.offset
        rec = store.lookup(off)
        if rec is None:
            raise QueryNotFoundError(f"no message at commitlog offset {off} (never written, or expired)")
        req.reply(ResponseCode.SUCCESS, "", {}, [rec.stored])

    def heartbeat(req):
        a = req.args
        changed = app.clients.heartbeat(a.client_id, req.identity, a.producers, a.consumers)
        for group in changed:
            app.notify_group_changed(group)
        req.reply(ResponseCode.SUCCESS)

    def unregister_client(req):
        a = req.args
        changed = app.clients.unregister(a.client_id, a.producer_group, a.consumer_group)
        for group in changed:
            app.notify_group_changed(group)
        req.reply(ResponseCode.SUCCESS)

    def consumer_list(req):
        req.reply(ResponseCode.SUCCESS, "", {"ids": app.clients.consumer_ids(req.args.group)})

    def clean_expired(req):
        n = store.clean_expired(force=True)
        req.reply(ResponseCode.SUCCESS, "", {"deleted_segments": n})

    table = {
        RequestCode.SEND_MESSAGE: send,
        RequestCode.SEND_MESSAGE_V2: send,
        RequestCode.SEND_BATCH_MESSAGE: send_batch,
        RequestCode.PULL_MESSAGE: pull,
        RequestCode.UPDATE_AND_CREATE_TOPIC: create_topic,
        RequestCode.DELETE_TOPIC_IN_BROKER: delete_topic,
        RequestCode.GET_ALL_TOPIC_CONFIG: all_topics,
        RequestCode.QUERY_CONSUMER_OFFSET: query_offset,
        RequestCode.UPDATE_CONSUMER_OFFSET: update_offset,
        RequestCode.GET_MAX_OFFSET: max_offset,
        RequestCode.GET_MIN_OFFSET: min_offset,
        RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: search_by_time,
        RequestCode.QUERY_MESSAGE: query_message,
        RequestCode.VIEW_MESSAGE_BY_ID: view_message,
        RequestCode.HEART_BEAT: heartbeat,
        RequestCode.UNREGISTER_CLIENT: unregister_client,
        RequestCode.GET_CONSUMER_LIST_BY_GROUP: consumer_list,
        RequestCode.ADMIN_CLEAN_EXPIRED: clean_expired,
    }
    # Feature modules add their own codes; each owns its handlers and state.
    for name in EXTENSIONS:
        table.update(importlib.import_module(f"quiver_broker.{name}").make_handlers(app))
    if app.config.is_slave:
        for code in SLAVE_REFUSES:
            if code in table:
                table[code] = _refuse_on_slave
    return table


# A slave only replicates: what writes the store or the topic table goes to the master.
SLAVE_REFUSES = (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE,
                 RequestCode.END_TRANSACTION, RequestCode.CONSUMER_SEND_MSG_BACK, RequestCode.SCHEDULE_REPUT,
                 RequestCode.SCHEDULE_INIT, RequestCode.TRANSACTION_CHECK, RequestCode.UPDATE_AND_CREATE_TOPIC,
                 RequestCode.DELETE_TOPIC_IN_BROKER)


def _refuse_on_slave(req):
    req.reply(ResponseCode.SERVICE_NOT_AVAILABLE,
              f"this broker is a slave: request {req.env.code} goes to the master of its broker name")


# Feature modules of this package with `make_handlers(app) -> {RequestCode: fn}`.
EXTENSIONS: tuple[str, ...] = ("schedule", "filter_servers", "retry", "locks", "consume_stats", "transaction",
                               "ha_master", "ha_slave")


