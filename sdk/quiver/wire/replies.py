"""Replies a client or service trusts: routes, cluster info, send and pull results, offsets ...

Built by the server (`req.reply(code, remark, OffsetReply(offset=7))`, which
sends `.ext()`) and decoded by the caller (`PullReply.decode(env.ext)`); a bad
reply raises FieldError like a bad request. `@reply_to(codes)` ties a schema to
the request codes it answers (`REPLIES`): `Request.reply` refuses any other ext
for them. Lists and maps of peers' data skip bad entries (`skip_bad`): one
garbage registration must not hide the rest. Does not own the requests
(requests.py) nor the machinery (schema.py).
"""

from quiver.wire.schema import *  # noqa: F401,F403
from quiver.wire.schema import (ADDR, BROKER_NAME, CLIENT_ID, CLUSTER, GROUP, MAX_BATCH, MAX_BODY_BYTES, MAX_QUEUES,
                                OFFSET, QUEUE_COUNT, QUEUE_ID, TIMESTAMP, TOPIC, U31, Bool, IdKey, Int, Json, ListOf,
                                MapOf, Nested, Opt, Row, Schema, Str, TopicConfig, schema, wire)
from quiver.wire.codes import RequestCode as RC

# request code -> the reply schemas its answers' ext may be (Request.reply checks it)
REPLIES: dict[RC, tuple[type[Schema], ...]] = {}


def reply_to(*codes: RC):
    """Tie a reply schema (and its hot-path `Wire` map, if it has one) to the request codes it answers."""
    def register(cls):
        forms = (cls, cls.Wire) if "Wire" in vars(cls) else (cls,)
        for code in codes:
            REPLIES[code] = REPLIES.get(code, ()) + forms
        return cls
    return register



@schema
class QueueData(Schema):
    KEEP_DEFAULTS = True   # every field on the wire, as RocketMQ's QueueData
    broker_name: str = wire("broker_name", BROKER_NAME)
    read: int = wire("read", Int(0, MAX_QUEUES))
    write: int = wire("write", Int(0, MAX_QUEUES))
    perm: int = wire("perm", Int(0, 15), 6)
    sysflag: int = wire("sysflag", U31, 0)
    order: bool = wire("order", Bool(), False)


@schema
class BrokerData(Schema):
    KEEP_DEFAULTS = True   # read as a plain map by ClientBase.cluster_info and the CLI
    cluster: str = wire("cluster", CLUSTER, "")   # what a route's reader needs is the name and addresses
    broker_name: str = wire("broker_name", BROKER_NAME)
    addrs: dict = wire("addrs", MapOf(IdKey(), ADDR, 64, skip_bad=True))   # broker id -> address


@schema
class RouteData(Schema):
    topic: str = wire("topic", TOPIC)
    queues: list = wire("queues", ListOf(Nested(QueueData), 10_000, skip_bad=True), [])
    brokers: list = wire("brokers", ListOf(Nested(BrokerData), 10_000, skip_bad=True), [])
    filter_servers: dict = wire("filter_servers", MapOf(ADDR, ListOf(ADDR, 1024, skip_bad=True), 10_000,
                                                        skip_bad=True), {})
    # every live filter server of the clusters of the topic's brokers (a filter server serves any broker
    # of its cluster: the pull names it, PullMessage.broker_addr); absent from older name servers
    cluster_filter_servers: list = wire("cluster_filter_servers", ListOf(ADDR, 10_000, skip_bad=True), [])


@reply_to(RC.GET_ROUTEINFO_BY_TOPIC)
@schema
class RouteReply(Schema):
    route: RouteData = wire("route", Nested(RouteData))


@schema
class LiveBroker(Schema):
    KEEP_DEFAULTS = True   # read as a plain map by ClientBase.cluster_info and the CLI
    broker_name: str = wire("broker_name", BROKER_NAME)
    broker_id: int = wire("broker_id", U31, 0)
    age_ms: int = wire("age_ms", Int(0, MAX_OFFSET), 0)
    filter_servers: list = wire("filter_servers", ListOf(ADDR, 1024, skip_bad=True), [])


@schema
class ClusterData(Schema):
    KEEP_DEFAULTS = True   # read as a plain map by ClientBase.cluster_info and the CLI
    brokers: dict = wire("brokers", MapOf(BROKER_NAME, Nested(BrokerData), 10_000, skip_bad=True), {})
    clusters: dict = wire("clusters", MapOf(CLUSTER, ListOf(BROKER_NAME, 10_000, skip_bad=True), 1000,
                                            skip_bad=True), {})
    live: dict = wire("live", MapOf(ADDR, Nested(LiveBroker), 10_000, skip_bad=True), {})


