"""`quiver consumer progress | list | delete | reset | dlq | resend | config` (mqadmin
consumerProgress, consumerConnection, updateSubGroup, deleteSubGroup, resetOffsetByTime).

`consumer config GROUP` without a flag shows the stored config; it writes only when given
--retry-max-times (it used to write the default 16 whenever the flag was left out). Reset and
config of a group no broker knows (no config, offsets nor member) exit 1, changing nothing,
unless --create: a typo must not store offsets for a group that never existed."""

import click

from quiver.tools.cli_common import (EXIT_NOT_FOUND, GROUP, MSG_ID, TOPIC, WHEN_HINT, finish, ms_text, output_option,
                                     parse_when, print_json, print_table, say, show)
from quiver.wire.properties import DLQ_ORIGIN_MESSAGE_ID, DLQ_ORIGIN_TOPIC, RECONSUME_TIME

DEFAULT_RETRY_MAX_TIMES = 16   # the broker's when a group has no stored config (retry.py)
LATEST = 2 ** 63 - 1           # an offset past every queue's max: the broker holds it to the max


@click.group()
def consumer():
    """Consumer groups: progress and lag, list, delete, offset reset, dead letters, config.

    \b
    Examples:
      quiver consumer list
      quiver consumer progress order-workers
      quiver consumer reset order-workers --topic Orders --to 2024-05-01T12:00:00 --dry-run
    """


@consumer.command()
@click.argument("group", type=GROUP)
@click.option("--topic", type=TOPIC, help="only this topic")
@output_option
@click.pass_obj
def progress(obj, group, topic, output):
    """Per queue: broker and consumer offset, lag, last consume time, owning client; members and
    subscription conflicts. Exit 1 when the group has neither offsets nor members.

    \b
    Examples:
      quiver consumer progress order-workers
      quiver consumer progress order-workers --topic Orders -o json
    """
    with obj.admin() as a:
        stats = a.consumer_stats(group)
    rows = [r for r in stats["rows"] if not topic or r["topic"] == topic]
    if not rows and not stats["clients"]:
        finish(EXIT_NOT_FOUND, f"group {group} has no offsets and no online member")
    doc = {"group": group, "rows": rows, "clients": stats["clients"], "conflicts": stats["conflicts"],
           "lag": sum(r["lag"] for r in rows)}
    if obj.fmt(output) == "json":
        print_json(doc)
        return
    table = [{**r, "last_consume_time": ms_text(r.get("last_consume_time"))} for r in rows]
    print_table(table, ["topic", "broker", "queue_id", "broker_offset", "consumer_offset", "lag",
                        "last_consume_time", "client_id"], f"group {group}: lag {doc['lag']}")
    say(f"clients: {', '.join(stats['clients']) or '(none online)'}")
    for t, exprs in stats["conflicts"].items():
        say(f"WARNING: members of {group} subscribe to {t} differently (messages may be lost): "
            + "; ".join(f"{e} <- {', '.join(c)}" for e, c in exprs.items()))


@consumer.command("list")
@output_option
@click.pass_obj
def list_(obj, output):
    """Every consumer group a broker knows: stored config, queues with offsets, online members.

    \b
    Examples:
      quiver consumer list
      quiver consumer list -o json | jq 'keys'
    """
    with obj.admin() as a:
        groups = a.group_list()
    rows = [{"group": g, "brokers": " ".join(i["brokers"]), "offsets": i["offsets"], "online": i["online"],
             "retry_max_times": (i["config"] or {}).get("retry_max_times", f"{DEFAULT_RETRY_MAX_TIMES} (default)")}
            for g, i in groups.items()]
    show(obj, output, {"groups": groups}, rows, ["group", "online", "offsets", "retry_max_times", "brokers"])


@consumer.command()
@click.argument("group", type=GROUP)
@click.option("--keep-offsets", is_flag=True, help="delete only the config, keep the stored offsets")
@click.pass_obj
def delete(obj, group, keep_offsets):
    """Delete a group's config and offsets on every broker; exit 1 if no broker knows it
    (mqadmin deleteSubGroup). Online members keep running: stop them first.

    \b
    Examples:
      quiver consumer delete old-workers
    """
    from quiver.errors import SubscriptionGroupNotExistError
    with obj.admin() as a:
        try:
            done = a.delete_group(group, clean_offset=not keep_offsets)
        except SubscriptionGroupNotExistError:
            finish(EXIT_NOT_FOUND, f"group {group} is not known to any broker: nothing deleted")
    say(f"deleted group {group} on {', '.join(done)}{' (offsets kept)' if keep_offsets else ''}")


