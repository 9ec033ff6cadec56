"""`quiver msg send | query | view | get | cancel | tail | trace` (mqadmin sendMessage,
queryMsgByKey, queryMsgById, queryMsgByOffset, consumeMessage; msgTrace). The calls are the
SDK's (Producer, Admin); `tail` reads queues with the SDK's pull engine without a group, so it
commits no offset and takes no queue from a consumer."""

import sys
import time

import click

from quiver.client.access import broker_access
from quiver.tools.cli_common import (EXIT_NOT_FOUND, EXIT_SERVER, MSG_ID, TOPIC, check_brokers, finish, ms_text,
                                     output_option, parse_props, parse_when, print_json, say, show)

BODY_SHOWN = 200   # characters of a body in a table (json has it whole)
TAIL_IDLE_S = 0.2  # nothing new on any queue: look again this soon
ROUTE_REFRESH_S = 10.0


def message_doc(m) -> dict:
    return {"msg_id": m.msg_id, "offset_msg_id": m.offset_msg_id, "topic": m.topic, "tags": m.tags,
            "keys": m.keys, "broker": m.broker, "queue_id": m.queue_id, "queue_offset": m.queue_offset,
            "born_timestamp": m.born_timestamp, "store_timestamp": m.store_timestamp,
            "reconsume_times": m.reconsume_times, "properties": m.properties,
            "body": m.body.decode(errors="replace"), "body_bytes": len(m.body)}


def _table_doc(doc: dict) -> dict:
    body = doc["body"]
    return {**doc, "store_timestamp": ms_text(doc["store_timestamp"]), "born_timestamp": ms_text(doc["born_timestamp"]),
            "body": body if len(body) <= BODY_SHOWN else body[:BODY_SHOWN] + "..."}


def show_messages(obj, output, msgs: list) -> None:
    docs = [message_doc(m) for m in msgs]
    if obj.fmt(output) == "json":
        print_json({"messages": docs})
        return
    for d in docs:
        show(obj, "table", _table_doc(d), title=f"message {d['msg_id']}")


@click.group()
def msg():
    """Messages: send, look up (by key, id or queue offset), follow, cancel, trace.

    \b
    Examples:
      quiver msg send --topic Orders --body hello
      quiver msg get --topic Orders --broker broker-a --queue 0 --offset 42
      quiver msg tail --topic Orders
    """


@msg.command()
@click.option("--topic", type=TOPIC, required=True)
@click.option("--body", help="the body as text")
@click.option("--file", "path", type=click.File("rb"), help="the body from a file, '-' for stdin")
@click.option("--tags")
@click.option("--keys", multiple=True, help="a key (repeatable, or comma separated)")
@click.option("--props", multiple=True, metavar="KEY=VALUE", help="a user property (repeatable)")
@click.option("--delay-level", type=click.IntRange(0, 64), default=0, help="deliver after the level's delay (1 = 1s ...)")
@click.option("--deliver-at", help="deliver at this time: ISO datetime, epoch s (10 digits) or ms (13 digits)")
@click.option("--count", type=click.IntRange(1), default=1, show_default=True, help="send the message this many times")
@output_option
@click.pass_obj
def send(obj, topic, body, path, tags, keys, props, delay_level, deliver_at, count, output):
    """Send a message, or --count copies of it (mqadmin sendMessage).

    \b
    Examples:
      quiver msg send --topic Orders --body '{"id": 1}' --keys order-1 --props region=eu
      quiver msg send --topic Orders --file order.json --delay-level 3
      echo hi | quiver msg send --topic Orders --file - --deliver-at 2030-01-01T09:00:00
      quiver msg send --topic Load --body x --count 1000 -o json
    """
    from quiver.client.message import Message
    if (body is None) == (path is None):
        raise click.UsageError("give the body with exactly one of --body TEXT or --file PATH|-")
    data = body.encode() if path is None else path.read()
    if not data:
        raise click.BadParameter("the body is empty: a message needs at least one byte",
                                 param_hint="--body" if path is None else "--file")
    if delay_level and deliver_at:
        raise click.UsageError("--delay-level and --deliver-at exclude each other")
    key_list = [k for item in keys for k in item.split(",") if k] or None
    m = Message(topic, data, tags=tags, keys=key_list, properties=parse_props(props), delay_level=delay_level,
                deliver_at=parse_when(deliver_at) if deliver_at else None)
    with obj.producer() as p:
        results = _send_all(p, m, count)
    docs = [{"status": r.status.value, "msg_id": r.msg_id, "offset_msg_id": r.offset_msg_id, "broker": r.broker,
             "queue_id": r.queue_id, "queue_offset": r.queue_offset} for r in results]
    if count == 1:
        show(obj, output, docs[0])
    else:
        show(obj, output, {"sent": len(docs), "results": docs}, docs,
             ["status", "msg_id", "broker", "queue_id", "queue_offset"], f"{len(docs)} message(s) sent")


