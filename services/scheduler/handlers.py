"""Request handlers of the scheduler: `make_handlers(app)` -> {RequestCode: fn}.

PING (with this instance's client id, so peers can tell a restarted process
on a reused port from the one they knew), STATUS (from the Service, filled by
App.status) and SCHEDULE_CANCEL.
"""

from quiver.codes import RequestCode, ResponseCode
from quiver.errors import InvalidParameterError


def make_handlers(app):
    def ping(req):
        req.reply(ResponseCode.SUCCESS, "pong", {"service": "scheduler", "client_id": app.client.client_id})

    def cancel(req):
        msg_id = req.ext.get("id")
        if not isinstance(msg_id, str) or not msg_id or len(msg_id) > 64:
            raise InvalidParameterError("SCHEDULE_CANCEL needs 'id': the msgId the producer got from send()")
        req.reply(ResponseCode.SUCCESS, "", {"result": app.cancel(msg_id)})

    return {RequestCode.PING: ping, RequestCode.SCHEDULE_CANCEL: cancel}
