"""Message properties: the names Quiver reserves, what the system ones may hold, the tag hash.

Owns the property names (RocketMQ's MessageConst and Quiver's own), RESERVED_PROPERTIES
(what a client's user properties may not use), the table below, `check_put` (run when a
message is put: MESSAGE_ILLEGAL naming the property and its range), `check_client_put`,
the defensive readers services use on what they read back (`read_int`, `read_topic`,
`first_problem`: they never raise; a bad value gives the default and is reported through
`on_bad`, so a loop can count it, log it once and go on) and the ConsumeQueue tag hash
(`tag_hash`, Java's String.hashCode). Broker, services and clients all take them from here.
Reads the properties string through property_string.py, which owns its format (`index_fields`
here is the put path's one scan for the names the broker indexes); not the name rules
(names.py)::

    property                         holds                               range
    DELAY                            delay level (clamped to the table)  0..2^31-1
    TIMER_DELIVER_MS                 delivery time, epoch ms             0..2^63-1
    TIMER_DELAY_MS, TIMER_DELAY_SEC  delay (RocketMQ 5 names)            0..2^63-1 ms
    REAL_TOPIC, REAL_QID             where a parked message belongs      a topic name; 0..1023
    RETRY_TOPIC, DLQ_ORIGIN_TOPIC    a retried message's topic           a topic name
    CHECK_IMMUNITY_TIME_IN_SECONDS   no check before, seconds            0..2592000 (30 days)
    TRANSACTION_CHECK_TIMES          checks so far                       0..2^31-1
    TRAN_BORN_MS                     a half message's first birth        0..2^63-1
    TRAN_PREPARED_QUEUE_OFFSET       a half message's first offset       0..2^63-1
    MAX_RECONSUME_TIMES              retries before the DLQ              -1..2^31-1
    RECONSUME_TIME                   retries so far                      0..2^31-1

A client may not send the properties only the broker writes (BROKER_WRITTEN: REAL_*,
RETRY_TOPIC, DLQ_ORIGIN_*, ORIGIN_MESSAGE_ID, the transaction's and the scheduler's own):
`check_client_put` refuses them at the door of the send path.

Integers are ASCII digits with an optional '-' (no '+', spaces, '_', exponents
or other scripts' digits): what str(int) writes.
"""

import re
from dataclasses import dataclass
from typing import Callable

from quiver.errors import MessageIllegalError
from quiver.wire import names
from quiver.wire.property_string import NAME_SEP, PROP_SEP, get_property
from quiver.wire.speedups import fast

# Property names (RocketMQ's MessageConst); the broker indexes TAGS (ConsumeQueue tag code), KEYS and UNIQ_KEY (IndexFile)
TAGS = "TAGS"
KEYS = "KEYS"
UNIQ_KEY = "UNIQ_KEY"
WAIT = "WAIT"
DELAY = "DELAY"
REAL_TOPIC = "REAL_TOPIC"
REAL_QID = "REAL_QID"
RETRY_TOPIC = "RETRY_TOPIC"
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
TRAN_MSG = "TRAN_MSG"
PGROUP = "PGROUP"
TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
MIN_OFFSET = "MIN_OFFSET"
MAX_OFFSET = "MAX_OFFSET"
SHARDING_KEY = "__SHARDINGKEY"
TRANSACTION_ID = "__transactionId__"
TRAN_STATE = "TRAN_STATE"  # an op-half record's resolution: C (commit), R (rollback), D (dropped)
TRACE_ON = "TRACE_ON"      # a traced message: services add their trace events only for these (quiver.wire.trace)
TIMER_DELAY_MS = "TIMER_DELAY_MS"
TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
TRAN_BORN_MS = "TRAN_BORN_MS"
TRAN_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
RECONSUME_TIME = "RECONSUME_TIME"
DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"
SCHEDULE_ORIGIN_ID = "SCHEDULE_ORIGIN_ID"
SCHEDULE_DUE_MS = "SCHEDULE_DUE_MS"
# request-reply (RocketMQ 4.6+): set by Producer.request and copied onto the reply by Producer.reply
CORRELATION_ID = "CORRELATION_ID"
REPLY_TO_CLIENT = "REPLY_TO_CLIENT"
TTL = "TTL"                # the requester's timeout, ms
CLUSTER = "CLUSTER"        # the cluster of the broker the request went to: its <cluster>_REPLY_TOPIC
MSG_TYPE = "MSG_TYPE"      # "reply" on a reply message
REPLY_MESSAGE = "reply"

