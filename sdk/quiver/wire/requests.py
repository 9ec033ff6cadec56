"""One frozen schema per request code: the short keys, types and ranges of every field.

`protocol.py` owns the frame; this module owns what travels in a request
header's "ext" (`replies.py` the replies a peer trusts, `schema.py` the
machinery; both re-exported here). A schema is a frozen dataclass whose fields name their wire key and a
check::

    @request(RequestCode.GET_MAX_OFFSET, needs(topic("topic", SUB, GET)))
    class GetMaxOffset(Schema):
        topic: str = wire("t", TOPIC)
        queue_id: int = wire("q", QUEUE_ID)

    GetMaxOffset(topic="Orders", queue_id=0).ext()   -> {"t": "Orders", "q": 0}
    GetMaxOffset.decode({"t": "Orders", "q": 0})     -> GetMaxOffset(...)

`Service.handle` decodes every request's ext through the schema of its code
before a handler runs (`req.args`); SDK callers build the typed object and the
transport sends `obj.CODE` with `obj.ext()`. Reply shapes a peer trusts (a
route, a send result, a pull result) have schemas too, decoded by the caller.

`decode` raises only `FieldError` (a ProtocolError: INVALID_PARAMETER, RocketMQ's
code for a bad field, unless the field names the code RocketMQ would use), whose remark names the code, the
field, what was expected and what came. Keys a schema does not know are
ignored, so newer peers can add fields. Every integer is ranged to the width
it is packed into; every string, list and map is length-capped.
"""

from quiver.wire.codes import RequestCode, ResponseCode
from quiver.wire.schema import *  # noqa: F401,F403  (checks, ranges, Schema: one import for callers)
from quiver.wire.schema import (ADDR, BODY_LENGTHS, BROKER_NAME, CLIENT_ID, CLUSTER, EXPR_TYPE, EXPRESSION, GROUP, I32,
                                MAX_BATCH, MAX_BODY_BYTES, MAX_OFFSET, MAX_PULL, MAX_QUEUES, MSG_ID, OFFSET, PROPS, QUEUE_COUNT,
                                QUEUE_ID, SCHEMAS, SUSPEND_MS, TIMESTAMP, TOPIC, U31, Bool, ConsumerData, DataVersion, Int,
                                ListOf, Nested, OneOf, Opt, Row, Schema, SendMetas, Str, TopicConfig, request, unpack_bodies,
                                wire)
from quiver.wire.replies import *  # noqa: F401,F403,E402
from quiver.wire.access import (ACTIONS, ANYONE, SUPER_ONLY, CREATE, DELETE, GET, LIST, PUB, SUB, UPDATE, cluster, each, group,  # noqa: E402
                                needs, service, topic, topic_resource)
from quiver.wire.names import TRACE_TOPIC, backup_name_problem, backup_url_problem, endpoint_problem  # noqa: E402
from quiver.wire.schema import Name  # noqa: E402

BACKUP_NAME = Name(backup_name_problem, "a backup name")
BACKUP_URL = Name(backup_url_problem, "s3://BUCKET/PREFIX")
S3_ENDPOINT = Name(endpoint_problem, "http[s]://HOST[:PORT]")

# Topics any authenticated user may route and send to: every traced client writes its trace
# records there (RocketMQ's ACL lets any sender write RMQ_SYS_TRACE_TOPIC too); reading it stays
# SUPER-only like every system topic.
OPEN_TOPICS = frozenset({TRACE_TOPIC})


def _queue_topics(args):
    return {topic_resource(t) for t, _ in args.queues}


def _heartbeat_groups(args):
    return {"group:" + c.group for c in args.consumers}


def _heartbeat_topics(args):
    return {topic_resource(t) for c in args.consumers for t in c.subscriptions}

# ---- requests: name server ---------------------------------------------------------------------


@request(RequestCode.REGISTER_BROKER, service("broker"))
class RegisterBroker(Schema):
    """The name server's only check of a registration: decoded whole before its route table is
    touched, so a bad field changes nothing and leaves no ghost broker."""
    cluster: str = wire("cluster", CLUSTER)
    broker_name: str = wire("broker_name", BROKER_NAME)
    broker_addr: str = wire("broker_addr", ADDR)
    broker_id: int = wire("broker_id", U31, 0)
    data_version: DataVersion | None = wire("data_version", Opt(Nested(DataVersion)), None)
    topics: dict = wire("topics", MapOf(TOPIC, Nested(TopicConfig), 100_000), {})
    filter_servers: list = wire("filter_servers", ListOf(ADDR, 1024), [])
    ha_addr: str | None = wire("ha_addr", Opt(ADDR, blank=True), None)   # "": no HA listener


