"""Request handlers of the filter server: `make_handlers(app)` -> {RequestCode: fn}.

PULL_MESSAGE for SQL92 subscriptions (tp=SQL92) and CHECK_CLIENT_CONFIG
(compile an expression; SUBSCRIPTION_PARSE_FAILED with the parser's message
and the 0-based `position` in ext). PING and STATUS come from quiver.runtime.service.
"""

import logging

from quiver.wire.codes import RequestCode, ResponseCode
from quiver.wire.replies import SubscriptionParseFailedReply
from quiver.errors import InvalidParameterError, QuiverError, ServiceNotAvailableError, SubscriptionParseError

from .filtered_pull import FilteredPull

log = logging.getLogger(__name__)


def _parse_failed(req, exc: SubscriptionParseError) -> None:
    req.reply(ResponseCode.SUBSCRIPTION_PARSE_FAILED, exc.remark,
              SubscriptionParseFailedReply(position=getattr(exc, "position", None)))


def _answer(req, handler, **kw) -> None:
    """Run a handler resumed outside the Service's dispatch: its errors become the reply."""
    if req.answered:
        return
    try:
        handler(req, **kw)
    except QuiverError as exc:
        req.reply(exc.code, exc.remark)
    except Exception as exc:
        log.exception("filtered pull failed")
        req.reply(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")


def make_handlers(app):
    cfg = app.config

    def pull(req):
        a = req.args
        if a.expression_type not in ("SQL92", None) or a.expression is None:
            raise InvalidParameterError("a filter server serves SQL92 subscriptions only (tp=SQL92, sub=expression); "
                                        "pull tag subscriptions from the broker")
        if not app.broker:
            raise ServiceNotAvailableError("this filter server is not attached to a broker yet")
        wanted = a.broker_addr
        if wanted is not None and wanted != app.broker and wanted not in app.known_brokers:
            app.look_for_broker(lambda: _answer(req, serve, looked=True))
            return
        serve(req)

    def serve(req, looked=False):
        a = req.args
        wanted = a.broker_addr
        if looked and wanted not in app.known_brokers and wanted != app.broker:
            raise ServiceNotAvailableError(f"broker {wanted} is not a broker of this cluster (the name servers "
                                           "were just asked): pull from a broker of this filter server's cluster")
        source = wanted or app.broker
        group = a.group or ""
        try:
            selector = app.selectors.get(group, a.topic, a.expression)
        except SubscriptionParseError as exc:
            app.counters["parse_failed"] += 1
            _parse_failed(req, exc)
            return
        want = min(a.max_msgs, cfg.max_reply_messages)
        suspend_ms = min(a.suspend_ms, cfg.long_poll_max_ms)
        commit = a.commit_offset if a.commit_offset is not None and a.commit_offset >= 0 else None
        app.counters["pulls"] += 1
        FilteredPull(app, req, selector, (group, a.topic, a.expression), group, a.topic, a.queue_id, a.offset, want,
                     suspend_ms, commit, source).step()

    def check_client_config(req):
        a = req.args
        if a.expression_type not in ("SQL92", None):
            req.reply(ResponseCode.SUCCESS)  # tag expressions need no compiling
            return
        if a.expression is None:
            raise InvalidParameterError("CHECK_CLIENT_CONFIG needs 'sub' (the expression)")
        try:
            app.selectors.get(a.group or "", a.topic or "", a.expression)
        except SubscriptionParseError as exc:
            app.counters["parse_failed"] += 1
            _parse_failed(req, exc)
            return
        req.reply(ResponseCode.SUCCESS)

    return {RequestCode.PULL_MESSAGE: pull, RequestCode.CHECK_CLIENT_CONFIG: check_client_config}
