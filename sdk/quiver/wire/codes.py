"""Request and response codes: the one numbering shared by every peer.

Numbered like RocketMQ's remoting codes where RocketMQ has the code; Quiver's
own additions sit in the 9000 range so they can never collide.
"""

from enum import IntEnum


class RequestCode(IntEnum):
    SEND_MESSAGE = 10
    PULL_MESSAGE = 11
    QUERY_MESSAGE = 12
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15
    UPDATE_AND_CREATE_TOPIC = 17
    GET_ALL_TOPIC_CONFIG = 21
    SEARCH_OFFSET_BY_TIMESTAMP = 29
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    VIEW_MESSAGE_BY_ID = 33
    HEART_BEAT = 34
    UNREGISTER_CLIENT = 35
    CONSUMER_SEND_MSG_BACK = 36
    END_TRANSACTION = 37
    GET_CONSUMER_LIST_BY_GROUP = 38
    CHECK_TRANSACTION_STATE = 39
    NOTIFY_CONSUMER_IDS_CHANGED = 40
    LOCK_BATCH_MQ = 41
    UNLOCK_BATCH_MQ = 42
    CHECK_CLIENT_CONFIG = 46
    REGISTER_BROKER = 103
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200
    DELETE_SUBSCRIPTIONGROUP = 207        # a group's config and (clean_offset) its offsets
    GET_CONSUME_STATS = 208
    UNREGISTER_BROKER = 104
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    DELETE_TOPIC_IN_BROKER = 215
    RESET_CONSUMER_CLIENT_OFFSET = 220    # broker -> a group's online members: resume these queues from here
    INVOKE_BROKER_TO_RESET_OFFSET = 222   # admin -> broker: move a group's offsets of a topic, tell its members
    REGISTER_FILTER_SERVER = 301  # filter server -> its broker, periodically (issue 6)
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
    SEND_MESSAGE_V2 = 310
    SEND_BATCH_MESSAGE = 320
    SEND_REPLY_MESSAGE = 324              # a reply (MSG_TYPE=reply) to <cluster>_REPLY_TOPIC: stored, then pushed
    PUSH_REPLY_MESSAGE_TO_CLIENT = 326    # broker -> the requester named by REPLY_TO_CLIENT
    # Quiver's own
    PING = 9000
    STATUS = 9001
    ADMIN_CLEAN_EXPIRED = 9002
    # scheduler (issue 4): broker side SCHEDULE_REPUT / SCHEDULE_INIT, scheduler side SCHEDULE_CANCEL
    SCHEDULE_REPUT = 9100
    SCHEDULE_INIT = 9101
    SCHEDULE_CANCEL = 9102
    # transactions (issue 5): txn-checker -> broker, admin -> broker
    TRANSACTION_CHECK = 9200     # re-put / discard / ask the producer group about half messages
    TRANSACTION_LIST_OPEN = 9201  # open half messages with age and check count
    # master/slave replication (issue 10)
    HA_TRANSFER = 9300        # master -> slave on the HA socket: CommitLog bytes from offset "o" (empty: heartbeat)
    HA_REPORT = 9301          # slave -> master on the HA socket: the slave's CommitLog max offset (its ack)
    HA_SYNC_METADATA = 9302   # slave -> master: slave-advanced offsets in; topics, groups, offsets out
    HA_SLAVE_OFFSETS = 9303   # restarting master -> slave: offsets committed on the slave while it served
    # auth (issue 17): SUPER users (and services, for the snapshot) -> broker
    ACL_UPDATE_USER = 9400    # add a user or replace its key/type
    ACL_DELETE_USER = 9401    # a user and its rules
    ACL_GRANT = 9402          # add (or widen) a rule
    ACL_REVOKE = 9403         # remove a rule, or some of its actions
    ACL_SNAPSHOT = 9404       # users and rules, with a content version (unchanged: no body)
    # automatic failover (issue 21): broker -> controller (embedded in the name servers), admin -> controller
    CONTROLLER_HEARTBEAT = 9500    # a broker's liveness and max offset; the reply is its role, epoch and master
    CONTROLLER_ALTER_SYNC_STATE_SET = 9501  # the master of an epoch shrinks or expands its SyncStateSet
    CONTROLLER_REPLICA_INFO = 9502  # every broker group's master, epoch, SyncStateSet and members
    # backup: admin -> broker
    BROKER_BACKUP = 9600          # a consistent snapshot of the store under the broker's --backup-dir
    # POP consumption (issue 22): RocketMQ's numbers (CHANGE_MESSAGE_INVISIBLETIME is 200053)
    POP_MESSAGE = 200050                  # pop up to N messages of a topic, each invisible for a while
    ACK_MESSAGE = 200051                  # ack popped messages by receipt handle
    CHANGE_INVISIBLE_DURATION = 200053    # a popped message's new invisible time; a new handle
    # compacted topics: admin -> broker
    ADMIN_COMPACT_TOPIC = 9700    # a compaction pass over a compacted topic's queues now


class ResponseCode(IntEnum):
    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    VERSION_NOT_SUPPORTED = 15
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    TOPIC_EXIST_ALREADY = 18
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    SUBSCRIPTION_PARSE_FAILED = 23
    SUBSCRIPTION_NOT_EXIST = 24
    SUBSCRIPTION_NOT_LATEST = 25
    SUBSCRIPTION_GROUP_NOT_EXIST = 26
    FILTER_DATA_NOT_EXIST = 27
    FILTER_DATA_NOT_LATEST = 28
    INVALID_PARAMETER = 29
    TRANSACTION_SHOULD_COMMIT = 200
    TRANSACTION_SHOULD_ROLLBACK = 201
    TRANSACTION_STATE_UNKNOW = 202
    TRANSACTION_STATE_GROUP_WRONG = 203
    NO_BUYER_ID = 204
    FLOW_CONTROL = 215
    PROPERTIES_SIZE_EXCEEDED = 217
    ILLEGAL_OPERATION = 604
    GO_AWAY = 1500
    # Quiver's own
    BAD_REQUEST = 9000
    DISK_FULL = 9001
    RECEIPT_HANDLE_EXPIRED = 9020  # a well-formed receipt handle whose delivery is no longer in flight
