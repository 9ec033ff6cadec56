"""The `quiver` command: run a local cluster and administer a running one."""

import argparse
import json
import os
import signal
import subprocess
import sys
import time

STATE_FILE = "quiver-up.json"


def _admin(args):
    from quiver.client.admin import Admin
    return Admin(namesrv=args.namesrv, credentials=args.credentials)


def _transport(args, name: str):
    from quiver.wire.transport import Transport
    return Transport(name, credentials=args.credentials)


def _print(obj) -> None:
    print(json.dumps(obj, indent=2, default=str))


# ---- local cluster ----------------------------------------------------------------

def _compose_path(given: str | None) -> str:
    if given:
        return given
    for cand in ("compose.yaml", os.path.join(os.path.dirname(__file__), "..", "..", "compose.yaml")):
        if os.path.exists(cand):
            return os.path.abspath(cand)
    raise SystemExit("no compose.yaml here: pass --compose PATH")


def cmd_up(args) -> int:
    from quiver.tools import compose
    from quiver.tools.local import LocalCluster
    specs = compose.load(_compose_path(args.compose))
    scale = {}
    for item in args.scale or []:
        name, _, n = item.partition("=")
        if name not in {s.name for s in specs} or not n.isdigit():
            raise SystemExit(f"--scale {item}: use SERVICE=N with a service of compose.yaml")
        scale[name] = int(n)
    auth_dir = _secure_dir(args) if args.secure else None
    cluster = LocalCluster(args.data_dir, auth_dir=auth_dir)
    os.makedirs(cluster.data_dir, exist_ok=True)
    overrides = {s.name: {"QUIVER_FLUSH": args.flush,
                          "QUIVER_AUTO_CREATE_TOPICS": "true" if args.auto_create else "false"}
                 for s in specs if s.role == "broker"}
    try:
        compose.start(cluster, specs, scale, free_ports=args.free_ports, overrides=overrides)
    except Exception as exc:
        print(f"quiver up failed: {exc}", file=sys.stderr)
        cluster.stop()
        return 1
    state = os.path.join(cluster.data_dir, STATE_FILE)
    cluster.write_state(state)
    print(f"Quiver is up (data in {cluster.data_dir}):")
    for svc in cluster.describe():
        metrics = f"  metrics http://{svc['metrics']}/metrics" if svc["metrics"] else ""
        print(f"  {svc['role']:<12} {svc['name']:<16} {svc['addr']:<22} pid {svc['pid']}{metrics}")
    print(f"  namesrv for clients: {cluster.namesrv}")
    if auth_dir:
        key = os.path.join(auth_dir, "admin.key")
        os.environ["QUIVER_CREDENTIALS"] = key  # the demo's clients
        print(f"  auth on: CURVE + ACL; SUPER user key {key}")
        print(f"    export QUIVER_CREDENTIALS={key}   # then: quiver acl user add NAME --out NAME.key")
    if args.demo:
        from quiver.tools.demo import run_demo
        run_demo(cluster.namesrv)
    if args.detach:
        print("running in the background; stop with: quiver down")
        return 0
    print("Ctrl-C stops every service")
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    try:
        while not stop and all(s.alive() for s in cluster.services):
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    cluster.stop()
    os.unlink(state)
    print("stopped")
    return 0


def _state(args) -> dict | None:
    path = os.path.join(os.path.abspath(args.data_dir), STATE_FILE)
    try:
        with open(path) as f:
            return json.load(f)
    except OSError:
        return None


def _secure_dir(args) -> str:
    """<data-dir>/auth, created by `quiver auth init` logic on first use."""
    from quiver.wire.curve import init_auth_dir
    path = os.path.join(os.path.abspath(args.data_dir), "auth")
    if not os.path.exists(os.path.join(path, "server.key")):
        init_auth_dir(path)
    return path