def _target(to: str | None, timestamp: int | None, offset: int | None) -> tuple[int | None, int | None, str]:
    """(timestamp, offset, label) of the reset; exactly one way of saying where. A bare number in
    --to is a time (10 digits: epoch s, 13: epoch ms), never an offset: `offset:N` says that."""
    given = [x for x in (to, timestamp, offset) if x is not None]
    if len(given) != 1:
        raise click.UsageError("say where with exactly one of --to, --timestamp or --to-offset")
    if timestamp is not None:
        return timestamp, None, f"time {ms_text(timestamp)}"
    if offset is not None:
        return None, offset, f"offset {offset}"
    if to == "earliest":
        return None, 0, "earliest"
    if to == "latest":
        return None, LATEST, "latest"
    if to.startswith("offset:"):
        n = to[len("offset:"):]
        if not n.isdigit():
            raise click.BadParameter(f"{to!r}: use offset:N with N a queue offset", param_hint="--to")
        return None, int(n), f"offset {n}"
    try:
        ts = parse_when(to)
    except click.BadParameter:
        raise click.BadParameter(f"{to!r}: use earliest, latest, {WHEN_HINT}, or offset:N for a queue offset",
                                 param_hint="--to") from None
    return ts, None, f"time {ms_text(ts)}"


def known_group(a, group: str) -> bool:
    """Some broker has the group's config or offsets, or a member of it is online."""
    return group in a.group_list()


def _refuse_unknown(a, group: str, create: bool) -> None:
    if not create and not known_group(a, group):
        finish(EXIT_NOT_FOUND, f"group {group} is not known to any broker (no config, offsets or member): "
                               "nothing changed; pass --create to make it")


@consumer.command()
@click.argument("group", type=GROUP)
@click.option("--topic", type=TOPIC, required=True)
@click.option("--to", help="earliest | latest | ISO datetime (local unless it has an offset) | epoch s (10 digits) "
                           "or ms (13 digits) | offset:N")
@click.option("--timestamp", type=click.IntRange(0), help="epoch ms: the first message stored at or after it")
@click.option("--to-offset", "--offset", "offset", type=click.IntRange(0),
              help="queue offset, held to each queue's min and max")
@click.option("--create", is_flag=True, help="store offsets even for a group no broker knows yet")
@click.option("--dry-run", is_flag=True, help="show each queue's current and new offset, change nothing")
@output_option
@click.pass_obj
def reset(obj, group, topic, to, timestamp, offset, create, dry_run, output):
    """Move a group's offsets on every queue of a topic; online members are told and consume again
    from there, a stopped group resumes there at its next start (mqadmin resetOffsetByTime).
    Exit 1, changing nothing, for a group no broker knows unless --create.

    \b
    Examples:
      quiver consumer reset order-workers --topic Orders --to earliest
      quiver consumer reset order-workers --topic Orders --to 2024-05-01T12:00:00 --dry-run
      quiver consumer reset order-workers --topic Orders --to 1714564800 --dry-run
      quiver consumer reset order-workers --topic Orders --to offset:1200 -o json
    """
    ts, off, label = _target(to, timestamp, offset)
    with obj.admin() as a:
        if not dry_run:
            _refuse_unknown(a, group, create)
        if dry_run:
            rows = _plan(a, group, topic, ts, off)
        else:
            done = a.reset_offset(group, topic, ts, offset=off)
    if dry_run:
        table = [{**r, "new_time": ms_text(r["new_time"]) or "(end: next message)"} for r in rows]
        show(obj, output, {"group": group, "topic": topic, "to": label, "dry_run": True, "queues": rows}, table,
             ["broker", "queue_id", "min_offset", "max_offset", "current", "new", "new_time"],
             f"dry run: group {group} on {topic} to {label} (nothing changed)")
        return
    rows = [{"broker": mq.broker, "queue_id": mq.queue_id, "offset": o} for mq, o in done.offsets.items()]
    if obj.fmt(output) == "json":
        print_json({"group": group, "topic": topic, "to": label, "online": done.online, "members": done.members,
                    "queues": rows})
        return
    if done.online:
        say(f"group {group} is online: {done.members} member(s) told; they drop what they cached of these "
            "queues and consume again from:")
    else:
        say(f"group {group} is not online: offsets stored; it resumes from them at its next start:")
    print_table(rows, ["broker", "queue_id", "offset"])


def _plan(a, group: str, topic: str, ts: int | None, off: int | None) -> list[dict]:
    """What a reset would store per queue, computed as the broker does, without writing; with the
    store time of the message at each new offset (None at a queue's end)."""
    rows = []
    for mq in sorted(a.queues(topic), key=lambda q: (q.broker, q.queue_id)):
        lo, hi = a.min_offset(mq), a.max_offset(mq)
        new = a.search_offset(mq, ts) if ts is not None else min(max(off, lo), hi)
        at = a.message_at(mq, new) if new < hi else None
        rows.append({"broker": mq.broker, "queue_id": mq.queue_id, "min_offset": lo, "max_offset": hi,
                     "current": a.consumer_offset(group, mq), "new": new,
                     "new_time": at.store_timestamp if at else None})
    return rows