@request(RequestCode.UNREGISTER_BROKER, service("broker"))
class UnregisterBroker(Schema):
    cluster: str = wire("cluster", CLUSTER)
    broker_name: str = wire("broker_name", BROKER_NAME)
    broker_addr: str = wire("broker_addr", ADDR)
    broker_id: int | None = wire("broker_id", Opt(U31), None)


@request(RequestCode.GET_ROUTEINFO_BY_TOPIC, needs(topic("topic", PUB, SUB, GET, open_to_users=OPEN_TOPICS)))
class GetRouteInfo(Schema):
    topic: str = wire("topic", TOPIC)


@request(RequestCode.GET_BROKER_CLUSTER_INFO, ANYONE)
class GetClusterInfo(Schema):
    pass


@request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, needs(cluster(LIST)))
class GetTopicList(Schema):
    pass


# ---- requests: every service ---------------------------------------------------------------------


@request(RequestCode.PING, ANYONE)
class Ping(Schema):
    pass


@request(RequestCode.STATUS, ANYONE)
class Status(Schema):
    pass


# ---- requests: broker, messages --------------------------------------------------------------------


@request(RequestCode.SEND_MESSAGE, needs(topic("topic", PUB, open_to_users=OPEN_TOPICS)))
class SendMessage(Schema):
    """One message (SEND_MESSAGE, SEND_MESSAGE_V2) or a batch (SEND_BATCH_MESSAGE) to one queue."""
    topic: str = wire("t", TOPIC, code=ResponseCode.MESSAGE_ILLEGAL)
    queue_id: int = wire("q", QUEUE_ID, 0)
    metas: tuple = wire("m", SendMetas())       # (flags, properties), one entry per body
    lengths: list | None = wire("l", BODY_LENGTHS, None)
    group: str | None = wire("g", Opt(GROUP), None)
    born_ts: int = wire("b", TIMESTAMP, 0)       # 0: now
    born_host: str | None = wire("bh", Opt(ADDR), None)
    sys_flag: int = wire("sf", I32, 0)
    reconsume: int = wire("rc", U31, 0)
    prepared_offset: int = wire("po", OFFSET, 0)
    wait: bool = wire("w", Bool(), True)        # False: oneway, no reply wanted

    def bodies(self, frames: list) -> list:
        return unpack_bodies(self._what(), frames, self.lengths, len(self.metas[0]))


SCHEMAS[RequestCode.SEND_MESSAGE_V2] = SendMessage
SCHEMAS[RequestCode.SEND_BATCH_MESSAGE] = SendMessage
# a reply of request-reply: one message to <cluster>_REPLY_TOPIC (PUB on it), stored then pushed
SCHEMAS[RequestCode.SEND_REPLY_MESSAGE] = SendMessage


@request(RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT, service("broker"))
class PushReplyMessage(Schema):
    """Broker -> the requester: the stored reply (one record, the body frame) of broker `broker`."""
    broker: str = wire("b", BROKER_NAME)


@request(RequestCode.PULL_MESSAGE, needs(topic("topic", SUB), group("group", SUB)))
class PullMessage(Schema):
    """A pull from the broker (tag subscriptions) or a filter server (SQL92, `broker_addr` the source)."""
    topic: str = wire("t", TOPIC)
    queue_id: int = wire("q", QUEUE_ID)
    offset: int = wire("o", OFFSET)
    group: str | None = wire("g", Opt(GROUP), None)
    commit_offset: int | None = wire("co", Opt(Int(-1, MAX_OFFSET)), None)  # piggy-backed commit
    max_msgs: int = wire("n", MAX_PULL, 32)
    suspend_ms: int = wire("s", SUSPEND_MS, 0)
    expression: str | None = wire("sub", Opt(EXPRESSION), None)
    expression_type: str | None = wire("tp", Opt(EXPR_TYPE), None)
    max_bytes: int = wire("mb", Int(1, MAX_BODY_BYTES), 4 << 20)
    broker_addr: str | None = wire("ba", Opt(ADDR), None)


