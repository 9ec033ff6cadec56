"""Request handlers of the scheduler: `make_handlers(app)` -> {RequestCode: fn}.

PING (with this instance's client id, so peers can tell a restarted process
on a reused port from the one they knew), STATUS (from the Service, filled by
App.status) and SCHEDULE_CANCEL.
"""

from quiver.wire import requests as rq
from quiver.wire.codes import RequestCode, ResponseCode


def make_handlers(app):
    def ping(req):
        me = rq.PingReply(service="scheduler", client_id=app.client.client_id)
        req.reply(ResponseCode.SUCCESS, "pong", me.ext())

    def cancel(req):
        req.reply(ResponseCode.SUCCESS, "", {"result": app.cancel(req.args.msg_id, req.args.topic)})

    return {RequestCode.PING: ping, RequestCode.SCHEDULE_CANCEL: cancel}