@reply_to(RC.GET_BROKER_CLUSTER_INFO)
@schema
class ClusterReply(Schema):
    cluster: ClusterData = wire("cluster", Nested(ClusterData))


@reply_to(RC.REGISTER_BROKER)
@schema
class RegisterBrokerReply(Schema):
    master_addr: str | None = wire("master_addr", Opt(ADDR, blank=True), None)
    ha_addr: str | None = wire("ha_addr", Opt(ADDR, blank=True), None)


@reply_to(RC.SEND_MESSAGE, RC.SEND_MESSAGE_V2, RC.SEND_BATCH_MESSAGE, RC.SEND_REPLY_MESSAGE, RC.CONSUMER_SEND_MSG_BACK)   # send-back: the copy stored
@schema
class SendReply(Schema):
    topic: str = wire("t", TOPIC)
    queue_id: int = wire("q", QUEUE_ID)
    queue_offset: int = wire("o", OFFSET)                  # of the first message
    phys_offsets: list = wire("p", ListOf(OFFSET, MAX_BATCH))

    class Wire(dict):
        """`ext()` built without the object: every send is answered, and the object plus its generic
        encoding cost several times the plain map (a test holds the two equal)."""
        __slots__ = ()

    @classmethod
    def wire(cls, topic: str, queue_id: int, queue_offset: int, phys_offsets: list) -> "SendReply.Wire":
        return cls.Wire(t=topic, q=queue_id, o=queue_offset, p=phys_offsets)


@reply_to(RC.PULL_MESSAGE)
@schema
class PullReply(Schema):
    """Every pull answer: where to go next and the queue's bounds."""
    KEEP_DEFAULTS = True   # the bounds always said, 0 included
    next: int = wire("next", OFFSET)   # required: read as 0 it would rewind a consumer to the queue's start
    min: int = wire("min", OFFSET, 0)
    max: int = wire("max", OFFSET, 0)

    class Wire(dict):
        """`ext()` built without the object, for the broker's pull answers (as SendReply.Wire)."""
        __slots__ = ()

    @classmethod
    def wire(cls, next: int, min: int, max: int) -> "PullReply.Wire":   # noqa: A002 (the wire's names)
        return cls.Wire(next=next, min=min, max=max)


@reply_to(RC.QUERY_CONSUMER_OFFSET, RC.GET_MAX_OFFSET, RC.GET_MIN_OFFSET, RC.SEARCH_OFFSET_BY_TIMESTAMP)
@schema
class OffsetReply(Schema):
    offset: int = wire("offset", OFFSET)


@reply_to(RC.INVOKE_BROKER_TO_RESET_OFFSET)
@schema
class ResetOffsetReply(Schema):
    """INVOKE_BROKER_TO_RESET_OFFSET: the offsets stored ([queue id, offset] rows) and how many
    online members of the group were told (0: the group is not online here)."""
    offsets: list = wire("offsets", ListOf(Row(QUEUE_ID, OFFSET), MAX_QUEUES), [])
    members: int = wire("members", U31, 0)


@reply_to(RC.SCHEDULE_INIT)
@schema
class ScheduleInitReply(Schema):
    delay_levels_ms: list = wire("delay_levels_ms", ListOf(Int(0, 10 * 365 * 86_400_000), 1024, 1))
    broker_name: str = wire("broker_name", BROKER_NAME)
    schedule_queues: int = wire("schedule_queues", QUEUE_COUNT)
    timer_queues: int = wire("timer_queues", QUEUE_COUNT)
    timer_horizon_ms: int = wire("timer_horizon_ms", Int(0, MAX_OFFSET))
    now_ms: int = wire("now_ms", TIMESTAMP)
    # the broker's largest body (its --max-message-bytes), which also bounds one re-put's packed bodies;
    # None from a broker that does not say (the scheduler then uses its own --max-reput-bytes)
    max_message_bytes: int | None = wire("max_message_bytes", Opt(Int(1, MAX_BODY_BYTES)), None)


@reply_to(RC.SCHEDULE_REPUT)
@schema
class ScheduleReputReply(Schema):
    """SUCCESS: how many were put, which were dropped (real topic gone), when stored. MESSAGE_ILLEGAL:
    `bad` lists the refused entries (indices into the request's metas; nothing was put)."""
    count: int = wire("n", Int(0, MAX_BATCH), 0)
    dropped: list = wire("dropped", ListOf(Int(0, MAX_BATCH), MAX_BATCH), [])
    store_ts: int = wire("ts", TIMESTAMP, 0)
    # None: not said (absent); a garbled index is dropped, the rest still name what to leave behind
    bad: list | None = wire("bad", ListOf(Int(0, MAX_BATCH - 1), MAX_BATCH, skip_bad=True), None)