@request(RequestCode.QUERY_MESSAGE, needs(topic("topic", SUB, GET)))
class QueryMessage(Schema):
    topic: str = wire("t", TOPIC)
    key: str = wire("key", Str(1024))
    max_msgs: int = wire("n", Int(1, 64 * 1024), 32)
    begin_ts: int = wire("b", TIMESTAMP, 0)
    end_ts: int = wire("e", TIMESTAMP, 2 ** 62)


@request(RequestCode.VIEW_MESSAGE_BY_ID, needs(later=[("topic:<the message's topic>", SUB)]))
class ViewMessage(Schema):
    offset: int = wire("offset", OFFSET)


@request(RequestCode.CONSUMER_SEND_MSG_BACK, needs(group("group", SUB), later=[("topic:<the message's topic>", SUB)]))
class ConsumerSendMsgBack(Schema):
    group: str = wire("g", GROUP)
    offset: int = wire("offset", OFFSET)                  # CommitLog offset of the failed message
    delay_level: int = wire("delay", Int(-1, 2 ** 31 - 1), 0)  # -1: straight to the DLQ
    origin_topic: str | None = wire("ot", Opt(TOPIC), None)
    origin_msg_id: str | None = wire("omid", Opt(MSG_ID), None)
    reconsume: int | None = wire("rc", Opt(U31), None)
    max_reconsume: int | None = wire("max", Opt(Int(-1, 2 ** 31 - 1)), None)
    delay_ms: int | None = wire("dms", Opt(Int(1, 2 ** 40)), None)  # retry after this long (a timer), not a level


# ---- requests: broker, offsets and queues -----------------------------------------------------------


@request(RequestCode.QUERY_CONSUMER_OFFSET, needs(group("group", SUB, GET), topic("topic", SUB, GET)))
class QueryConsumerOffset(Schema):
    group: str = wire("g", GROUP)
    topic: str = wire("t", TOPIC)
    queue_id: int = wire("q", QUEUE_ID)


@request(RequestCode.UPDATE_CONSUMER_OFFSET, needs(group("group", SUB), topic("topic", SUB)))
class UpdateConsumerOffset(Schema):
    group: str = wire("g", GROUP)
    topic: str = wire("t", TOPIC)
    queue_id: int = wire("q", QUEUE_ID)
    offset: int = wire("o", OFFSET)


@request(RequestCode.GET_MAX_OFFSET, needs(topic("topic", SUB, GET)))
class GetMaxOffset(Schema):
    topic: str = wire("t", TOPIC)
    queue_id: int = wire("q", QUEUE_ID)


@request(RequestCode.GET_MIN_OFFSET, needs(topic("topic", SUB, GET)))
class GetMinOffset(Schema):
    topic: str = wire("t", TOPIC)
    queue_id: int = wire("q", QUEUE_ID)
    local: bool = wire("local", Bool(), False)   # the first offset on the broker's disk (tiered storage)
    compacted: bool = wire("compacted", Bool(), False)   # the first one not compacted (compacted topics)


@request(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, needs(topic("topic", SUB, GET)))
class SearchOffsetByTimestamp(Schema):
    topic: str = wire("t", TOPIC)
    queue_id: int = wire("q", QUEUE_ID)
    timestamp: int = wire("ts", TIMESTAMP)


@request(RequestCode.LOCK_BATCH_MQ, needs(group("group", SUB), each(_queue_topics, "topic:<each queue's topic>", SUB)))
class LockBatchMq(Schema):
    group: str = wire("g", GROUP)
    client_id: str = wire("c", CLIENT_ID)
    queues: list = wire("mqs", ListOf(Row(TOPIC, QUEUE_ID), 1 << 16))


@request(RequestCode.UNLOCK_BATCH_MQ, needs(group("group", SUB), each(_queue_topics, "topic:<each queue's topic>", SUB)))
class UnlockBatchMq(Schema):
    group: str = wire("g", GROUP)
    client_id: str = wire("c", CLIENT_ID)
    queues: list = wire("mqs", ListOf(Row(TOPIC, QUEUE_ID), 1 << 16))


