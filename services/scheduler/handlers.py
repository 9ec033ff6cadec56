"""Request handlers of the scheduler: `make_handlers(app)` -> {RequestCode: fn}.

PING (with this instance's client id, so peers can tell a restarted process
on a reused port from the one they knew), STATUS (from the Service, filled by
App.status) and SCHEDULE_CANCEL (answered once its tombstone is committed).
"""

from quiver.wire import requests as rq
from quiver.wire.codes import RequestCode, ResponseCode


def make_handlers(app):
    def ping(req):
        me = rq.PingReply(service="scheduler", client_id=app.client.client_id)
        req.reply(ResponseCode.SUCCESS, "pong", me)

    def cancel(req):
        def answer(result):   # once the tombstone is committed (App.cancel)
            if isinstance(result, Exception):
                req.reply(ResponseCode.SYSTEM_ERROR, f"cancel not stored: {result}")
            else:
                req.reply(ResponseCode.SUCCESS, "", rq.ScheduleCancelReply(result=result))
        app.cancel(req.args.msg_id, req.args.topic, answer)

    return {RequestCode.PING: ping, RequestCode.SCHEDULE_CANCEL: cancel}
