"""Request handlers of the broker: `make_handlers(app)` -> {RequestCode: fn}.

Send and pull live in sending.py and pulling.py; the small ones are here.
"""

import importlib
import logging

from quiver.codes import RequestCode, ResponseCode
from quiver.errors import InvalidParameterError, QueryNotFoundError, TopicNotExistError
from quiver.validation import check_group, check_topic

log = logging.getLogger(__name__)


def _field(ext: dict, name: str, kind=str):
    value = ext.get(name)
    if type(value) is not kind or (kind is str and not value):
        raise InvalidParameterError(f"field {name!r} ({kind.__name__}) is required")
    return value


def _queue(app, ext) -> tuple[str, int]:
    topic, qid = _field(ext, "t"), _field(ext, "q", int)
    if topic not in app.topics:
        raise TopicNotExistError(f"topic {topic!r} does not exist on this broker")
    return topic, qid


def make_handlers(app):
    store, meta = app.store, app.metadata

    def send(req):
        app.sender.handle(req, batch=False)

    def send_batch(req):
        app.sender.handle(req, batch=True)

    def pull(req):
        app.puller.handle(req)

    def create_topic(req):
        ext = req.ext
        topic = _field(ext, "topic")
        check_topic(topic, for_create=True)
        read, write = int(ext.get("read", 4)), int(ext.get("write", ext.get("read", 4)))
        if not (1 <= read <= 1024 and 1 <= write <= 1024):
            raise InvalidParameterError("queue counts must be between 1 and 1024")
        perm = int(ext.get("perm", 6))
        if perm & ~0xF:
            raise InvalidParameterError("perm bits are READ=4, WRITE=2, INHERIT=1")
        app.put_topic(topic, read, write, perm, order=bool(ext.get("order", False)))
        req.reply(ResponseCode.SUCCESS, "", {"topic": topic, "config": app.topics[topic]})

    def delete_topic(req):
        topic = _field(req.ext, "topic")
        if topic not in app.topics:
            raise TopicNotExistError(f"topic {topic!r} does not exist on this broker")
        app.delete_topic(topic)
        req.reply(ResponseCode.SUCCESS)

    def all_topics(req):
        req.reply(ResponseCode.SUCCESS, "", {"topics": app.topics})

    def query_offset(req):
        ext = req.ext
        group = _field(ext, "g")
        topic, qid = _queue(app, ext)
        off = meta.get_offset(group, topic, qid)
        if off is None:
            raise QueryNotFoundError(f"group {group!r} has no offset for {topic}:{qid}")
        req.reply(ResponseCode.SUCCESS, "", {"offset": off})

    def update_offset(req):
        ext = req.ext
        group = _field(ext, "g")
        check_group(group)
        topic, qid = _queue(app, ext)
        meta.set_offset(group, topic, qid, _field(ext, "o", int))
        req.reply(ResponseCode.SUCCESS)

    def max_offset(req):
        topic, qid = _queue(app, req.ext)
        req.reply(ResponseCode.SUCCESS, "", {"offset": store.max_offset(topic, qid)})

    def min_offset(req):
        topic, qid = _queue(app, req.ext)
        req.reply(ResponseCode.SUCCESS, "", {"offset": store.min_offset(topic, qid)})

    def search_by_time(req):
        topic, qid = _queue(app, req.ext)
        ts = _field(req.ext, "ts", int)
        req.reply(ResponseCode.SUCCESS, "", {"offset": store.search_offset_by_time(topic, qid, ts)})

    def query_message(req):
        ext = req.ext
        topic, key = _field(ext, "t"), _field(ext, "key")
        recs = store.query_by_key(topic, key, int(ext.get("n", 32)), int(ext.get("b", 0)),
                                  int(ext.get("e", 2 ** 62)))
        if not recs:
            raise QueryNotFoundError(f"no message with key {key!r} in topic {topic!r}")
        req.reply(ResponseCode.SUCCESS, "", {"count": len(recs)}, [_raw(r) for r in recs])

    def view_message(req):
        off = _field(req.ext, "offset", int)
        rec = store.lookup(off)
        if rec is None:
            raise QueryNotFoundError(f"no message at commitlog offset {off} (never written, or expired)")
        req.reply(ResponseCode.SUCCESS, "", {}, [_raw(rec)])

    def heartbeat(req):
        ext = req.ext
        client_id = _field(ext, "client_id")
        changed = app.clients.heartbeat(client_id, req.identity, ext.get("producers"), ext.get("consumers"))
        for group in changed:
            app.notify_group_changed(group)
        req.reply(ResponseCode.SUCCESS)

    def unregister_client(req):
        ext = req.ext
        changed = app.clients.unregister(_field(ext, "client_id"), ext.get("producer_group"),
                                         ext.get("consumer_group"))
        for group in changed:
            app.notify_group_changed(group)
        req.reply(ResponseCode.SUCCESS)

    def consumer_list(req):
        group = _field(req.ext, "g")
        req.reply(ResponseCode.SUCCESS, "", {"ids": app.clients.consumer_ids(group)})

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


def _raw(rec) -> bytes:
    """Re-encode a looked-up record for the wire (lookups return decoded records)."""
    from quiver import record
    return record.encode(rec.body, rec.topic.encode(), rec.queue_id, rec.flag, rec.queue_offset,
                         rec.phys_offset, rec.sys_flag, rec.born_ts, rec.born_host, rec.store_ts,
                         rec.store_host, rec.reconsume, rec.prepared_offset, rec.props.encode(), rec.body_crc)