# ---- requests: broker, clients and groups ------------------------------------------------------------


@request(RequestCode.HEART_BEAT, needs(each(_heartbeat_groups, "group:<each consumer group>", SUB), each(_heartbeat_topics, "topic:<each subscribed topic>", SUB)))
class HeartBeat(Schema):
    client_id: str = wire("client_id", CLIENT_ID)
    producers: list = wire("producers", ListOf(GROUP, 1024), [])
    consumers: list = wire("consumers", ListOf(Nested(ConsumerData), 1024), [])


@request(RequestCode.UNREGISTER_CLIENT, needs(group("consumer_group", SUB)))
class UnregisterClient(Schema):
    client_id: str = wire("client_id", CLIENT_ID)
    producer_group: str | None = wire("producer_group", Opt(GROUP), None)
    consumer_group: str | None = wire("consumer_group", Opt(GROUP), None)


@request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, needs(group("group", SUB, GET)))
class GetConsumerList(Schema):
    group: str = wire("g", GROUP)


@request(RequestCode.GET_CONSUME_STATS, needs(group("group", GET)))
class GetConsumeStats(Schema):
    group: str = wire("g", GROUP)


@request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, needs(group("group", CREATE, UPDATE)))
class UpdateSubscriptionGroup(Schema):
    group: str = wire("g", GROUP)
    retry_max_times: int = wire("retry_max_times", Int(0, 1_000_000), 16)


@request(RequestCode.DELETE_SUBSCRIPTIONGROUP, needs(group("group", DELETE)))
class DeleteSubscriptionGroup(Schema):
    group: str = wire("g", GROUP)
    clean_offset: bool = wire("clean_offset", Bool(), True)   # RocketMQ's removeOffset


@request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, service("broker"))
class NotifyConsumerIdsChanged(Schema):
    group: str | None = wire("g", Opt(GROUP), None)


@request(RequestCode.CHECK_CLIENT_CONFIG, needs(group("group", SUB), topic("topic", SUB)))
class CheckClientConfig(Schema):
    group: str | None = wire("g", Opt(GROUP), None)
    topic: str | None = wire("t", Opt(TOPIC), None)
    expression_type: str | None = wire("tp", Opt(EXPR_TYPE), None)
    expression: str | None = wire("sub", Opt(EXPRESSION), None)


@request(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, needs(group("group", UPDATE), topic("topic", SUB, GET)))
class ResetOffset(Schema):
    """Admin -> broker: store `group`'s offset of every queue of `topic` on this broker (or of
    `queue_id`) as the first message stored at or after `timestamp`, or as `offset` (held to each
    queue's [min, max]); exactly one of the two. The broker then tells the group's online members
    (RESET_CONSUMER_CLIENT_OFFSET); the reply is a ResetOffsetReply."""
    group: str = wire("g", GROUP)
    topic: str = wire("t", TOPIC)
    timestamp: int | None = wire("ts", Opt(TIMESTAMP), None)
    offset: int | None = wire("o", Opt(OFFSET), None)
    queue_id: int | None = wire("q", Opt(QUEUE_ID), None)   # None: every queue of the topic


@request(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, service("broker"))
class ResetConsumerClientOffset(Schema):
    """Broker -> each online member of `group`: drop what is cached of these queues of `topic` on
    broker `broker` and pull them from these offsets ([queue id, offset] rows)."""
    group: str = wire("g", GROUP)
    topic: str = wire("t", TOPIC)
    broker: str = wire("b", BROKER_NAME)
    offsets: list = wire("offsets", ListOf(Row(QUEUE_ID, OFFSET), MAX_QUEUES))


# ---- requests: broker, topics and admin -----------------------------------------------------------------


@request(RequestCode.UPDATE_AND_CREATE_TOPIC, needs(topic("topic", CREATE, UPDATE)))
class CreateTopic(Schema):
    topic: str = wire("topic", TOPIC)
    read: int = wire("read", QUEUE_COUNT, 4)
    write: int | None = wire("write", Opt(QUEUE_COUNT), None)   # None: as many as read
    perm: int = wire("perm", Int(0, 15), 6)                     # READ=4, WRITE=2, INHERIT=1
    order: bool = wire("order", Bool(), False)
    force: bool = wire("force", Bool(), False)                  # lower read queues that still hold a backlog
    compact: bool | None = wire("compact", Opt(Bool()), None)  # a compacted topic (None: as it is)


