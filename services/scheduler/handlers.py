"""Request handlers of the scheduler: `make_handlers(app)` -> {RequestCode: fn}.

PING (with this instance's client id, so peers can tell a restarted process
on a reused port from the one they knew), STATUS (from the Service, filled by
App.status) and SCHEDULE_CANCEL.
"""

from quiver.codes import RequestCode, ResponseCode


def make_handlers(app):
    def ping(req):
        req.reply(ResponseCode.SUCCESS, "pong", {"service": "scheduler", "client_id": app.client.client_id})

    def cancel(req):
        req.reply(ResponseCode.SUCCESS, "", {"result": app.cancel(req.args.msg_id)})

    return {RequestCode.PING: ping, RequestCode.SCHEDULE_CANCEL: cancel}