# ---- replies: master/slave sync, scheduler membership (added by the broker-HA/scheduler/filter conversion) ----

OFFSET_ROW = Row(GROUP, TOPIC, QUEUE_ID, OFFSET)   # [group, topic, queue id, offset]


@schema
class GroupConfig(Schema):
    retry_max_times: int = wire("retry_max_times", Int(0, 1_000_000), 16)
    consume_enable: bool = wire("consume_enable", Bool(), True)


ACL_ACTIONS = ("PUB", "SUB", "CREATE", "UPDATE", "DELETE", "GET", "LIST", "ALL")
ACL_USERS = ListOf(Row(Str(64), Str(40, 40), OneOf("NORMAL", "SUPER")), 100_000)
ACL_RULES = ListOf(Row(Str(64), Str(262), ListOf(OneOf(*ACL_ACTIONS), 8, 1), OneOf("ALLOW", "DENY"), Str(64, 0)),
                   1_000_000)


@schema
class AclData(Schema):
    """An ACL snapshot (ACL_SNAPSHOT's reply, and a master's to its slaves): [name, key, type] users,
    [user, resource, actions, ALLOW|DENY, source CIDR or ""] rules."""
    version: str = wire("version", Str(64, 0), "")
    users: list = wire("users", ACL_USERS, [])
    rules: list = wire("rules", ACL_RULES, [])


@reply_to(RC.HA_SYNC_METADATA)
@schema
class HaSyncMetadataReply(Schema):
    """A master's topics, groups, consumer offsets and ACL, as its slaves copy them."""
    topics: dict = wire("topics", MapOf(TOPIC, Nested(TopicConfig), 100_000, skip_bad=True), {})
    groups: dict = wire("groups", MapOf(GROUP, Nested(GroupConfig), 100_000, skip_bad=True), {})
    offsets: list = wire("offsets", ListOf(OFFSET_ROW, 1 << 20, skip_bad=True), [])
    max_offset: int = wire("max_offset", OFFSET, 0)
    acl: AclData | None = wire("acl", Opt(Nested(AclData)), None)   # None: an older master


@reply_to(RC.HA_SLAVE_OFFSETS)
@schema
class HaSlaveOffsetsReply(Schema):
    offsets: list = wire("offsets", ListOf(OFFSET_ROW, 1 << 20, skip_bad=True), [])


@reply_to(RC.GET_CONSUMER_LIST_BY_GROUP)
@schema
class ConsumerListReply(Schema):
    ids: list = wire("ids", ListOf(CLIENT_ID, 100_000, skip_bad=True), [])


@reply_to(RC.PING)
@schema
class PingReply(Schema):
    service: str | None = wire("service", Opt(Str(64)), None)
    client_id: str | None = wire("client_id", Opt(CLIENT_ID), None)   # schedulers: which instance answered


# ---- replies the SDK's admin, push consumer and filter checks read (added by the SDK-clients conversion) ----


@reply_to(RC.UPDATE_AND_CREATE_TOPIC)
@schema
class TopicConfigReply(Schema):
    """UPDATE_AND_CREATE_TOPIC: the topic's config as the broker stored it."""
    topic: str = wire("topic", TOPIC)
    config: TopicConfig = wire("config", Nested(TopicConfig))


@reply_to(RC.ADMIN_COMPACT_TOPIC)
@schema
class CompactTopicReply(Schema):
    """ADMIN_COMPACT_TOPIC: what the pass did on this broker (queues compacted, records read and kept)."""
    queues: int = wire("queues", Int(0, MAX_QUEUES))
    read: int = wire("read", Int(0, MAX_OFFSET))
    kept: int = wire("kept", Int(0, MAX_OFFSET))