@request(RequestCode.DELETE_TOPIC_IN_BROKER, needs(topic("topic", DELETE)))
class DeleteTopic(Schema):
    topic: str = wire("topic", TOPIC)


@request(RequestCode.ADMIN_COMPACT_TOPIC, needs(topic("topic", UPDATE)))
class CompactTopic(Schema):
    """Run a compaction pass over a compacted topic's queues now; the reply comes when it is done."""
    topic: str = wire("topic", TOPIC)


@request(RequestCode.GET_ALL_TOPIC_CONFIG, needs(cluster(LIST, GET)))
class GetAllTopicConfig(Schema):
    pass


@request(RequestCode.ADMIN_CLEAN_EXPIRED, needs(cluster(UPDATE)))
class CleanExpired(Schema):
    pass


@request(RequestCode.BROKER_BACKUP, SUPER_ONLY)   # writes files on the broker's host, holds the ACL's keys
class BrokerBackup(Schema):
    name: str = wire("name", BACKUP_NAME)  # a directory under the broker's --backup-dir (with `url`: staged there)
    url: str | None = wire("url", Opt(BACKUP_URL, blank=True), None)   # uploaded there, the manifest last
    endpoint: str | None = wire("endpoint", Opt(S3_ENDPOINT, blank=True), None)   # default: the broker's --s3-endpoint


@request(RequestCode.REGISTER_FILTER_SERVER, service("filter"))
class RegisterFilterServer(Schema):
    addr: str = wire("addr", ADDR)
    unregister: bool = wire("unregister", Bool(), False)


# ---- requests: scheduler ---------------------------------------------------------------------------------


@request(RequestCode.SCHEDULE_INIT, service("scheduler"))
class ScheduleInit(Schema):
    pass


REPUT_META = Row(I32, PROPS, TIMESTAMP, U31, I32, TIMESTAMP)  # flag, props, born, reconsume, sys flag, due


@request(RequestCode.SCHEDULE_REPUT, service("scheduler"))
class ScheduleReput(Schema):
    """Due messages back to their real topics (or `roll`: timers re-parked in the timer topic)."""
    metas: list = wire("m", ListOf(REPUT_META, MAX_BATCH, 1))
    lengths: list | None = wire("l", BODY_LENGTHS, None)
    roll: bool = wire("roll", Bool(), False)
    born_host: str | None = wire("bh", Opt(ADDR), None)

    def bodies(self, frames: list) -> list:
        return unpack_bodies(self._what(), frames, self.lengths, len(self.metas))


@request(RequestCode.SCHEDULE_CANCEL, needs(topic("topic", PUB)))
class ScheduleCancel(Schema):
    """Cancel the delayed message `msg_id` of `topic` (its real topic): the scheduler cancels
    only a message of that topic, so PUB on it is the right to cancel."""
    msg_id: str = wire("id", MSG_ID)
    topic: str = wire("t", TOPIC)


# ---- requests: transactions --------------------------------------------------------------------------------

TX_STATE = Int(0, 0xC)  # record.TX_NOT / TX_COMMIT / TX_ROLLBACK


@request(RequestCode.END_TRANSACTION, needs(later=[("topic:<the half message's topic>", PUB)]))
class EndTransaction(Schema):
    group: str = wire("g", GROUP)
    entries: list = wire("e", ListOf(Row(OFFSET, OFFSET, TX_STATE, Str(128, 0)), MAX_BATCH, 1))  # phys, qoff, state, txid
    from_check: bool = wire("fc", Bool(), False)


# TRANSACTION_CHECK actions: ask the producer group (count + 1), re-put unchanged (still immune), discard
CHECK_ASK, CHECK_REQUEUE, CHECK_DISCARD = "c", "r", "d"


@request(RequestCode.TRANSACTION_CHECK, service("txn-checker"))
class TransactionCheck(Schema):
    entries: list = wire("e", ListOf(Row(OFFSET, OFFSET, OneOf(CHECK_ASK, CHECK_REQUEUE, CHECK_DISCARD)),
                                     MAX_BATCH, 1))  # phys, qoff, action