def cmd_down(args) -> int:
    state = _state(args)
    if not state:
        print("nothing started by `quiver up` here")
        return 0
    for svc in reversed(state["services"]):
        try:
            os.kill(svc["pid"], signal.SIGTERM)
        except ProcessLookupError:
            continue
        for _ in range(100):
            try:
                os.kill(svc["pid"], 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            os.kill(svc["pid"], signal.SIGKILL)
        print(f"stopped {svc['name']} (pid {svc['pid']})")
    os.unlink(os.path.join(os.path.abspath(args.data_dir), STATE_FILE))
    return 0


def cmd_status(args) -> int:
    from quiver.tools.cli_status import cmd_status as status
    return status(args, _state(args))


def cmd_ping(args) -> int:
    from quiver.tools.local import ping
    t = _transport(args, "ping")
    ok = ping(t, args.addr, args.timeout)
    t.close()
    print("pong" if ok else f"no answer from {args.addr}")
    return 0 if ok else 1


# ---- admin ------------------------------------------------------------------------

def cmd_topic(args) -> int:
    a = _admin(args)
    try:
        if args.action == "create":
            _print(a.create_topic(args.topic, queues=args.queues, order=args.order))
        elif args.action == "delete":
            a.delete_topic(args.topic)
            print(f"deleted {args.topic}")
        elif args.action == "route":
            _print(a.topic_route(args.topic))
        else:
            _print(a.topic_list())
    finally:
        a.shutdown()
    return 0


def cmd_msg(args) -> int:
    from quiver.client.message import Message
    if args.action == "send":
        from quiver.client.producer import Producer
        with Producer("CLI_PRODUCER", namesrv=args.namesrv) as p:
            r = p.send(Message(args.topic, args.body.encode(), tags=args.tags, keys=args.keys or None))
        _print({"status": r.status.value, "msg_id": r.msg_id, "offset_msg_id": r.offset_msg_id,
                "broker": r.broker, "queue_id": r.queue_id, "queue_offset": r.queue_offset})
        return 0
    if args.action == "cancel":
        if not args.id:
            print("msg cancel needs --id MSGID (the msgId send() returned)", file=sys.stderr)
            return 2
        from quiver.client.producer import Producer
        with Producer("CLI_PRODUCER", namesrv=args.namesrv) as p:
            ok = p.cancel_scheduled(args.id, args.topic)
        _print({"msg_id": args.id, "topic": args.topic, "cancelled": ok,
                "detail": "will not be delivered" if ok else "too late: already delivered"})
        return 0 if ok else 1
    a = _admin(args)
    try:
        msgs = a.query_by_key(args.topic, args.key) if args.action == "query" else [a.view_message(args.id, args.topic)]
        for m in msgs:
            _print({"msg_id": m.msg_id, "offset_msg_id": m.offset_msg_id, "topic": m.topic, "tags": m.tags,
                    "keys": m.keys, "broker": m.broker, "queue_id": m.queue_id, "queue_offset": m.queue_offset,
                    "store_timestamp": m.store_timestamp, "properties": m.properties,
                    "body": m.body.decode(errors="replace")[:200]})
    finally:
        a.shutdown()
    return 0


def _ms(ts) -> str:
    if not ts:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts / 1000))


def _print_reset(group: str, done) -> None:
    if done.online:
        print(f"group {group} is online: {done.members} member(s) told; they drop what they cached of these "
              "queues and consume again from:")
    else:
        print(f"group {group} is not online: offsets stored; it resumes from them at its next start:")
    _print({str(mq): off for mq, off in done.offsets.items()})