@reply_to(RC.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
@schema
class TopicListReply(Schema):
    topics: list = wire("topics", ListOf(TOPIC, 1 << 20, skip_bad=True), [])


@reply_to(RC.LOCK_BATCH_MQ)
@schema
class LockBatchReply(Schema):
    locked: list = wire("locked", ListOf(Row(TOPIC, QUEUE_ID), 1 << 16, skip_bad=True), [])


@schema
class ConsumeStatsRow(Schema):
    topic: str = wire("topic", TOPIC)
    queue_id: int = wire("queue_id", QUEUE_ID)
    broker_offset: int = wire("broker_offset", OFFSET, 0)
    consumer_offset: int | None = wire("consumer_offset", Opt(OFFSET), None)
    lag: int = wire("lag", OFFSET, 0)
    last_consume_time: int | None = wire("last_consume_time", Opt(TIMESTAMP), None)
    client_id: str | None = wire("client_id", Opt(CLIENT_ID), None)


@reply_to(RC.GET_CONSUME_STATS)
@schema
class ConsumeStatsReply(Schema):
    rows: list = wire("rows", ListOf(Nested(ConsumeStatsRow), 1 << 20, skip_bad=True), [])
    clients: list = wire("clients", ListOf(CLIENT_ID, 100_000, skip_bad=True), [])
    # topic -> {"TAG:expression": [client ids]} where members of the group disagree
    conflicts: dict = wire("conflicts", MapOf(TOPIC, MapOf(Str(EXPRESSION.max_len + 8), ListOf(CLIENT_ID, 100_000,
                                                                                             skip_bad=True),
                                                           1024, skip_bad=True), 10_000, skip_bad=True), {})


@reply_to(RC.TRANSACTION_LIST_OPEN)
@schema
class TransactionListReply(Schema):
    """TRANSACTION_LIST_OPEN: rows are shown as they come (admin output); a row that is not a map is dropped."""
    open: list = wire("open", ListOf(MapOf(Str(64), Json(), 64), 1_000_000, skip_bad=True), [])
    count: int = wire("count", Int(0, MAX_OFFSET), 0)
    resolved: int = wire("resolved", Int(0, MAX_OFFSET), 0)


@reply_to(RC.ADMIN_CLEAN_EXPIRED)
@schema
class CleanExpiredReply(Schema):
    deleted_segments: int = wire("deleted_segments", U31)


@reply_to(RC.BROKER_BACKUP)
@schema
class BrokerBackupReply(Schema):
    """BROKER_BACKUP: where the snapshot is, the CommitLog offset it covers up to, what it took."""
    path: str = wire("path", Str(4096))
    cut_offset: int = wire("cut", Int(0, MAX_OFFSET))
    files: int = wire("files", Int(0, MAX_OFFSET))
    linked_files: int = wire("linked", Int(0, MAX_OFFSET))
    copied_bytes: int = wire("copied", Int(0, MAX_OFFSET))
    queues: int = wire("queues", Int(0, MAX_OFFSET))
    offsets: int = wire("offsets", Int(0, MAX_OFFSET))
    took_ms: int = wire("took_ms", Int(0, MAX_OFFSET))


@reply_to(RC.STATUS)
@schema
class StatusReply(Schema):
    """STATUS of any service: a free-form map, read by people and by `Admin.ha_status`."""
    status: dict = wire("status", MapOf(Str(255), Json(), 10_000))


@reply_to(RC.CHECK_CLIENT_CONFIG, RC.PULL_MESSAGE)
@schema
class SubscriptionParseFailedReply(Schema):
    """SUBSCRIPTION_PARSE_FAILED: where in the expression (a filter server's CHECK_CLIENT_CONFIG,
    or its PULL_MESSAGE of an expression it cannot compile)."""
    position: int | None = wire("position", Opt(U31), None)


# ---- replies the txn-checker and the filter server read (added by the scheduler/txn/filter conversion) ----


@reply_to(RC.TRANSACTION_CHECK, RC.END_TRANSACTION)
@schema
class TransactionCheckReply(Schema):
    """TRANSACTION_CHECK: one result per entry, in order ("checked", "no_producer", "requeued", "discarded",
    "resolved", "missing"); not skip_bad: a dropped item would shift every later result onto the wrong entry."""
    results: list = wire("r", ListOf(Str(32), MAX_BATCH), [])


@reply_to(RC.REGISTER_FILTER_SERVER)
@schema
class RegisterFilterServerReply(Schema):
    """REGISTER_FILTER_SERVER: which broker took the registration."""
    broker_name: str | None = wire("broker_name", Opt(BROKER_NAME), None)
    broker_id: int | None = wire("broker_id", Opt(U31), None)


# ---- replies the SDK's producer reads (added by the SDK-callers conversion) ----

from quiver.wire.schema import OneOf  # noqa: E402


@reply_to(RC.SCHEDULE_CANCEL)
@schema
class ScheduleCancelReply(Schema):
    """SCHEDULE_CANCEL: "cancelled", "too_late" (delivered or being delivered) or "unknown" (kept as a tombstone)."""
    result: str = wire("result", OneOf("cancelled", "too_late", "unknown"))


# ---- replies of the controller (automatic failover) ----

@reply_to(RC.CONTROLLER_HEARTBEAT, RC.CONTROLLER_ALTER_SYNC_STATE_SET)
@schema
class ControllerAssignment(Schema):
    """CONTROLLER_HEARTBEAT (and a SyncStateSet change) from the controller leader: what the broker is now. `broker_id` is the
    id it registers with the name servers as a slave (a master registers as 0); `lease_ms` is how
    long after sending a heartbeat a master may keep acknowledging writes without a newer answer."""
    role: str = wire("role", OneOf("master", "slave", "none"))
    epoch: int = wire("ep", U31, 0)
    master_addr: str | None = wire("master", Opt(ADDR, blank=True), None)
    master_ha_addr: str | None = wire("master_ha", Opt(ADDR, blank=True), None)
    broker_id: int = wire("id", U31, 0)
    sync_state_set: list = wire("sss", ListOf(ADDR, 64, skip_bad=True), [])
    lease_ms: int = wire("lease_ms", U31, 0)
    term: int = wire("term", U31, 0)  # the answering leader's Raft term: a broker ignores older terms' answers


@reply_to(RC.CONTROLLER_REPLICA_INFO)
@schema
class ReplicaInfoReply(Schema):
    """CONTROLLER_REPLICA_INFO: per broker group its master, epoch, SyncStateSet and members."""
    leader: bool = wire("leader", Bool(), False)
    groups: list = wire("groups", ListOf(MapOf(Str(64), Json(), 64), 100_000, skip_bad=True), [])
    raft: dict = wire("raft", MapOf(Str(64), Json(), 64), {})


# ---- POP consumption (issue 22) --------------------------------------------------------------------

from quiver.wire.receipt_handle import HANDLE  # noqa: E402


@reply_to(RC.POP_MESSAGE)
@schema
class PopReply(Schema):
    """The popped records are the body (as a pull's); `handles[i]` is the i-th record's receipt handle."""
    handles: list = wire("h", ListOf(HANDLE, 1024), [])


@reply_to(RC.ACK_MESSAGE)
@schema
class AckReply(Schema):
    """`failed`: [index of the handle, response code, remark] of each handle not acked."""
    acked: int = wire("n", Int(0, 1024), 0)
    failed: list = wire("f", ListOf(Row(Int(0, 1023), Int(0, 2 ** 31 - 1), Str(1024, 0)), 1024), [])

    class Wire(dict):
        """`ext()` of an ack of 1 or more handles, none failed, built without the object: one ack
        per message is answered (a test holds the two equal)."""
        __slots__ = ()

    @classmethod
    def wire(cls, acked: int) -> "AckReply.Wire":
        return cls.Wire(n=acked, f=[])


@reply_to(RC.CHANGE_INVISIBLE_DURATION)
@schema
class ChangeInvisibleReply(Schema):
    handle: object = wire("h", HANDLE)


# ---- replies of the broker's admin requests ----------------------------------------------------

@reply_to(RC.ACL_UPDATE_USER, RC.ACL_DELETE_USER, RC.ACL_GRANT, RC.ACL_REVOKE)
@schema
class AclVersionReply(Schema):
    """An ACL change: the content version it made."""
    version: str = wire("version", Str(64, 0), "")


@reply_to(RC.ACL_SNAPSHOT)
@schema
class AclSnapshotReply(Schema):
    """ACL_SNAPSHOT: the ACL, or only its version when the asker already holds it (`unchanged`)."""
    version: str = wire("version", Str(64, 0), "")
    users: list = wire("users", ACL_USERS, [])
    rules: list = wire("rules", ACL_RULES, [])
    unchanged: bool = wire("unchanged", Bool(), False)


@reply_to(RC.GET_ALL_TOPIC_CONFIG)
@schema
class TopicConfigsReply(Schema):
    """GET_ALL_TOPIC_CONFIG: every topic's row as the broker stores it (read, write, perm, sysflag, order)."""
    topics: dict = wire("topics", MapOf(TOPIC, MapOf(Str(64), Json(), 64), 1 << 20, skip_bad=True), {})


@reply_to(RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP)
@schema
class GroupConfigReply(Schema):
    """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: the group's config as the broker stored it."""
    group: str = wire("group", GROUP)
    config: GroupConfig = wire("config", Nested(GroupConfig))


@reply_to(RC.QUERY_MESSAGE)
@schema
class QueryMessageReply(Schema):
    """QUERY_MESSAGE: how many stored records follow as body frames."""
    count: int = wire("count", Int(0, 1024), 0)