@request(RequestCode.TRANSACTION_LIST_OPEN, needs(cluster(GET)))
class TransactionListOpen(Schema):
    limit: int = wire("limit", Int(1, 1_000_000), 1000)


CHECK_ENTRY = Row(OFFSET, OFFSET, Str(128, 0), Str(255, 0), QUEUE_ID, TIMESTAMP, TIMESTAMP, I32, PROPS)


@request(RequestCode.CHECK_TRANSACTION_STATE, service("broker"))
class CheckTransactionState(Schema):
    """Broker -> producer: [half phys, half qoff, txid, real topic, real qid, born, stored, flag, props]."""
    group: str = wire("g", GROUP)
    entries: list = wire("e", ListOf(CHECK_ENTRY, MAX_BATCH, 1))


# ---- requests: master/slave ---------------------------------------------------------------------------------


@request(RequestCode.HA_SYNC_METADATA, service("replica"))
class HaSyncMetadata(Schema):
    offsets: list = wire("offsets", ListOf(Row(GROUP, TOPIC, QUEUE_ID, OFFSET), 1 << 20), [])


@request(RequestCode.HA_SLAVE_OFFSETS, service("broker"))
class HaSlaveOffsets(Schema):
    pass


EPOCH_ROW = Row(U31, OFFSET)  # [master epoch, its start offset in the CommitLog]


@request(RequestCode.HA_TRANSFER, service("broker"))
class HaTransfer(Schema):
    offset: int = wire("o", OFFSET)
    segment_bytes: int = wire("sb", Int(0, MAX_OFFSET), 0)
    master_end: int = wire("me", OFFSET, 0)
    # --auto-failover: the epoch the chunk's bytes belong to (a chunk never spans two; an older one
    # while a replica catches up), its start, and in a handshake answer (no body) the master's whole
    # epoch list [[epoch, start offset], ...]; "mep" is the epoch the sender is master of (fencing)
    epoch: int = wire("ep", U31, 0)
    epoch_start: int = wire("es", OFFSET, 0)
    epochs: list | None = wire("el", Opt(ListOf(EPOCH_ROW, 1 << 16)), None)
    master_epoch: int = wire("mep", U31, 0)
    # --auto-failover: the master's confirm offset (what every in-sync replica holds): a replica
    # serves reads up to it, so none is served that a failover may cut
    confirm: int | None = wire("co", Opt(OFFSET), None)


@request(RequestCode.HA_REPORT, service("replica"))
class HaReport(Schema):
    offset: int = wire("o", OFFSET)
    addr: str = wire("addr", Str(255), "?")
    broker_id: int = wire("id", U31, 1)
    reset: bool = wire("reset", Bool(), False)
    # --auto-failover: "hs" asks for the master's epoch list before any bytes (the log is not cut yet);
    # "ep" is the newest epoch the replica knows, so a deposed master learns it is one
    handshake: bool = wire("hs", Bool(), False)
    epoch: int = wire("ep", U31, 0)


# ---- requests: controller (automatic failover, in the name servers started with --controller) -----------------

@request(RequestCode.CONTROLLER_HEARTBEAT, service("broker"))
class ControllerHeartbeat(Schema):
    """A broker with --auto-failover, every --controller-heartbeat-interval-ms to each controller."""
    cluster: str = wire("cluster", CLUSTER)
    broker_name: str = wire("broker_name", BROKER_NAME)
    addr: str = wire("addr", ADDR)
    ha_addr: str = wire("ha_addr", ADDR)
    max_offset: int = wire("o", OFFSET, 0)
    epoch: int = wire("ep", U31, 0)         # the newest epoch in the broker's epoch file
    resign: bool = wire("resign", Bool(), False)  # stopping: elect another now (older controllers ignore it)


@request(RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, service("broker"))
class AlterSyncStateSet(Schema):
    """The master of `epoch` asks to replace its group's SyncStateSet (refused when stale)."""
    cluster: str = wire("cluster", CLUSTER)
    broker_name: str = wire("broker_name", BROKER_NAME)
    master_addr: str = wire("master", ADDR)
    epoch: int = wire("ep", U31)
    sync_state_set: list = wire("sss", ListOf(ADDR, 64, 1))


@request(RequestCode.CONTROLLER_REPLICA_INFO, needs(cluster(GET)))
class ReplicaInfo(Schema):
    pass


