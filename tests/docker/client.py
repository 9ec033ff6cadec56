"""The compose test's client: runs inside a container of the quiver image on the compose network.

    python client.py <step> '<json args>'

Each step prints one JSON object on its last line of stdout. Steps catch QuiverError
per check, so one failing feature is reported next to the others instead of hiding them.
It uses only the SDK, as an application on the compose network would.
"""

import json
import sys
import time
import traceback

from quiver import Admin, Message, MessageSelector, Producer, PullConsumer, TransactionState
from quiver.client.access import broker_access
from quiver.client.transaction_producer import TransactionProducer
from quiver.errors import QuiverError
from quiver.wire import requests as rq
from quiver.wire.transport import Transport

NAMESRV = "namesrv:9876"
FAILOVER_NAMESRV = "ctl-1:9876;ctl-2:9876;ctl-3:9876"   # the failover profile's controllers


def drain(topic: str, group: str, want: int, timeout_s: float, expression="*", namesrv=NAMESRV) -> list[str]:
    """Bodies from the first offset of every queue; stops at `want` distinct bodies or the deadline."""
    seen, deadline = set(), time.monotonic() + timeout_s
    with PullConsumer(group, namesrv=namesrv, consume_from="first") as c:
        c.subscribe(topic, expression)
        while len(seen) < want and time.monotonic() < deadline:
            seen.update(m.body.decode() for m in c.poll(0.3))
    return sorted(seen)


def checked(fn) -> dict:
    try:
        return {"ok": True, **fn()}
    except Exception as exc:  # reported, not raised: the test asserts each check on its own
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-2000:]}


def brokers(_args) -> dict:
    with Admin(namesrv=NAMESRV) as admin:
        return {"brokers": broker_access(admin).all_broker_addrs()}


def create(args) -> dict:
    with Admin(namesrv=NAMESRV) as admin:
        admin.create_topic(args["topic"], queues=args.get("queues", 4))
        return {"brokers": sorted(broker_access(admin).all_broker_addrs())}


def send(args) -> dict:
    """Sync sends; returns the bodies acknowledged SEND_OK and the brokers that stored them."""
    acked, where = [], {}
    with Producer("compose-test", namesrv=NAMESRV) as p:
        for i in range(args["count"]):
            body = f"{args['prefix']}-{i}"
            r = p.send(Message(args["topic"], body.encode(), keys=[body]))
            if r.status.value == "SEND_OK":
                acked.append(body)
                where[r.broker] = where.get(r.broker, 0) + 1
    return {"acked": acked, "per_broker": where}


def consume(args) -> dict:
    return {"bodies": drain(args["topic"], args["group"], args["want"], args.get("timeout_s", 20))}


def traffic(args) -> dict:
    """Every feature once, against a topic made here."""
    topic, out = args["topic"], {}
    with Admin(namesrv=NAMESRV) as admin:
        admin.create_topic(topic, queues=4)
        with Producer("compose-traffic", namesrv=NAMESRV) as p:
            first = p.send(Message(topic, b"order-0", tags="created", keys=["order-0"], properties={"amount": "0"}))
            futs = [p.send_async(Message(topic, f"order-{i}".encode(), tags="paid" if i % 2 else "created",
                                         keys=[f"order-{i}"], properties={"amount": str(i)}))
                    for i in range(1, 200)]
            results = [f.result() for f in futs]
        out["send"] = {"ok": first.status.value == "SEND_OK" and all(r.status.value == "SEND_OK" for r in results),
                       "sent": 1 + len(results)}
        out["consume"] = checked(lambda: {"bodies": len(drain(topic, "traffic-all", 200, 20))})
        out["tags"] = checked(lambda: {"bodies": drain(topic, "traffic-paid", 100, 20, "paid")})
        out["key"] = checked(lambda: {"bodies": [m.body.decode() for m in admin.query_by_key(topic, "order-42")]})
        out["msgid"] = checked(lambda: {"offset_msg_id": first.offset_msg_id,
                                        "body": admin.view_message(first.offset_msg_id).body.decode()})
        out["sql92"] = checked(lambda: {"bodies": drain(topic, "traffic-sql", 10, 20,
                                                        MessageSelector.sql("amount BETWEEN 100 AND 109"))})
    out["delay"] = checked(lambda: delayed(topic))
    out["transaction"] = checked(lambda: transaction(topic))
    return out