def _send_all(p, m, count: int) -> list:
    if count == 1:
        return [p.send(m)]
    from rich.progress import Progress
    from quiver.tools.cli_common import console
    out = []
    with Progress(console=console(stderr=True), transient=True) as bar:
        task = bar.add_task("sending", total=count)
        for _ in range(count):
            out.append(p.send(m))
            bar.advance(task)
    return out


@msg.command()
@click.option("--topic", type=TOPIC, required=True)
@click.option("--key", required=True)
@click.option("--max", "max_num", type=click.IntRange(1, 1024), default=32, show_default=True)
@output_option
@click.pass_obj
def query(obj, topic, key, max_num, output):
    """Messages of a topic by key (the IndexFile); exit 1 when none (mqadmin queryMsgByKey).

    \b
    Examples:
      quiver msg query --topic Orders --key order-42
    """
    with obj.admin() as a:
        msgs = a.query_by_key(topic, key, max_num=max_num)
    if not msgs:
        finish(EXIT_NOT_FOUND, f"no message with key {key!r} in topic {topic}")
    show_messages(obj, output, msgs)


@msg.command()
@click.option("--id", "msg_id", type=MSG_ID, required=True, help="offset msgId, or unique msgId with --topic")
@click.option("--topic", type=TOPIC, help="the topic, to look up a unique msgId")
@output_option
@click.pass_obj
def view(obj, msg_id, topic, output):
    """A message by offset msgId, or by unique msgId within a topic (mqadmin queryMsgById).

    \b
    Examples:
      quiver msg view --id 7F00000100002A9F0000000000000000
      quiver msg view --id 7F00000125D48DA90F7C8E85B65B0000 --topic Orders -o json
    """
    with obj.admin() as a:
        m = a.view_message(msg_id, topic)
    show_messages(obj, output, [m])


@msg.command()
@click.option("--topic", type=TOPIC, required=True)
@click.option("--broker", required=True, help="broker name (see `quiver topic status`)")
@click.option("--queue", "queue_id", type=click.IntRange(0), required=True)
@click.option("--offset", type=click.IntRange(0), required=True, help="queue offset")
@output_option
@click.pass_obj
def get(obj, topic, broker, queue_id, offset, output):
    """The message at a queue offset; exit 1 when there is none (mqadmin queryMsgByOffset).

    \b
    Examples:
      quiver msg get --topic Orders --broker broker-a --queue 0 --offset 42
    """
    from quiver.client.base import MessageQueue
    with obj.admin() as a:
        check_brokers(a, [broker])
        m = a.message_at(MessageQueue(topic, broker, queue_id), offset)
    if m is None:
        finish(EXIT_NOT_FOUND, f"no message at {topic} {broker}:{queue_id} offset {offset}")
    show_messages(obj, output, [m])


@msg.command()
@click.option("--id", "msg_id", type=MSG_ID, required=True, help="the msgId send() returned")
@click.option("--topic", type=TOPIC, help="the message's topic (needed with auth on)")
@output_option
@click.pass_obj
def cancel(obj, msg_id, topic, output):
    """Cancel a delayed or timer message not yet delivered; exit 1 when too late.

    \b
    Examples:
      quiver msg cancel --id 7F00000125D48DA90F7C8E85B65B0000 --topic Orders
    """
    with obj.producer() as p:
        ok = p.cancel_scheduled(msg_id, topic)
    show(obj, output, {"msg_id": msg_id, "topic": topic, "cancelled": ok,
                       "detail": "will not be delivered" if ok else "too late: already delivered"})
    if not ok:
        finish(EXIT_NOT_FOUND)