# ---- requests: auth (SUPER users; services read the snapshot) ------------------------------------------------

USER_NAME = Str(64)
Z85_KEY = Str(40, 40)
RESOURCE = Str(262)
ACTION_LIST = ListOf(OneOf(*ACTIONS), len(ACTIONS), 1)


@request(RequestCode.ACL_UPDATE_USER, SUPER_ONLY)
class AclUpdateUser(Schema):
    name: str = wire("name", USER_NAME)
    public_key: str = wire("key", Z85_KEY)
    type: str = wire("type", OneOf("NORMAL", "SUPER"), "NORMAL")


@request(RequestCode.ACL_DELETE_USER, SUPER_ONLY)
class AclDeleteUser(Schema):
    name: str = wire("name", USER_NAME)


@request(RequestCode.ACL_GRANT, SUPER_ONLY)
class AclGrant(Schema):
    user: str = wire("user", USER_NAME)
    resource: str = wire("res", RESOURCE)
    actions: list = wire("act", ACTION_LIST)
    deny: bool = wire("deny", Bool(), False)
    source: str | None = wire("src", Opt(Str(64), blank=True), None)


@request(RequestCode.ACL_REVOKE, SUPER_ONLY)
class AclRevoke(Schema):
    """Remove `user`'s rules on `resource` (of this decision and source), or only `actions` of them."""
    user: str = wire("user", USER_NAME)
    resource: str = wire("res", RESOURCE)
    actions: list | None = wire("act", Opt(ACTION_LIST), None)
    deny: bool = wire("deny", Bool(), False)
    source: str | None = wire("src", Opt(Str(64), blank=True), None)


@request(RequestCode.ACL_SNAPSHOT, SUPER_ONLY)
class AclSnapshot(Schema):
    known: str | None = wire("v", Opt(Str(64), blank=True), None)  # the caller's version: unchanged -> no body


# ---- requests: POP consumption (issue 22; the broker's pop.py) -------------------------------------

from quiver.wire.receipt_handle import HANDLE, MAX_INVISIBLE_MS, MIN_INVISIBLE_MS  # noqa: E402

INVISIBLE_MS = Int(MIN_INVISIBLE_MS, MAX_INVISIBLE_MS)


@request(RequestCode.POP_MESSAGE, needs(topic("topic", SUB), group("group", SUB)))
class PopMessage(Schema):
    """Up to `max_msgs` messages of the topic's queues on this broker (round robin), each invisible
    to the group for `invisible_ms`; held up to `poll_ms` when there is none. `order`: FIFO, one
    message in flight per message group (__SHARDINGKEY). `consume_from` places a group's first pop."""
    group: str = wire("g", GROUP)
    topic: str = wire("t", TOPIC)
    max_msgs: int = wire("n", Int(1, 1024), 32)
    invisible_ms: int = wire("it", INVISIBLE_MS, 60_000)
    poll_ms: int = wire("s", SUSPEND_MS, 0)
    expression: str | None = wire("sub", Opt(EXPRESSION), None)       # tags ("*", "A || B")
    order: bool = wire("fifo", Bool(), False)
    max_reconsume: int | None = wire("max", Opt(Int(-1, 2 ** 31 - 1)), None)  # the group config wins
    consume_from: str = wire("from", OneOf("first", "last"), "last")
    max_bytes: int = wire("mb", Int(1, MAX_BODY_BYTES), 4 << 20)


@request(RequestCode.ACK_MESSAGE, needs(topic("topic", SUB), group("group", SUB)))
class AckMessage(Schema):
    """Ack popped messages of one topic by their receipt handles (each must name `topic`)."""
    group: str = wire("g", GROUP)
    topic: str = wire("t", TOPIC)
    handles: list = wire("h", ListOf(HANDLE, 1024, 1))


@request(RequestCode.CHANGE_INVISIBLE_DURATION, needs(topic("topic", SUB), group("group", SUB)))
class ChangeInvisibleDuration(Schema):
    """The message of `handle` becomes visible `invisible_ms` from now; the reply's handle replaces it."""
    group: str = wire("g", GROUP)
    topic: str = wire("t", TOPIC)
    handle: object = wire("h", HANDLE)
    invisible_ms: int = wire("it", INVISIBLE_MS)
