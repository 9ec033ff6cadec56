"""An asyncio order service: an HTTP endpoint publishes orders, an async consumer handles them.

    pip install -e '.[examples]'                        # aiohttp
    quiver up                                           # a local cluster on 127.0.0.1:9876
    python examples/order_service.py --namesrv 127.0.0.1:9876 --listen 127.0.0.1:8088
    curl -X POST localhost:8088/orders -d '{"order_id": "o-1", "item": "book", "qty": 2}'
    curl localhost:8088/orders/o-1                      # {"order_id": "o-1", "status": "handled", ...}

One process, one event loop, no thread per request: POST /orders checks the
order and publishes it with quiver.aio's AsyncProducer (keyed by order id, so
`quiver msg query` finds it); an AsyncPushConsumer's coroutine listener
"handles" each order (here: records it, and asks for a retry of orders whose
item is "flaky" on their first delivery, to show RECONSUME_LATER), and GET
/orders/{id} reports what happened. GET /health answers once both clients run.
"""

from __future__ import annotations

import argparse
import asyncio
import logging

from aiohttp import web

from quiver import ConsumeResult, Message, MessageExt
from quiver.aio import AsyncProducer, AsyncPushConsumer

TOPIC = "Orders"
GROUP = "order-handlers"
log = logging.getLogger("order_service")

PRODUCER = web.AppKey("producer", AsyncProducer)
HANDLED = web.AppKey("handled", dict)


async def create_order(request: web.Request) -> web.Response:
    try:
        order = await request.json()
    except ValueError:
        raise web.HTTPBadRequest(text="the body is not JSON")
    if not isinstance(order, dict) or not isinstance(order.get("order_id"), str) or not order["order_id"]:
        raise web.HTTPBadRequest(text='an order is a JSON object with a non-empty "order_id"')
    msg = Message.json(TOPIC, order, keys=[order["order_id"]], tags="created")
    sent = await request.app[PRODUCER].send(msg)
    return web.json_response({"order_id": order["order_id"], "msg_id": sent.msg_id, "broker": sent.broker,
                              "queue_id": sent.queue_id, "status": "accepted"}, status=202)


async def order_status(request: web.Request) -> web.Response:
    order_id = request.match_info["order_id"]
    handled = request.app[HANDLED].get(order_id)
    if handled is None:
        return web.json_response({"order_id": order_id, "status": "unknown"}, status=404)
    return web.json_response({"order_id": order_id, "status": "handled", **handled})


async def health(request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


def order_handler(handled: dict):
    """The consumer's listener: one coroutine per batch, on the service's own loop."""
    async def handle(msgs: list[MessageExt]) -> ConsumeResult:
        for m in msgs:
            order = m.json()
            if order.get("item") == "flaky" and m.reconsume_times == 0:
                log.info("order %s: first try failed, asking for a retry", order["order_id"])
                return ConsumeResult.RECONSUME_LATER
            await asyncio.sleep(0)   # the real work: a database write, a call to a payment API ...
            handled[order["order_id"]] = {"item": order.get("item"), "deliveries": m.reconsume_times + 1}
        return ConsumeResult.SUCCESS
    return handle


def make_app(namesrv: str, **consumer_options) -> web.Application:
    app = web.Application()
    app[HANDLED] = {}

    async def clients(app: web.Application):
        consumer = AsyncPushConsumer(GROUP, namesrv=namesrv, **consumer_options)
        consumer.subscribe(TOPIC, "created")
        consumer.register(order_handler(app[HANDLED]))
        async with AsyncProducer("order-service", namesrv=namesrv) as producer, consumer:
            app[PRODUCER] = producer
            yield
    app.cleanup_ctx.append(clients)
    app.add_routes([web.post("/orders", create_order), web.get("/orders/{order_id}", order_status),
                    web.get("/health", health)])
    return app


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--namesrv", default="127.0.0.1:9876")
    ap.add_argument("--listen", default="127.0.0.1:8088", help="HOST:PORT of the HTTP endpoint")
    ap.add_argument("--consume-from", default="last", help="where a new consumer group starts: last | first")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    host, port = args.listen.rsplit(":", 1)
    web.run_app(make_app(args.namesrv, consume_from=args.consume_from), host=host, port=int(port),
                print=lambda *_: log.info("listening on http://%s", args.listen))


if __name__ == "__main__":
    main()
