"""The fields of every request code, as the socket fuzzer fills them (no sockets here).

`base_table(ctx)` gives each code of codes.py a valid-looking request (ext and bodies), with
the keys the handlers read (grep of services/*/handlers.py and services/broker-store/*.py),
so that a frame with one poisoned field gets past the others and reaches the handler.
`field_keys` unites them with the keys of `quiver.wire.requests.SCHEMAS` (issue 13's one schema
per code): the schema's first, the table's for what a schema lacks.
"""

from dataclasses import dataclass, field

from quiver.wire.codes import RequestCode

@dataclass
class Context:
    """What base values point at: names and offsets of the cluster under test.

    Chosen so that a valid request built from them harms nothing a check reads:
    the fuzz topics and groups are never the canary's or a control's (except
    `stats_group`, the group whose consume stats the heartbeat control asks for)."""
    topic: str = "FuzzT"
    created_topic: str = "FuzzCreated"
    deletable_topic: str = "FuzzDeletable"
    group: str = "fuzz-g"
    pgroup: str = "fuzz-pg"
    stats_group: str = "ctl-stats"
    client_id: str = "fuzz-client"
    broker_name: str = "broker-a"
    broker_addr: str = "127.0.0.1:1"
    dead_addr: str = "127.0.0.1:1"
    phys: int = 0          # CommitLog offset of a message of `topic`
    half: tuple = (0, 0, "0" * 32)  # (CommitLog offset, queue offset, transaction id) of a half message
    now_ms: int = 0
    victim: str = "/nonexistent-victim"
    extra: dict = field(default_factory=dict)


def props_string(ctx: Context, more: dict | None = None, **kw) -> str:
    items = {"UNIQ_KEY": "F" * 32, "KEYS": "fuzz-key", "TAGS": "fz", **(more or {}), **kw}
    return "".join(f"{k}\x01{v}\x02" for k, v in items.items())


