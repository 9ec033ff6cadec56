"""`quiver topic create | shrink | compact | delete | list | route | status | purge` (mqadmin updateTopic,
deleteTopic, topicList, topicRoute, topicStatus). Does not own the calls (Admin does) nor the
shrink rule (the broker refuses to lower read queues that hold a backlog, for every client)."""

import click

from quiver.wire.schema import TOPIC_COMPACT

from quiver.tools.cli_common import (EXIT_NOT_FOUND, TOPIC, check_brokers, confirm, finish, ms_text, output_option,
                                     say, show)


@click.group()
def topic():
    """Topics: create, delete, list, route, status (offsets per queue), purge, compact.

    \b
    Examples:
      quiver topic create Orders --queues 8
      quiver topic status Orders
      quiver topic list -o json
    """


def _configs(per_broker: dict) -> list[dict]:
    return [{"broker": b, **{k: c.get(k) for k in ("read", "write", "perm", "order")},
             "compact": bool(c.get("sysflag", 0) & TOPIC_COMPACT)} for b, c in sorted(per_broker.items())]


@topic.command()
@click.argument("name", type=TOPIC)
@click.option("--queues", type=click.IntRange(1, 1024), default=4, show_default=True,
              help="read queues (and write queues unless --write-queues)")
@click.option("--write-queues", type=click.IntRange(1, 1024), help="write queues, if not as many as --queues")
@click.option("--order", is_flag=True, help="an ordered topic (one queue per sharding key, locked consumption)")
@click.option("--broker", "brokers", multiple=True, help="only on this broker (repeatable; default: every broker)")
@click.option("--force", is_flag=True, help="lower the read queues even if the removed ones hold unconsumed messages")
@click.option("--compact/--no-compact", default=None,
              help="a compacted topic: the latest message of each key is kept (default: as it is, or not)")
@output_option
@click.pass_obj
def create(obj, name, queues, write_queues, order, brokers, force, compact, output):
    """Create a topic on every broker, or update its queue counts (mqadmin updateTopic).

    Lowering the read queues is refused (exit 1, naming the queues and groups) while the removed
    queues hold messages a group has not consumed: use `quiver topic shrink`, or --force.

    \b
    Examples:
      quiver topic create Orders --queues 8
      quiver topic create Payments --order --broker broker-a
      quiver topic create Orders --queues 8 --write-queues 2
      quiver topic create Prices --compact
    """
    from quiver.errors import IllegalOperationError
    with obj.admin() as a:
        check_brokers(a, brokers)
        try:
            done = a.create_topic(name, queues=queues, order=order, brokers=list(brokers) or None,
                                  write_queues=write_queues, force=force, compact=compact)
        except IllegalOperationError as exc:
            finish(EXIT_NOT_FOUND, f"refused: {exc.remark}")
    show(obj, output, done, _configs(done), ["broker", "read", "write", "perm", "order", "compact"], f"topic {name}")


@topic.command()
@click.argument("name", type=TOPIC)
@output_option
@click.pass_obj
def compact(obj, name, output):
    """Run a compaction pass over a compacted topic now, on every broker that has it: per queue,
    the sealed CommitLog range is reduced to the latest message of each key (tombstones past
    --delete-retention-ms removed). Exit 1 if no broker has the topic.

    \b
    Examples:
      quiver topic compact Prices
      quiver topic compact Prices -o json
    """
    from quiver.errors import QueryNotFoundError
    with obj.admin() as a:
        try:
            done = a.compact_topic(name)
        except QueryNotFoundError as exc:
            finish(EXIT_NOT_FOUND, str(exc.remark))
    rows = [{"broker": b, **r} for b, r in sorted(done.items())]
    show(obj, output, done, rows, ["broker", "queues", "read", "kept"], f"compaction of {name}")


@topic.command()
@click.argument("name", type=TOPIC)
@click.option("--queues", type=click.IntRange(1, 1024), required=True, help="the queue count to end with")
@click.option("--wait", type=click.FloatRange(0), default=0, show_default=True,
              help="seconds to wait for consumers to drain the removed queues")
@output_option
@click.pass_obj
def shrink(obj, name, queues, wait, output):
    """Take queues from a topic without hiding messages (RocketMQ's way): the write queues go down
    to --queues at once, so nothing new lands on the others; the read queues follow once every
    group consumed what those hold. Exit 0 when both are done; exit 1 while a backlog remains
    (the write queues stay lowered: run it again later, or `quiver topic create --force`).

    \b
    Examples:
      quiver topic shrink Orders --queues 2
      quiver topic shrink Orders --queues 2 --wait 600
    """
    with obj.admin() as a:
        res = a.shrink_topic(name, queues, wait_s=wait)
    show(obj, output, {"topic": name, "queues": queues, **res})
    if not res["read_done"]:
        finish(EXIT_NOT_FOUND, f"write queues of {name} are {queues} now; read queues wait: {res['behind']}")


