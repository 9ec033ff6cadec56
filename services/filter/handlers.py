"""Request handlers of the filter server: `make_handlers(app)` -> {RequestCode: fn}.

PULL_MESSAGE for SQL92 subscriptions (tp=SQL92) and CHECK_CLIENT_CONFIG
(compile an expression; SUBSCRIPTION_PARSE_FAILED with the parser's message
and the 0-based `position` in ext). PING and STATUS come from quiver.service.
"""

from quiver.codes import RequestCode, ResponseCode
from quiver.errors import InvalidParameterError, ServiceNotAvailableError, SubscriptionParseError

from .filtered_pull import FilteredPull


def _parse_failed(req, exc: SubscriptionParseError) -> None:
    ext = {"position": exc.position} if getattr(exc, "position", None) is not None else None
    req.reply(ResponseCode.SUBSCRIPTION_PARSE_FAILED, exc.remark, ext)


def make_handlers(app):
    cfg = app.config

    def pull(req):
        ext = req.ext
        topic, queue_id, offset = ext.get("t"), ext.get("q"), ext.get("o")
        if type(queue_id) is not int or type(offset) is not int or not isinstance(topic, str) or not topic:
            raise InvalidParameterError("pull needs 't' (topic), 'q' (queue id) and 'o' (offset)")
        expr, kind = ext.get("sub"), ext.get("tp", "SQL92")
        if kind != "SQL92" or not isinstance(expr, str):
            raise InvalidParameterError("a filter server serves SQL92 subscriptions only (tp=SQL92, sub=expression); "
                                        "pull tag subscriptions from the broker")
        if not app.broker:
            raise ServiceNotAvailableError("this filter server is not attached to a broker yet")
        wanted = ext.get("ba")
        if isinstance(wanted, str) and wanted != app.broker and wanted not in app.known_brokers:
            raise ServiceNotAvailableError(f"broker {wanted} is not a broker of this cluster (as of the last look)")
        source = wanted if isinstance(wanted, str) else app.broker
        group = ext.get("g") if isinstance(ext.get("g"), str) else ""
        try:
            selector = app.selectors.get(group, topic, expr)
        except SubscriptionParseError as exc:
            app.counters["parse_failed"] += 1
            _parse_failed(req, exc)
            return
        want = max(1, min(int(ext.get("n", 32)), cfg.max_reply_messages))
        suspend_ms = max(0, min(int(ext.get("s", 0)), cfg.long_poll_max_ms))
        commit = ext.get("co") if type(ext.get("co")) is int else None
        app.counters["pulls"] += 1
        FilteredPull(app, req, selector, (group, topic, expr), group, topic, queue_id, offset, want,
                     suspend_ms, commit, source).step()

    def check_client_config(req):
        ext = req.ext
        if ext.get("tp", "SQL92") != "SQL92":
            req.reply(ResponseCode.SUCCESS)  # tag expressions need no compiling
            return
        expr = ext.get("sub")
        if not isinstance(expr, str):
            raise InvalidParameterError("CHECK_CLIENT_CONFIG needs 'sub' (the expression)")
        group = ext.get("g") if isinstance(ext.get("g"), str) else ""
        topic = ext.get("t") if isinstance(ext.get("t"), str) else ""
        try:
            app.selectors.get(group, topic, expr)
        except SubscriptionParseError as exc:
            app.counters["parse_failed"] += 1
            _parse_failed(req, exc)
            return
        req.reply(ResponseCode.SUCCESS)

    return {RequestCode.PULL_MESSAGE: pull, RequestCode.CHECK_CLIENT_CONFIG: check_client_config}