@consumer.command()
@click.argument("group", type=GROUP)
@click.option("--max", "max_num", type=click.IntRange(1), default=64, show_default=True, help="messages to list")
@output_option
@click.pass_obj
def dlq(obj, group, max_num, output):
    """Dead letters of a group (%DLQ%GROUP), oldest first; exit 1 when there are none.

    \b
    Examples:
      quiver consumer dlq order-workers
      quiver consumer dlq order-workers -o json
    """
    from quiver.tools.cli_msg import message_doc
    with obj.admin() as a:
        msgs = a.dlq_messages(group, max_num)
    if not msgs:
        finish(EXIT_NOT_FOUND, f"no dead letters for group {group}")
    docs = [message_doc(m) for m in msgs]
    rows = [{"msg_id": d["msg_id"], "origin_topic": d["properties"].get(DLQ_ORIGIN_TOPIC),
             "origin_id": d["properties"].get(DLQ_ORIGIN_MESSAGE_ID),
             "reconsumed": d["properties"].get(RECONSUME_TIME, d["reconsume_times"]),
             "stored": ms_text(d["store_timestamp"]), "body": d["body"][:60]} for d in docs]
    show(obj, output, {"group": group, "messages": docs}, rows,
         ["msg_id", "origin_topic", "origin_id", "reconsumed", "stored", "body"])


@consumer.command()
@click.argument("group", type=GROUP)
@click.argument("more_ids", type=MSG_ID, nargs=-1)
@click.option("--id", "ids", type=MSG_ID, multiple=True, help="a dead letter's msg id or origin msg id (repeatable; default all)")
@output_option
@click.pass_obj
def resend(obj, group, more_ids, ids, output):
    """Send dead letters back to their original topic. Exit 1, resending nothing, when an id is
    not among the group's dead letters (or there are none).

    \b
    Examples:
      quiver consumer resend order-workers
      quiver consumer resend order-workers --id 7F00000125D48DA90F7C8E85B65B0000
    """
    wanted = list(ids) + list(more_ids)
    with obj.admin() as a:
        letters = a.dlq_messages(group, max_num=1 << 20)
        known = {m.msg_id for m in letters} | {m.properties.get(DLQ_ORIGIN_MESSAGE_ID) for m in letters}
        unknown = [i for i in wanted if i not in known]
        if not letters:
            finish(EXIT_NOT_FOUND, f"no dead letters for group {group}: nothing resent")
        if unknown:
            finish(EXIT_NOT_FOUND, f"not dead letters of group {group}: {', '.join(unknown)}; nothing resent")
        res = a.resend_dlq(group, wanted or None)
    rows = [{"msg_id": r.msg_id, "topic": r.topic, "broker": r.broker, "queue_id": r.queue_id,
             "queue_offset": r.queue_offset} for r in res]
    show(obj, output, {"group": group, "resent": rows}, rows, ["msg_id", "topic", "broker", "queue_id", "queue_offset"],
         f"{len(rows)} message(s) resent")


@consumer.command()
@click.argument("group", type=GROUP)
@click.option("--retry-max-times", type=click.IntRange(0, 1_000_000),
              help="store this max reconsume count (before the DLQ); without it the stored config is shown")
@click.option("--create", is_flag=True, help="store the config even for a group no broker knows yet")
@output_option
@click.pass_obj
def config(obj, group, retry_max_times, create, output):
    """Show a group's stored config per broker, or with --retry-max-times store it on every broker
    (mqadmin updateSubGroup). Showing exits 1 when no broker has a config for the group; storing
    exits 1, changing nothing, for a group no broker knows unless --create.

    \b
    Examples:
      quiver consumer config order-workers
      quiver consumer config order-workers --retry-max-times 3
      quiver consumer config new-workers --retry-max-times 3 --create
    """
    with obj.admin() as a:
        if retry_max_times is not None:
            _refuse_unknown(a, group, create)
            a.set_group_config(group, retry_max_times)
        per_broker = a.group_config(group)
    rows = [{"broker": b, "configured": c is not None,
             "retry_max_times": c["retry_max_times"] if c else f"{DEFAULT_RETRY_MAX_TIMES} (default)",
             "consume_enable": c.get("consume_enable") if c else None} for b, c in per_broker.items()]
    show(obj, output, {"group": group, "brokers": per_broker}, rows,
         ["broker", "configured", "retry_max_times", "consume_enable"], f"group {group}")
    if retry_max_times is None and not any(per_broker.values()):
        finish(EXIT_NOT_FOUND, f"group {group} has no stored config: brokers use the defaults")


def register(cli) -> None:
    cli.add_command(consumer)