@msg.command()
@click.option("--topic", type=TOPIC, required=True)
@click.option("--from", "start", type=click.Choice(["latest", "earliest"]), default="latest", show_default=True,
              help="new messages only, or everything held first")
@click.option("--count", type=click.IntRange(1), help="stop after this many messages")
@click.option("--tags", help="only these tags ('a || b')")
@output_option
@click.pass_obj
def tail(obj, topic, start, count, tags, output):
    """Follow a topic: print messages as they are stored, until Ctrl-C (or --count).

    Reads every queue without a consumer group: commits no offset, takes no queue from a
    consumer. -o json prints one JSON object per line.

    \b
    Examples:
      quiver msg tail --topic Orders
      quiver msg tail --topic Orders --from earliest --count 10 -o json
    """
    as_json = obj.fmt(output) == "json"
    seen = 0
    try:
        with obj.admin() as a:
            for m in follow(a, topic, start, tags):
                if as_json:
                    click.echo(_json_line(message_doc(m)))
                else:
                    body = m.body.decode(errors="replace")
                    say(f"{ms_text(m.store_timestamp)} {m.broker}:{m.queue_id}@{m.queue_offset} {m.msg_id} "
                        f"tags={m.tags or '-'} keys={','.join(m.keys) or '-'} {body[:BODY_SHOWN]!r}")
                sys.stdout.flush()
                seen += 1
                if count and seen >= count:
                    break
    except KeyboardInterrupt:
        pass
    if not as_json:
        say(f"{seen} message(s)", err=True)


def _json_line(doc: dict) -> str:
    import json
    return json.dumps(doc, sort_keys=True, default=str)


def follow(admin, topic: str, start: str, tags: str | None):
    """Yield the messages of every queue of `topic` as they come (a generator: the caller stops it)."""
    from quiver.client import queue_puller
    next_off: dict = {}
    refreshed = 0.0
    while True:
        if time.monotonic() - refreshed > ROUTE_REFRESH_S:
            for mq in admin.queues(topic):   # a new queue starts where the choice says
                if mq not in next_off:
                    next_off[mq] = admin.min_offset(mq) if start == "earliest" else admin.max_offset(mq)
            refreshed = time.monotonic()
        found = False
        for mq in sorted(next_off, key=lambda q: (q.broker, q.queue_id)):
            access = broker_access(admin)
            addr = access.broker_addr(mq.broker, topic)
            pulled = queue_puller.fetch(access, addr, queue_puller.request(topic, mq.queue_id, next_off[mq], selector=tags))
            next_off[mq] = pulled.next
            if pulled.status is queue_puller.FOUND:
                for m in pulled.messages(mq.broker, tags):
                    found = True
                    yield m
        if not found:
            time.sleep(TAIL_IDLE_S)


@msg.command()
@click.option("--id", "msg_id", type=MSG_ID, required=True, help="the msgId send() returned")
@output_option
@click.pass_obj
def trace(obj, msg_id, output):
    """The trace of a message: send, store, each delivery and consume result (mqadmin queryMsgTraceById).

    Exit 1 when the message left no trace, 3 when this build has no tracing.

    \b
    Examples:
      quiver msg trace --id 7F00000125D48DA90F7C8E85B65B0000
    """
    try:
        from quiver.tools.trace_view import format_trace
    except ImportError:
        format_trace = None
    with obj.admin() as a:
        if format_trace is None or not hasattr(a, "trace"):
            finish(EXIT_SERVER, "tracing not available in this build")
        rows = a.trace(msg_id)
    if not rows:
        finish(EXIT_NOT_FOUND, f"no trace of message {msg_id}")
    if obj.fmt(output) == "json":
        print_json({"msg_id": msg_id, "trace": rows})
    else:
        for line in format_trace(rows):
            say(line)


def register(cli) -> None:
    cli.add_command(msg)
