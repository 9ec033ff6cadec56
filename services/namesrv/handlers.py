"""Request handlers of the name server: `HANDLERS = {RequestCode.X: fn}`."""

import logging

from quiver.wire.codes import RequestCode, ResponseCode
from quiver.wire.replies import ClusterReply, RouteReply, TopicListReply
from quiver.errors import TopicNotExistError

log = logging.getLogger(__name__)


def make_handlers(table):
    def register_broker(req):
        # req.args: the whole registration decoded by quiver.wire.requests.RegisterBroker, the one check of it
        req.reply(ResponseCode.SUCCESS, "", table.register(req.args))

    def unregister_broker(req):
        unreg = req.args
        found = table.unregister(unreg)
        log.info("broker %s unregistered (%s)", unreg.broker_addr, "known" if found else "unknown")
        req.reply(ResponseCode.SUCCESS)

    def get_route(req):
        topic = req.args.topic
        route = table.route(topic)
        if route is None:
            raise TopicNotExistError(f"no route for topic {topic!r}: create it or enable auto-create on a broker")
        req.reply(ResponseCode.SUCCESS, "", RouteReply(route=route))

    def cluster_info(req):
        req.reply(ResponseCode.SUCCESS, "", ClusterReply(cluster=table.cluster_info()))

    def topic_list(req):
        req.reply(ResponseCode.SUCCESS, "", TopicListReply(topics=table.topic_list()))

    return {
        RequestCode.REGISTER_BROKER: register_broker,
        RequestCode.UNREGISTER_BROKER: unregister_broker,
        RequestCode.GET_ROUTEINFO_BY_TOPIC: get_route,
        RequestCode.GET_BROKER_CLUSTER_INFO: cluster_info,
        RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: topic_list,
    }