def cmd_consumer(args) -> int:
    a = _admin(args)
    try:
        if args.action == "progress":
            stats = a.consumer_stats(args.group)
            rows = [r for r in stats["rows"] if not args.topic or r["topic"] == args.topic]
            print(f"{'topic':<24} {'broker':<12} {'queue':>5} {'broker_off':>10} {'consumer_off':>12} {'lag':>8} "
                  f"{'last_consume':<19} client")
            for r in rows:
                print(f"{r['topic']:<24} {r['broker']:<12} {r['queue_id']:>5} {r['broker_offset']:>10} "
                      f"{str(r['consumer_offset']):>12} {r['lag']:>8} {_ms(r.get('last_consume_time')):<19} "
                      f"{r.get('client_id') or '-'}")
            print(f"clients: {', '.join(stats['clients']) or '(none online)'}")
            for topic, exprs in stats["conflicts"].items():
                print(f"WARNING: members of {args.group} subscribe to {topic} differently "
                      f"(messages may be lost): " + "; ".join(f"{e} <- {', '.join(c)}" for e, c in exprs.items()))
        elif args.action == "reset":
            if not args.topic or (args.timestamp is None) == (args.offset is None):
                print("error: reset needs --topic and one of --timestamp (epoch ms) or --offset", file=sys.stderr)
                return 2
            _print_reset(args.group, a.reset_offset(args.group, args.topic, args.timestamp, offset=args.offset))
        elif args.action == "dlq":
            for m in a.dlq_messages(args.group, args.max):
                print(f"{m.msg_id}  origin={m.properties.get('DLQ_ORIGIN_TOPIC', '?')} "
                      f"origin_id={m.properties.get('DLQ_ORIGIN_MESSAGE_ID', '?')} "
                      f"reconsumed={m.properties.get('RECONSUME_TIME', m.reconsume_times)} "
                      f"stored={_ms(m.store_timestamp)} body={m.body[:60]!r}")
        elif args.action == "resend":
            res = a.resend_dlq(args.group, args.id or None)
            for r in res:
                print(f"resent {r.msg_id} -> {r.topic} queue {r.queue_id} offset {r.queue_offset}")
            print(f"{len(res)} message(s) resent")
        else:  # config
            a.set_group_config(args.group, args.retry_max_times)
            print(f"group {args.group}: retry_max_times={args.retry_max_times}")
    finally:
        a.shutdown()
    return 0


def cmd_cluster(args) -> int:
    a = _admin(args)
    try:
        _print(a.cluster_info())
    finally:
        a.shutdown()
    return 0


def cmd_filter(args) -> int:
    """`python -m quiver_filter check`, run as its own process: the SDK never imports a service."""
    argv = [sys.executable, "-m", "quiver_filter", "check", args.expression]
    if args.props:
        argv += ["--props", *args.props]
    if args.verbose:
        argv.append("-v")
    try:
        return subprocess.run(argv, check=False).returncode
    except OSError as exc:
        print(f"error: cannot run the filter's checker ({exc})", file=sys.stderr)
        return 2


def cmd_ha(args) -> int:
    """Every broker address by name and id: role, CommitLog max offset, replication lag."""
    a = _admin(args)
    try:
        rows = a.ha_status()
    finally:
        a.shutdown()
    print(f"{'broker':<14} {'id':>3} {'addr':<22} {'role':<13} {'max_offset':>14} {'lag_bytes':>11} {'lag_ms':>9}")
    bad = 0
    for r in rows:
        if r.get("error"):
            bad += 1
            print(f"{r['broker']:<14} {r['id']:>3} {r['addr']:<22} DOWN {r['error']}")
            continue
        lag_b = "" if r.get("lag_bytes") is None else r["lag_bytes"]
        lag_ms = "" if r.get("lag_ms") is None else r["lag_ms"]
        print(f"{r['broker']:<14} {r['id']:>3} {r['addr']:<22} {r['role']:<13} {r['max_offset']:>14} "
              f"{lag_b:>11} {lag_ms:>9}")
    groups = _failover_groups(args)
    if groups:
        print("\nautomatic failover (the controller leader's view):")
        for g in groups:
            print(f"{g['group']}: epoch {g['epoch']}, master {g['master'] or '-'}, "
                  f"SyncStateSet {', '.join(g['sync_state_set']) or '-'}")
            for m in g["members"]:
                state = ("master" if m["master"] else "in sync" if m["in_sync"] else "not in sync")
                lag = "" if m.get("lag_bytes") is None else m["lag_bytes"]
                print(f"  {m['id']:>3} {m['addr']:<22} {state:<12} {'alive' if m['alive'] else 'SILENT':<7} "
                      f"max_offset {m.get('max_offset')}  lag_bytes {lag}")
    return 1 if bad else 0