@topic.command()
@click.argument("name", type=TOPIC)
@click.pass_obj
def delete(obj, name):
    """Delete a topic on every broker (its messages, queues and offsets); exit 1 if no broker has it.

    \b
    Examples:
      quiver topic delete Orders
    """
    with obj.admin() as a:
        had = [b for b, topics in a.topic_configs().items() if name in topics]
        if not had:
            finish(EXIT_NOT_FOUND, f"topic {name} does not exist on any broker: nothing deleted")
        a.delete_topic(name)
    say(f"deleted {name} on {', '.join(had)}")


@topic.command("list")
@click.option("--all", "show_all", is_flag=True, help="system topics too (%RETRY%, %DLQ%, SCHEDULE_TOPIC_XXXX ...)")
@output_option
@click.pass_obj
def list_(obj, show_all, output):
    """Topics the name servers route (mqadmin topicList).

    \b
    Examples:
      quiver topic list
      quiver topic list --all -o json
    """
    from quiver.wire.names import is_system_topic
    with obj.admin() as a:
        names = sorted(t for t in a.topic_list() if show_all or not is_system_topic(t))
    show(obj, output, {"topics": names}, [{"topic": t} for t in names], ["topic"])


@topic.command()
@click.argument("name", type=TOPIC)
@output_option
@click.pass_obj
def route(obj, name, output):
    """The name server's route of a topic: queues per broker and broker addresses (mqadmin topicRoute).

    \b
    Examples:
      quiver topic route Orders
      quiver topic route Orders -o json
    """
    with obj.admin() as a:
        r = a.topic_route(name)
    addrs = {b["broker_name"]: b.get("addrs", {}) for b in r.get("brokers", [])}
    rows = [{"broker": q["broker_name"], "read": q["read"], "write": q["write"], "perm": q["perm"],
             "order": q.get("order", False), "addrs": " ".join(f"{i}={x}" for i, x in sorted(addrs.get(
                 q["broker_name"], {}).items()))} for q in r.get("queues", [])]
    show(obj, output, r, rows, ["broker", "read", "write", "perm", "order", "addrs"], f"topic {name}")


def held_ranges(row: dict) -> dict:
    """'[a, b)' queue offsets served from the tiered store, held on the broker's disk, and compacted
    ('-': none)."""
    lo, hi = row["min_offset"], row["max_offset"]
    mid = min(max(row.get("local_min_offset", lo), lo), hi)
    cut = min(max(row.get("compacted_to", lo), lo), hi)
    return {"remote": f"[{lo}, {mid})" if mid > lo else "-", "local": f"[{mid}, {hi})" if hi > mid else "-",
            "compacted": f"[{lo}, {cut})" if cut > lo else "-"}


@topic.command()
@click.argument("name", type=TOPIC)
@output_option
@click.pass_obj
def status(obj, name, output):
    """Min and max offset and last store time of every queue of a topic (mqadmin topicStatus),
    which offsets a broker's tiered store serves (remote) and its disk holds (local), and, for a
    compacted topic, which were compacted (the latest message of each key kept).

    \b
    Examples:
      quiver topic status Orders
      quiver topic status Orders -o json | jq '[.queues[].max_offset] | add'
    """
    with obj.admin() as a:
        rows = a.topic_status(name)
    doc = {"topic": name, "queues": rows, "messages": sum(r["max_offset"] - r["min_offset"] for r in rows)}
    table = [{**r, "last_store_time": ms_text(r["last_store_time"]), **held_ranges(r)} for r in rows]
    show(obj, output, doc, table, ["broker", "queue_id", "min_offset", "max_offset", "remote", "local",
                                   "compacted", "last_store_time"],
         f"topic {name}: {doc['messages']} message(s) held")


@topic.command()
@click.argument("name", type=TOPIC)
@click.option("--yes", is_flag=True, help="do not ask")
@output_option
@click.pass_obj
def purge(obj, name, yes, output):
    """Drop every message of a topic, keeping the topic: each broker deletes it and creates it again
    with the same queues, perm and order; consumer offsets of the topic go too.

    Sends during the purge fail (or auto-create the topic with default queues). Exit 1 if no
    broker has the topic.

    \b
    Examples:
      quiver topic purge Scratch --yes
    """
    if not yes:
        confirm(f"drop every message of topic {name}?")
    with obj.admin() as a:
        done = a.purge_topic(name)
    show(obj, output, done, _configs(done), ["broker", "read", "write", "perm", "order"], f"purged {name}")


def register(cli) -> None:
    cli.add_command(topic)

