"""Request handlers of the txn-checker: PING and STATUS come from quiver.runtime.service.Service.

`make_handlers(app)` adds CHECK_NOW-style operator codes here if ever needed;
today the checker answers only health and status on its listen socket.
"""


def make_handlers(app) -> dict:
    return {}
