"""`quiver cluster | broker status|config|clean | ha status | txn list | stats | filter check`
(mqadmin clusterList, brokerStatus, getBrokerConfig, cleanExpiredCQ, statsAll). The calls are
Admin's; `filter check` runs the filter service's checker as a process (the SDK never imports
a service)."""

import subprocess
import sys
import time

import click

from quiver.tools.cli_common import (EXIT_NOT_FOUND, EXIT_SERVER, EXIT_USAGE, GROUP, TOPIC, finish, output_option,
                                     print_json, print_table, say, show)


@click.command()
@output_option
@click.pass_obj
def cluster(obj, output):
    """Brokers and clusters known to the name servers (mqadmin clusterList).

    \b
    Examples:
      quiver cluster
      quiver cluster -o json
    """
    with obj.admin() as a:
        info = a.cluster_info()
    live = info.get("live") or {}
    rows = [{"cluster": b.get("cluster"), "broker": name, "id": int(bid), "addr": addr,
             "live": addr in live, "age_ms": (live.get(addr) or {}).get("age_ms")}
            for name, b in sorted(info.get("brokers", {}).items()) for bid, addr in sorted(b["addrs"].items())]
    show(obj, output, info, rows, ["cluster", "broker", "id", "addr", "live", "age_ms"])


@click.group()
def broker():
    """Brokers: STATUS summary, effective config, expired-file cleaning.

    \b
    Examples:
      quiver broker status
      quiver broker config --broker broker-a
      quiver broker clean
    """


def _statuses(a, only: str | None) -> dict:
    st = a.broker_statuses()
    if only and only not in st:   # a name typed wrong, like any unknown --broker: exit 2
        finish(EXIT_USAGE, f"error: unknown broker {only} (known: {', '.join(st) or 'none'})")
    return {only: st[only]} if only else st


@broker.command("status")
@click.option("--broker", "only", help="only this broker")
@output_option
@click.pass_obj
def broker_status(obj, only, output):
    """Each broker master's role, topics, store offsets and counters (mqadmin brokerStatus).

    \b
    Examples:
      quiver broker status
      quiver broker status --broker broker-a -o json
    """
    with obj.admin() as a:
        st = _statuses(a, only)
    rows = [{"broker": n, "addr": s.get("addr"), "role": s.get("ha_role"), "topics": s.get("topics"),
             "groups": len(s.get("groups") or {}), "max_phys_offset": (s.get("store") or {}).get("max_phys_offset"),
             "put_msgs": (s.get("store") or {}).get("put_msgs"), "get_msgs": (s.get("store") or {}).get("get_msgs"),
             "held_pulls": s.get("held_pulls")} for n, s in st.items()]
    show(obj, output, st, rows, ["broker", "addr", "role", "topics", "groups", "max_phys_offset", "put_msgs",
                                 "get_msgs", "held_pulls"])


@broker.command("config")
@click.option("--broker", "only", help="only this broker")
@output_option
@click.pass_obj
def broker_config(obj, only, output):
    """The effective settings of each broker, as its STATUS reports them (mqadmin getBrokerConfig).

    \b
    Examples:
      quiver broker config
      quiver broker config --broker broker-a -o json | jq .\"broker-a\".flush
    """
    with obj.admin() as a:
        configs = {n: s.get("config") for n, s in _statuses(a, only).items()}
    if not any(configs.values()):
        finish(EXIT_SERVER, "these brokers do not report their config in STATUS (an older build)")
    names = sorted(configs)
    keys = sorted({k for c in configs.values() for k in (c or {})})
    rows = [{"setting": k, **{n: (configs[n] or {}).get(k) for n in names}} for k in keys]
    show(obj, output, configs, rows, ["setting", *names])