def delayed(topic: str) -> dict:
    with PullConsumer("traffic-delay", namesrv=NAMESRV, consume_from="last") as c, \
            Producer("traffic-delay", namesrv=NAMESRV) as p:
        c.subscribe(topic, "delayed")
        c.poll(0.5)  # assigned and positioned at the end before the send
        t0 = time.monotonic()
        p.send(Message(topic, b"delayed-1", tags="delayed", delay_level=1))
        got, deadline = [], time.monotonic() + 20
        while not got and time.monotonic() < deadline:
            got = c.poll(0.3)
        return {"bodies": [m.body.decode() for m in got], "after_s": round(time.monotonic() - t0, 2)}


def transaction(topic: str) -> dict:
    tp = TransactionProducer("traffic-tx", namesrv=NAMESRV, checker=lambda msg: TransactionState.ROLLBACK)
    tp.start()
    try:
        with PullConsumer("traffic-tx", namesrv=NAMESRV, consume_from="last") as c:
            c.subscribe(topic, "tx")
            c.poll(0.5)
            tp.send_in_transaction(Message(topic, b"tx-commit", tags="tx"), execute=lambda m, a: TransactionState.COMMIT)
            tp.send_in_transaction(Message(topic, b"tx-rollback", tags="tx"),
                                   execute=lambda m, a: TransactionState.ROLLBACK)
            got, deadline = set(), time.monotonic() + 5
            while time.monotonic() < deadline:  # wait a little past the commit: a rollback must never arrive
                got.update(m.body.decode() for m in c.poll(0.3))
        return {"bodies": sorted(got)}
    finally:
        tp.shutdown()


# ---- the failover profile ---------------------------------------------------------------------------


def fo_view(_args) -> dict:
    """The controller leader's view of every auto-failover group (none: no leader answered)."""
    t = Transport("compose-fo-view")
    try:
        for ns in FAILOVER_NAMESRV.split(";"):
            try:
                r = rq.ReplicaInfoReply.decode(t.call(ns, rq.ReplicaInfo(), timeout=2.0).ext)
            except QuiverError:
                continue
            if r.leader:
                return {"groups": r.groups}
    finally:
        t.close()
    return {"groups": []}


def fo_create(args) -> dict:
    """Create the topic on the group's master; report which members already know it."""
    with Admin(namesrv=FAILOVER_NAMESRV) as admin:
        if args.get("create", True):
            admin.create_topic(args["topic"], queues=args.get("queues", 4))
    t = Transport("compose-fo-topics")
    known = {}
    try:
        for addr in args["members"]:
            try:
                topics = t.call(addr, rq.GetAllTopicConfig(), timeout=2.0).ext.get("topics") or {}
                known[addr] = args["topic"] in topics
            except QuiverError as exc:
                known[addr] = str(exc)
    finally:
        t.close()
    return {"known": known}


def fo_send(args) -> dict:
    """Sync sends until `count` are acknowledged or the deadline passes; seconds to the first SEND_OK."""
    acked, t0, first_ok = [], time.monotonic(), None
    deadline = t0 + args.get("timeout_s", 60)
    with Producer("compose-fo", namesrv=FAILOVER_NAMESRV) as p:
        i = 0
        while len(acked) < args["count"] and time.monotonic() < deadline:
            body = f"{args['prefix']}-{i}"
            i += 1
            try:
                r = p.send(Message(args["topic"], body.encode(), keys=[body]))
            except QuiverError:
                time.sleep(0.05)   # no master yet: the election is under way
                continue
            if r.status.value == "SEND_OK":
                acked.append(body)
                first_ok = first_ok if first_ok is not None else round(time.monotonic() - t0, 2)
    return {"acked": acked, "first_ok_s": first_ok}


def fo_consume(args) -> dict:
    return {"bodies": drain(args["topic"], args["group"], args["want"], args.get("timeout_s", 30),
                            namesrv=FAILOVER_NAMESRV)}


STEPS = {"brokers": brokers, "create": create, "send": send, "consume": consume, "traffic": traffic,
         "fo_view": fo_view, "fo_create": fo_create, "fo_send": fo_send, "fo_consume": fo_consume}

if __name__ == "__main__":
    print(json.dumps(STEPS[sys.argv[1]](json.loads(sys.argv[2]) if len(sys.argv) > 2 else {})))