# What a client's user properties may not be named (Message.properties)
RESERVED_PROPERTIES = frozenset({
    TAGS, KEYS, WAIT, DELAY, UNIQ_KEY, REAL_TOPIC, REAL_QID, RETRY_TOPIC, ORIGIN_MESSAGE_ID,
    TRAN_MSG, PGROUP, MIN_OFFSET, MAX_OFFSET, TIMER_DELIVER_MS, RECONSUME_TIME, MAX_RECONSUME_TIMES,
    TRAN_PREPARED_QUEUE_OFFSET, TIMER_DELAY_SEC, TIMER_DELAY_MS, TRACE_ON,
    CORRELATION_ID, REPLY_TO_CLIENT, TTL, CLUSTER, MSG_TYPE,
})

# Written only by the broker and its services: where a re-put writes (REAL_*, RETRY_TOPIC,
# DLQ_ORIGIN_TOPIC: the scheduler, a commit, a retry and a DLQ resend write there with the
# service's rights) or which message and transaction a copy stands for. A client's send carrying
# one is refused (`check_client_put`), so a re-put only ever writes where its sender could.
BROKER_WRITTEN = (REAL_TOPIC, REAL_QID, RETRY_TOPIC, DLQ_ORIGIN_TOPIC, ORIGIN_MESSAGE_ID, DLQ_ORIGIN_MESSAGE_ID,
                  TRANSACTION_ID, TRANSACTION_CHECK_TIMES, TRAN_BORN_MS, TRAN_PREPARED_QUEUE_OFFSET,
                  SCHEDULE_ORIGIN_ID, SCHEDULE_DUE_MS)

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
MAX_QUEUE_ID = 1023                       # topics have at most 1024 queues
MAX_CHECK_IMMUNITY_S = 30 * 86_400

_INT_RE = re.compile(r"-?[0-9]{1,19}")    # 19 digits hold 2^63-1; what str(int) writes


@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    kind: str          # "int" or "topic"
    lo: int = 0
    hi: int = 0