@broker.command("clean")
@output_option
@click.pass_obj
def broker_clean(obj, output):
    """Delete expired CommitLog segments now on every broker, whatever the hour (mqadmin
    cleanExpiredCQ / deleteExpiredCommitLog); exit 3 if a broker failed.

    \b
    Examples:
      quiver broker clean
    """
    with obj.admin() as a:
        done = a.clean_expired_all()
    rows = [{"broker": b, "deleted_segments": n if isinstance(n, int) else None,
             "error": None if isinstance(n, int) else n} for b, n in done.items()]
    show(obj, output, {"brokers": done}, rows, ["broker", "deleted_segments", "error"])
    if any(r["error"] for r in rows):
        finish(EXIT_SERVER)


@click.group()
def ha():
    """Master/slave replication: roles, offsets, lag; with controllers epoch, master, SyncStateSet.

    \b
    Examples:
      quiver ha status
    """


@ha.command("status")
@output_option
@click.pass_obj
def ha_status(obj, output):
    """Every broker address: role, CommitLog max offset, replication lag; exit 1 if one is down.

    \b
    Examples:
      quiver ha status
      quiver ha status -o json
    """
    with obj.admin() as a:
        rows = a.ha_status()
    groups = _failover_groups(obj)
    bad = sum(1 for r in rows if r.get("error"))
    if obj.fmt(output) == "json":
        print_json({"brokers": [{k: v for k, v in r.items() if k != "ha"} for r in rows], "failover": groups})
    else:
        print_table([{**r, "role": "DOWN" if r.get("error") else r.get("role")} for r in rows],
                    ["broker", "id", "addr", "role", "max_offset", "lag_bytes", "lag_ms", "error"])
        if groups:
            say("\nautomatic failover (the controller leader's view):")
        for g in groups:
            say(f"{g['group']}: epoch {g['epoch']}, master {g['master'] or '-'}, "
                f"SyncStateSet {', '.join(g['sync_state_set']) or '-'}")
            for m in g["members"]:
                state = "master" if m["master"] else "in sync" if m["in_sync"] else "not in sync"
                lag = "" if m.get("lag_bytes") is None else m["lag_bytes"]
                say(f"  {m['id']:>3} {m['addr']:<22} {state:<12} {'alive' if m['alive'] else 'SILENT':<7} "
                    f"max_offset {m.get('max_offset')}  lag_bytes {lag}")
    if bad:
        finish(EXIT_NOT_FOUND)


def _failover_groups(obj) -> list:
    """The controller leader's groups, from name servers started with --controller ([] if none is)."""
    from quiver.errors import QuiverError
    from quiver.wire import requests as rq
    t = obj.transport("cli-ha")
    try:
        for ns in [x.strip() for x in (obj.namesrv or "").split(";") if x.strip()]:
            try:
                r = rq.ReplicaInfoReply.decode(t.call(ns, rq.ReplicaInfo(), timeout=2.0).ext)
            except QuiverError:
                continue
            if r.leader:
                return r.groups
    finally:
        t.close()
    return []


@click.group()
def txn():
    """Transactions: open half messages per broker.

    \b
    Examples:
      quiver txn list
    """


@txn.command("list")
@click.option("--max", "max_num", type=click.IntRange(1), default=1000, show_default=True, help="rows per broker")
@output_option
@click.pass_obj
def txn_list(obj, max_num, output):
    """Open transactions (half messages without an op record), oldest first: age and check count.

    \b
    Examples:
      quiver txn list
      quiver txn list -o json
    """
    with obj.admin() as a:
        per_broker = a.open_transactions(max_num)
    rows = [{"broker": b, **r, "age_s": round(r["age_ms"] / 1000, 1)} for b, rs in per_broker.items() for r in rs]
    if obj.fmt(output) == "json":
        print_json({"brokers": per_broker})
        return
    print_table(rows, ["broker", "transaction_id", "topic", "group", "age_s", "checks"])
    say(f"{len(rows)} open transaction(s)")


@click.command()
@click.option("--interval", type=click.FloatRange(0.1, 600), default=2.0, show_default=True,
              help="seconds between the two samples")