def _failover_groups(args) -> list:
    """The controller leader's groups, from name servers started with --controller ([] if none is)."""
    from quiver.errors import QuiverError
    from quiver.wire import requests as rq
    t = _transport(args, "cli-ha")
    try:
        for ns in [a.strip() for a in (args.namesrv or "").split(";") if a.strip()]:
            try:
                r = rq.ReplicaInfoReply.decode(t.call(ns, rq.ReplicaInfo(), timeout=2.0).ext)
            except QuiverError:
                continue
            if r.leader:
                return r.groups
    finally:
        t.close()
    return []


def cmd_txn(args) -> int:
    """Open transactions (half messages without an op record) per broker, oldest first."""
    a = _admin(args)
    try:
        per_broker = a.open_transactions(args.max)
    finally:
        a.shutdown()
    print(f"{'broker':<12} {'transaction_id':<34} {'topic':<20} {'group':<16} {'age_s':>8} {'checks':>6}")
    for broker, rows in per_broker.items():
        for r in rows:
            print(f"{broker:<12} {r['transaction_id']:<34} {str(r['topic']):<20} {str(r['group']):<16} "
                  f"{r['age_ms'] / 1000:>8.1f} {r['checks']:>6}")
    print(f"{sum(map(len, per_broker.values()))} open transaction(s)")
    return 0