RULES: dict[str, Rule] = {r.name: r for r in (
    Rule(DELAY, "int", 0, INT32_MAX),
    Rule(TIMER_DELIVER_MS, "int", 0, INT64_MAX),
    Rule(TIMER_DELAY_MS, "int", 0, INT64_MAX),
    Rule(TIMER_DELAY_SEC, "int", 0, INT64_MAX // 1000),
    Rule(REAL_TOPIC, "topic"),
    Rule(REAL_QID, "int", 0, MAX_QUEUE_ID),
    Rule(RETRY_TOPIC, "topic"),
    Rule(DLQ_ORIGIN_TOPIC, "topic"),
    Rule(CHECK_IMMUNITY_TIME_IN_SECONDS, "int", 0, MAX_CHECK_IMMUNITY_S),
    Rule(TRANSACTION_CHECK_TIMES, "int", 0, INT32_MAX),
    Rule(TRAN_BORN_MS, "int", 0, INT64_MAX),
    Rule(TRAN_PREPARED_QUEUE_OFFSET, "int", 0, INT64_MAX),
    Rule(MAX_RECONSUME_TIMES, "int", -1, INT32_MAX),
    Rule(RECONSUME_TIME, "int", 0, INT32_MAX),
)}

OnBad = Callable[[str], None]


def _alternation(words) -> str:
    """A regex for exactly `words` (none a prefix of another), factored by common prefixes:
    sre tries the branches of an alternation one by one, so factored, a property name that
    is not a system one costs about one character comparison per first letter."""
    by_first: dict[str, list[str]] = {}
    for w in words:
        if w:
            by_first.setdefault(w[0], []).append(w[1:])
    alts = [re.escape(c) + _alternation(rest) for c, rest in sorted(by_first.items())]
    if len(alts) < 2:
        return "".join(alts)
    return "(?:" + "|".join(alts) + ")"


_NAMES = _alternation(name + NAME_SEP for name in RULES)
_FIRST = re.compile(_NAMES)              # .match: the first property of a string
_LATER = re.compile(PROP_SEP + _NAMES)   # .search: every later one (one C-level pass)
_OWNED = _alternation(name + NAME_SEP for name in BROKER_WRITTEN)
_OWNED_FIRST, _OWNED_LATER = re.compile(_OWNED), re.compile(PROP_SEP + _OWNED)


def value_problem(name: str, value) -> str | None:
    """Why `value` breaks the rule of property `name` (a remark), or None (also for a name
    without system meaning)."""
    rule = RULES.get(name)
    if rule is None:
        return None
    if rule.kind == "topic":
        problem = names.topic_problem(value)
        return None if problem is None else f"property {name} must be a topic name: {problem}"
    if type(value) is str and _INT_RE.fullmatch(value) and rule.lo <= int(value) <= rule.hi:
        return None
    return f"property {name} must be an integer {rule.lo}..{rule.hi}, got {names.shown(value, 32)}"


def mentions(props: str) -> bool:
    """True if a properties string (or several joined by PROP_SEP) carries a property with
    system meaning: one regex pass in C, no parse (the put path runs this for every request)."""
    return _FIRST.match(props) is not None or _LATER.search(props) is not None


def first_problem(props, only: tuple[str, ...] | None = None) -> str | None:
    """The remark for the first property with system meaning (of `only`, default all) whose
    value breaks its rule, or None. `props`: a properties string, a list of them, or a dict.
    Every occurrence of a name repeated in a string is checked."""
    if isinstance(props, dict):
        items = props.items()
    else:
        joined = props if isinstance(props, str) else PROP_SEP.join(props)
        if only is None and not mentions(joined):
            return None
        items = (item.partition(NAME_SEP)[::2] for item in joined.split(PROP_SEP) if item)
    for name, value in items:
        if name in RULES and (only is None or name in only):
            problem = value_problem(name, value)
            if problem is not None:
                return problem
    return None


def check_put(props) -> None:
    """Raise MessageIllegalError naming the first property with system meaning whose value
    breaks its rule (`props` as for first_problem). Cheap when none is present."""
    problem = first_problem(props)
    if problem is not None:
        raise MessageIllegalError(problem)


def check_client_put(props) -> None:
    """Raise MessageIllegalError if a client's send (properties strings) carries a property only
    the broker writes (BROKER_WRITTEN): one regex pass in C when none is there."""
    joined = props if isinstance(props, str) else PROP_SEP.join(props)
    found = _OWNED_FIRST.match(joined) or _OWNED_LATER.search(joined)
    if found is not None:
        name = found.group().strip(PROP_SEP).rstrip(NAME_SEP)
        raise MessageIllegalError(f"property {name} is written by the broker, never by a client (it says where a "
                                  f"re-put or resend writes or what a copy stands for): send without it")


def read_int(props, name: str, default: int, on_bad: OnBad | None = None) -> int:
    """Property `name` as an int within its rule's range; `default` when absent, and when
    malformed or out of range (then `on_bad(remark)` is called). Never raises."""
    raw = _get(props, name)
    if raw is None:
        return default
    rule = RULES.get(name)
    problem = value_problem(name, raw) if rule is not None else (
        None if type(raw) is str and _INT_RE.fullmatch(raw) else f"property {name} must be an integer")
    if problem is None:
        return int(raw)
    if on_bad is not None:
        on_bad(problem)
    return default


def read_topic(props, name: str, on_bad: OnBad | None = None) -> str | None:
    """Property `name` if it is a valid topic name; None when absent or invalid (then
    `on_bad(remark)` is called). Never raises."""
    raw = _get(props, name)
    if raw is None:
        return None
    problem = names.topic_problem(raw)
    if problem is None:
        return raw
    if on_bad is not None:
        on_bad(f"property {name} must be a topic name: {problem}")
    return None


def _get(props, name: str):
    if isinstance(props, dict):
        return props.get(name)
    return get_property(props, name) if props else None


_TAGS_AT = PROP_SEP + TAGS + NAME_SEP
_KEYS_AT = PROP_SEP + KEYS + NAME_SEP
_UNIQ_AT = PROP_SEP + UNIQ_KEY + NAME_SEP
_LT, _LK, _LU = len(_TAGS_AT), len(_KEYS_AT), len(_UNIQ_AT)


def index_fields(props: str) -> tuple[str | None, str | None, list[str]]:
    """(TAGS, UNIQ_KEY, KEYS split on spaces) of one properties string.

    Per message on the put path: three str.find over the string, no dict."""
    p = f"{PROP_SEP}{props}{PROP_SEP}"  # each "\x02NAME\x01" now has a "\x02" after its value
    i = p.find(_TAGS_AT)
    tag = p[i + _LT:p.find(PROP_SEP, i + _LT)] if i >= 0 else None
    i = p.find(_UNIQ_AT)
    uniq = p[i + _LU:p.find(PROP_SEP, i + _LU)] if i >= 0 else None
    i = p.find(_KEYS_AT)
    keys = [k for k in p[i + _LK:p.find(PROP_SEP, i + _LK)].split(" ") if k] if i >= 0 else []
    return tag, uniq, keys


# ---- the ConsumeQueue tag hash -----------------------------------------------------------------

_tag_hash_cache: dict[str, int] = {}


@fast
def java_hash(s: str) -> int:
    """Java String.hashCode: 32-bit signed polynomial over UTF-16 code units."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def tag_hash(tag: str | None) -> int:
    """ConsumeQueue tagsCode: hashCode of the tag, 0 for none (cached: tags are few)."""
    if not tag:
        return 0
    h = _tag_hash_cache.get(tag)
    if h is None:
        h = java_hash(tag)
        if len(_tag_hash_cache) < 65536:
            _tag_hash_cache[tag] = h
    return h