@click.option("--topic", "topics", type=TOPIC, multiple=True, help="only this topic (repeatable)")
@click.option("--group", "groups", type=GROUP, multiple=True, help="only this consumer group (repeatable)")
@output_option
@click.pass_obj
def stats(obj, interval, topics, groups, output):
    """Messages in per topic and consumed per group, per second, from two samples of the
    queues' max offsets and the groups' committed offsets `--interval` apart (mqadmin statsAll).

    \b
    Examples:
      quiver stats
      quiver stats --interval 5 --topic Orders --group order-workers -o json
    """
    from quiver.wire.names import is_system_topic
    with obj.admin() as a:
        topics = list(topics) or sorted(t for t in a.topic_list() if not is_system_topic(t))
        groups = list(groups) or list(a.group_list())
        t0, first = time.monotonic(), _sample(a, topics, groups)
        time.sleep(interval)
        t1, second = time.monotonic(), _sample(a, topics, groups)
    dt = t1 - t0
    doc = {"interval_s": round(dt, 3),
           "topics": {t: {"messages": second["topics"][t], "in_per_s": round((second["topics"][t] - n) / dt, 2)}
                      for t, n in first["topics"].items() if t in second["topics"]},
           "groups": {g: {"consumed": second["groups"][g][0], "lag": second["groups"][g][1],
                          "out_per_s": round((second["groups"][g][0] - n) / dt, 2)}
                      for g, (n, _) in first["groups"].items() if g in second["groups"]}}
    rows = ([{"kind": "topic", "name": t, "total": v["messages"], "per_s": v["in_per_s"], "lag": None}
             for t, v in doc["topics"].items()]
            + [{"kind": "group", "name": g, "total": v["consumed"], "per_s": v["out_per_s"], "lag": v["lag"]}
               for g, v in doc["groups"].items()])
    show(obj, output, doc, rows, ["kind", "name", "total", "per_s", "lag"],
         f"in (topics) and out (groups) over {dt:.1f} s")


def _sample(a, topics, groups) -> dict:
    """topic -> sum of queue max offsets; group -> (sum of committed offsets, lag)."""
    from quiver.errors import QuiverError, TopicNotExistError
    out = {"topics": {}, "groups": {}}
    for t in topics:
        try:
            out["topics"][t] = sum(a.max_offset(mq) for mq in a.queues(t))
        except TopicNotExistError:
            continue
    for g in groups:
        try:
            rows = a.consumer_stats(g)["rows"]
        except QuiverError:
            continue
        out["groups"][g] = (sum(r["consumer_offset"] or 0 for r in rows), sum(r["lag"] for r in rows))
    return out


@click.group("filter")
def filter_():
    """SQL92 selectors: check an expression against message properties.

    \b
    Examples:
      quiver filter check "region = 'eu' AND amount > 100" --props region=eu amount=250
    """


@filter_.command("check")
@click.argument("expression")
@click.argument("more_props", nargs=-1)
@click.option("--props", multiple=True, metavar="KEY=VALUE", help="message properties (TAGS, KEYS too)")
@click.option("-v", "--verbose", is_flag=True)
def filter_check(expression, more_props, props, verbose):
    """Evaluate a SQL92 expression: exit 0 match, 1 no match or NULL, 2 bad expression (caret under it).

    \b
    Examples:
      quiver filter check "a > 5" --props a=6
      quiver filter check "TAGS IN ('vip', 'gold')" --props TAGS=vip -v
    """
    argv = [sys.executable, "-m", "quiver_filter", "check", expression]
    all_props = list(props) + list(more_props)
    if all_props:
        argv += ["--props", *all_props]
    if verbose:
        argv.append("-v")
    try:
        code = subprocess.run(argv, check=False).returncode
    except OSError as exc:
        finish(EXIT_USAGE, f"error: cannot run the filter's checker ({exc})")
    if code:
        finish(code)


def register(cli) -> None:
    for cmd in (cluster, broker, ha, txn, stats, filter_):
        cli.add_command(cmd)