def base_table(ctx: Context) -> dict[int, tuple[dict, list]]:
    """code -> (valid-looking ext, bodies), as the handlers read them today."""
    t, g, now = ctx.topic, ctx.group, ctx.now_ms
    send = {"t": t, "q": 0, "b": now, "bh": "127.0.0.1:1", "g": ctx.pgroup, "m": [[0, props_string(ctx)]], "sf": 0,
            "rc": 0, "po": 0, "w": True}
    batch = {**send, "m": [[0, props_string(ctx)], [0, props_string(ctx, UNIQ_KEY="E" * 32)]]}
    half_phys, half_qoff, txid = ctx.half
    R = RequestCode
    table = {
        R.SEND_MESSAGE: (send, [b"fuzz-body"]),
        R.SEND_MESSAGE_V2: (send, [b"fuzz-body"]),
        R.SEND_BATCH_MESSAGE: (batch, [b"fuzz-a", b"fuzz-b"]),
        R.SEND_REPLY_MESSAGE: ({**send, "t": "DefaultCluster_REPLY_TOPIC",
                                "m": [[0, props_string(ctx, CORRELATION_ID="f" * 32, REPLY_TO_CLIENT=ctx.client_id,
                                                       CLUSTER="DefaultCluster", MSG_TYPE="reply")]]},
                               [b"fuzz-reply"]),
        R.PUSH_REPLY_MESSAGE_TO_CLIENT: ({"b": ctx.broker_name}, [b"fuzz-record"]),
        R.PULL_MESSAGE: ({"t": t, "q": 0, "o": 0, "g": g, "co": 0, "n": 8, "s": 0, "sub": "*", "tp": "TAG",
                          "mb": 65536, "ba": ctx.broker_addr}, []),
        R.QUERY_MESSAGE: ({"t": t, "key": "fuzz-key", "n": 4, "b": 0, "e": now + 60_000}, []),
        R.QUERY_CONSUMER_OFFSET: ({"g": g, "t": t, "q": 0}, []),
        R.UPDATE_CONSUMER_OFFSET: ({"g": g, "t": t, "q": 0, "o": 1}, []),
        R.UPDATE_AND_CREATE_TOPIC: ({"topic": ctx.created_topic, "read": 4, "write": 4, "perm": 6, "order": False},
                                    []),
        R.GET_ALL_TOPIC_CONFIG: ({}, []),
        R.SEARCH_OFFSET_BY_TIMESTAMP: ({"t": t, "q": 0, "ts": now}, []),
        R.GET_MAX_OFFSET: ({"t": t, "q": 0}, []),
        R.GET_MIN_OFFSET: ({"t": t, "q": 0}, []),
        R.VIEW_MESSAGE_BY_ID: ({"offset": ctx.phys}, []),
        R.HEART_BEAT: ({"client_id": ctx.client_id, "producers": [ctx.pgroup],
                        "consumers": [{"group": ctx.stats_group,
                                       "subscriptions": {t: {"type": "TAG", "expression": "*"}},
                                       "consume_type": "PULL", "model": "CLUSTERING", "consume_from": "first",
                                       "orderly": False, "queues": [[t, ctx.broker_name, 0]]}]}, []),
        R.UNREGISTER_CLIENT: ({"client_id": ctx.client_id, "producer_group": ctx.pgroup,
                               "consumer_group": ctx.stats_group}, []),
        R.CONSUMER_SEND_MSG_BACK: ({"g": g, "offset": ctx.phys, "delay": 1, "ot": t, "omid": "F" * 32, "rc": 0,
                                    "max": 16}, []),
        R.END_TRANSACTION: ({"g": ctx.pgroup, "e": [[half_phys, half_qoff, 8, txid]], "fc": False}, []),
        R.GET_CONSUMER_LIST_BY_GROUP: ({"g": g}, []),
        R.CHECK_TRANSACTION_STATE: ({"g": ctx.pgroup, "e": [[ctx.phys, 0, txid, t, 0, now, now, 0, props_string(ctx)]]},
                                    [b"fuzz-body"]),
        R.NOTIFY_CONSUMER_IDS_CHANGED: ({"g": g}, []),
        R.LOCK_BATCH_MQ: ({"g": g, "c": ctx.client_id, "mqs": [[t, 0]]}, []),
        R.UNLOCK_BATCH_MQ: ({"g": g, "c": ctx.client_id, "mqs": [[t, 0]]}, []),
        R.CHECK_CLIENT_CONFIG: ({"g": g, "t": t, "tp": "SQL92", "sub": "a > 1"}, []),
        R.REGISTER_BROKER: ({"cluster": "FuzzCluster", "broker_name": "fuzz-broker", "broker_addr": ctx.dead_addr,
                             "broker_id": 0, "data_version": {"counter": 1, "ts": now},
                             "topics": {"FuzzGhostTopic": {"read": 4, "write": 4, "perm": 6, "order": False},
                                        # what a scheduler looks up: a ghost here reaches its rebalance
                                        "SCHEDULE_TOPIC_XXXX": {"read": 3, "write": 3, "perm": 6},
                                        "rmq_sys_wheel_timer": {"read": 1, "write": 1, "perm": 6}},
                             "filter_servers": [], "ha_addr": "127.0.0.1:2"}, []),
        R.UNREGISTER_BROKER: ({"cluster": "FuzzCluster", "broker_name": "fuzz-broker", "broker_addr": ctx.dead_addr,
                               "broker_id": 0}, []),
        R.GET_ROUTEINFO_BY_TOPIC: ({"topic": t}, []),
        R.GET_BROKER_CLUSTER_INFO: ({}, []),
        R.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: ({"g": g, "retry_max_times": 16}, []),
        R.DELETE_SUBSCRIPTIONGROUP: ({"g": g, "clean_offset": True}, []),
        R.GET_CONSUME_STATS: ({"g": g}, []),
        R.DELETE_TOPIC_IN_BROKER: ({"topic": ctx.deletable_topic}, []),
        R.INVOKE_BROKER_TO_RESET_OFFSET: ({"g": g, "t": t, "ts": now}, []),
        R.RESET_CONSUMER_CLIENT_OFFSET: ({"g": g, "t": t, "b": ctx.broker_name, "offsets": [[0, 0]]}, []),
        R.REGISTER_FILTER_SERVER: ({"addr": ctx.dead_addr, "unregister": False}, []),
        R.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: ({}, []),
        R.PING: ({}, []),
        R.STATUS: ({}, []),
        R.ADMIN_CLEAN_EXPIRED: ({}, []),
        R.ADMIN_COMPACT_TOPIC: ({"topic": t}, []),
        R.BROKER_BACKUP: ({"name": "fuzz-backup"}, []),
        R.SCHEDULE_REPUT: ({"m": [[0, props_string(ctx, REAL_TOPIC=t, REAL_QID="0"), now, 0, 0, now]], "roll": False,
                            "bh": "127.0.0.1:1"}, [b"fuzz-body"]),
        R.SCHEDULE_INIT: ({}, []),
        R.SCHEDULE_CANCEL: ({"id": "F" * 32, "t": t}, []),
        R.TRANSACTION_CHECK: ({"e": [[half_phys, half_qoff, "r"]]}, []),
        R.TRANSACTION_LIST_OPEN: ({"limit": 10}, []),
        R.HA_TRANSFER: ({"o": 0, "sb": 1 << 30, "me": 0}, []),
        R.HA_REPORT: ({"o": 0, "addr": ctx.dead_addr, "id": 1, "reset": False}, []),
        R.HA_SYNC_METADATA: ({"offsets": [[g, t, 0, 1]]}, []),
        R.HA_SLAVE_OFFSETS: ({}, []),
        R.ACL_UPDATE_USER: ({"name": "fuzz-user", "key": "F" * 40, "type": "NORMAL"}, []),
        R.ACL_DELETE_USER: ({"name": "fuzz-user"}, []),
        R.ACL_GRANT: ({"user": "fuzz-user", "res": f"topic:{t}", "act": ["PUB"], "deny": False, "src": ""}, []),
        R.ACL_REVOKE: ({"user": "fuzz-user", "res": f"topic:{t}", "act": ["PUB"], "deny": False, "src": ""}, []),
        R.ACL_SNAPSHOT: ({"v": ""}, []),
        R.CONTROLLER_HEARTBEAT: ({"cluster": "FuzzC", "broker_name": "fuzz-b", "addr": ctx.dead_addr,
                                  "ha_addr": ctx.dead_addr, "o": 0, "ep": 0}, []),
        R.CONTROLLER_ALTER_SYNC_STATE_SET: ({"cluster": "FuzzC", "broker_name": "fuzz-b", "master": ctx.dead_addr,
                                             "ep": 1, "sss": [ctx.dead_addr]}, []),
        R.CONTROLLER_REPLICA_INFO: ({}, []),
        R.POP_MESSAGE: ({"g": g, "t": t, "n": 4, "it": 1000, "s": 0, "sub": "*", "fifo": False, "max": 16,
                         "from": "first", "mb": 65536}, []),
        R.ACK_MESSAGE: ({"g": g, "t": t, "h": [f"1 {ctx.broker_name} {t} 0 0 {now} 1000 0"]}, []),
        R.CHANGE_INVISIBLE_DURATION: ({"g": g, "t": t, "h": f"1 {ctx.broker_name} {t} 0 0 {now} 1000 0",
                                       "it": 1000}, []),
    }
    return {int(k): v for k, v in table.items()}


GENERIC_KEYS = ("t", "g", "q", "o", "topic", "x")  # poisoned on codes that read no field


def schema_keys() -> dict[int, tuple[str, ...]]:
    """code -> short wire keys from quiver.wire.requests.SCHEMAS (issue 13), or {} before it exists."""
    try:
        from quiver.wire import requests as schemas_module
    except ImportError:
        return {}
    out = {}
    for code, schema in (getattr(schemas_module, "SCHEMAS", None) or {}).items():
        keys = tuple(f.key for f in getattr(schema, "FIELDS", ()) if isinstance(getattr(f, "key", None), str))
        out[int(code)] = keys
    return out


def field_keys(table: dict, schemas: dict) -> dict[int, tuple[str, ...]]:
    """Every code of codes.py -> its keys: the schema's first, then the table's it lacks."""
    out = {}
    for code in RequestCode:
        keys = list(schemas.get(int(code), ()))
        keys += [k for k in table.get(int(code), ({}, []))[0] if k not in keys]
        out[int(code)] = tuple(keys) or GENERIC_KEYS
    return out