def cmd_ingest(args) -> int:
    """Copy topics into a lake with Spark (quiver.spark, needs `pip install quiver[spark]` and Java)."""
    try:
        from quiver.spark import run_ingest
    except ImportError as exc:
        print(f"error: quiver ingest needs PySpark (pip install 'quiver[spark]'): {exc}", file=sys.stderr)
        return 2
    return run_ingest(args)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="quiver", description="Quiver message system: local cluster and admin CLI")
    p.add_argument("--namesrv", default=os.environ.get("QUIVER_NAMESRV", "127.0.0.1:9876"))
    p.add_argument("--credentials", default=os.environ.get("QUIVER_CREDENTIALS") or None,
                   help="auth on: a user's key file (env QUIVER_CREDENTIALS)")
    sub = p.add_subparsers(dest="cmd", required=True)

    up = sub.add_parser("up", help="start a local cluster on loopback")
    up.add_argument("--data-dir", default="./data")
    up.add_argument("--compose", help="compose file (default: ./compose.yaml)")
    up.add_argument("--scale", action="append", help="SERVICE=N, e.g. broker-store=3 (repeatable)")
    up.add_argument("--free-ports", action="store_true", help="any free ports instead of the compose ports")
    up.add_argument("--flush", choices=["sync", "async"], default="async")
    up.add_argument("--no-auto-create", dest="auto_create", action="store_false")
    up.add_argument("--demo", action="store_true", help="send, consume and query a few messages once up")
    up.add_argument("--detach", action="store_true", help="leave the cluster running and return")
    up.add_argument("--secure", action="store_true",
                    help="auth on (CURVE + ACL): keys in <data-dir>/auth, made on first use")
    up.set_defaults(fn=cmd_up)
    for name, fn, text in (("down", cmd_down, "stop what `quiver up` started"),
                           ("status", cmd_status, "health and role of every service")):
        sp = sub.add_parser(name, help=text)
        sp.add_argument("--data-dir", default="./data")
        sp.set_defaults(fn=fn)
        if name == "status":
            sp.add_argument("-v", "--verbose", action="store_true", help="each service's whole STATUS")
            sp.add_argument("--json", action="store_true", help="every STATUS as one JSON document")
    pg = sub.add_parser("ping", help="PING a service")
    pg.add_argument("addr")
    pg.add_argument("--timeout", type=float, default=1.0)
    pg.set_defaults(fn=cmd_ping)
    ig = sub.add_parser("ingest", help="copy topics to Parquet/Delta with Spark (batch or streaming)")
    ig.add_argument("--topic", required=True, help="topic, or comma list")
    ig.add_argument("--to", required=True, help="output path (any Hadoop URI)")
    ig.add_argument("--format", choices=["parquet", "delta"], default="parquet")
    ig.add_argument("--stream", action="store_true", help="keep running (Structured Streaming) instead of one batch")
    ig.add_argument("--available-now", action="store_true", help="with --stream: read what is there, then stop")
    ig.add_argument("--checkpoint", help="streaming checkpoint (default: <to>/_checkpoint)")
    ig.add_argument("--master", default=os.environ.get("QUIVER_SPARK_MASTER", "local[*]"))
    ig.add_argument("--starting-offsets", default="earliest")
    ig.add_argument("--max-offsets-per-trigger", type=int)
    ig.add_argument("--subscription", default="*", help="tag expression or sql:<SQL92>")
    ig.add_argument("--mode", choices=["append", "overwrite"], default="overwrite", help="batch save mode")
    ig.add_argument("--trigger-seconds", type=float, default=5.0)
    ig.set_defaults(fn=cmd_ingest)

    tp = sub.add_parser("topic", help="create, delete, route, list topics")
    tp.add_argument("action", choices=["create", "delete", "route", "list"])
    tp.add_argument("topic", nargs="?")
    tp.add_argument("--queues", type=int, default=4)
    tp.add_argument("--order", action="store_true")
    tp.set_defaults(fn=cmd_topic)

    mp = sub.add_parser("msg", help="send, query by key, view by id, cancel a scheduled message")
    mp.add_argument("action", choices=["send", "query", "view", "cancel"])
    mp.add_argument("--topic")
    mp.add_argument("--key")
    mp.add_argument("--id")
    mp.add_argument("--body", default="")
    mp.add_argument("--tags")
    mp.add_argument("--keys", nargs="*")
    mp.set_defaults(fn=cmd_msg)

    cp = sub.add_parser("consumer", help="consumer group progress, offset reset, dead letters, group config")
    cp.add_argument("action", choices=["progress", "reset", "dlq", "resend", "config"])
    cp.add_argument("group")
    cp.add_argument("--topic")
    cp.add_argument("--timestamp", type=int, help="epoch ms (reset: to the first message stored at or after it)")
    cp.add_argument("--offset", type=int, help="queue offset (reset: every queue to it, held to its min and max)")
    cp.add_argument("--id", nargs="*", help="dead-letter msg ids to resend (resend; default all)")
    cp.add_argument("--max", type=int, default=64, help="messages to list (dlq)")
    cp.add_argument("--retry-max-times", type=int, default=16, help="max reconsume times (config)")
    cp.set_defaults(fn=cmd_consumer)

    cl = sub.add_parser("cluster", help="brokers and clusters known to the name server")
    cl.set_defaults(fn=cmd_cluster)

    hp = sub.add_parser("ha", help="master/slave replication: roles, offsets, lag per slave; with controllers "
                                   "also epoch, master and SyncStateSet per group")
    hp.add_argument("action", choices=["status"])
    hp.set_defaults(fn=cmd_ha)

    xp = sub.add_parser("txn", help="transactions: list open half messages per broker")
    xp.add_argument("action", choices=["list"])
    xp.add_argument("--max", type=int, default=1000, help="rows per broker")
    xp.set_defaults(fn=cmd_txn)

    fp = sub.add_parser("filter", help="SQL92 selectors: check an expression against properties")
    fp.add_argument("action", choices=["check"])
    fp.add_argument("expression")
    fp.add_argument("--props", nargs="*", metavar="KEY=VALUE", help="message properties (TAGS, KEYS too)")
    fp.add_argument("-v", "--verbose", action="store_true")
    fp.set_defaults(fn=cmd_filter)
    from quiver.tools import cli_auth
    cli_auth.add_commands(sub)
    return p


def main(argv=None) -> int:
    import logging
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    from quiver.errors import QuiverError
    try:
        return args.fn(args) or 0
    except QuiverError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
