"""Request handlers of the name server: `HANDLERS = {RequestCode.X: fn}`."""

import logging

from quiver.codes import RequestCode, ResponseCode
from quiver.errors import TopicNotExistError, InvalidParameterError

log = logging.getLogger(__name__)


def _need(ext: dict, name: str, kind=str):
    value = ext.get(name)
    if not isinstance(value, kind) or (kind is str and not value):
        raise InvalidParameterError(f"field {name!r} ({kind.__name__}) is required")
    return value


def make_handlers(table):
    def register_broker(req):
        ext = req.ext
        topics = ext.get("topics") or {}
        if not isinstance(topics, dict):
            raise InvalidParameterError("field 'topics' must map topic name -> config")
        out = table.register(_need(ext, "cluster"), _need(ext, "broker_name"), _need(ext, "broker_addr"),
                             int(ext.get("broker_id", 0)), ext.get("data_version") or {}, topics,
                             ext.get("filter_servers") or [], ext.get("ha_addr") or "")
        req.reply(ResponseCode.SUCCESS, "", out)

    def unregister_broker(req):
        ext = req.ext
        found = table.unregister(_need(ext, "cluster"), _need(ext, "broker_name"), _need(ext, "broker_addr"),
                                 ext.get("broker_id"))
        log.info("broker %s unregistered (%s)", ext["broker_addr"], "known" if found else "unknown")
        req.reply(ResponseCode.SUCCESS)

    def get_route(req):
        topic = _need(req.ext, "topic")
        route = table.route(topic)
        if route is None:
            raise TopicNotExistError(f"no route for topic {topic!r}: create it or enable auto-create on a broker")
        req.reply(ResponseCode.SUCCESS, "", {"route": route})

    def cluster_info(req):
        req.reply(ResponseCode.SUCCESS, "", {"cluster": table.cluster_info()})

    def topic_list(req):
        req.reply(ResponseCode.SUCCESS, "", {"topics": table.topic_list()})

    return {
        RequestCode.REGISTER_BROKER: register_broker,
        RequestCode.UNREGISTER_BROKER: unregister_broker,
        RequestCode.GET_ROUTEINFO_BY_TOPIC: get_route,
        RequestCode.GET_BROKER_CLUSTER_INFO: cluster_info,
        RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: topic_list,
    }
