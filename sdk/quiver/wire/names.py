"""Names that become paths or addresses: topics, groups, broker names, clusters, host:port.

Owns the naming rules (RocketMQ's for topics and groups), the reserved topic
names, and `confine`, the last check before a path built from a name is
created, read or deleted::

    name          characters (ASCII only)              length     never
    topic         letters digits % | _ -               1..127     (255 with %RETRY% / %DLQ%)
    group         letters digits % | _ -               1..120
    broker name   letters digits % | _ - .             1..127     "." and ".."
    cluster       letters digits % | _ - .             1..127     "." and ".."
    host:port     hostname (labels of letters, digits, '-', '_'), IPv4 or [IPv6];
                  port 1..65535

So no name holds a path separator, NUL, a control or a non-ASCII character (no
lookalikes, no right-to-left marks). Each `check_*` raises a QuiverError whose
remark says what is wrong and what is allowed (MessageIllegalError for topics
and groups, as RocketMQ answers; InvalidParameterError for the others); each
`is_valid_*` answers the same question without raising, for loops that must go
on past one bad item. Does not own message properties (properties.py)
nor body and properties sizes (validation.py).
"""

import ipaddress
import os
import re

from quiver.errors import InvalidParameterError, MessageIllegalError, NoPermissionError

TOPIC_MAX_CHARS = 127
SYSTEM_TOPIC_MAX_CHARS = 255        # %RETRY%<group> and %DLQ%<group>
GROUP_MAX_CHARS = 120
BROKER_NAME_MAX_CHARS = 127
HOST_MAX_CHARS = 253
PORT_MAX = 65535

# \Z, not $: "$" also matches before a trailing newline. Used with fullmatch.
TOPIC_RE = re.compile(r"^[%|a-zA-Z0-9_-]+\Z")
BROKER_NAME_RE = re.compile(r"^[%|a-zA-Z0-9_.-]+\Z")
_LABEL_RE = re.compile(r"[a-zA-Z0-9_]([a-zA-Z0-9_-]{0,61}[a-zA-Z0-9_])?")
_PORT_RE = re.compile(r"[0-9]{1,5}")
_TOPIC_ALLOWED = "ASCII letters, digits, '%', '|', '_' and '-'"
_BROKER_ALLOWED = "ASCII letters, digits, '%', '|', '_', '-' and '.'"

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
TIMER_TOPIC = "rmq_sys_wheel_timer"
HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
CHECK_MAX_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"   # message trace records (quiver.wire.trace)
REPLY_TOPIC_SUFFIX = "_REPLY_TOPIC"   # <cluster>_REPLY_TOPIC: the replies of request-reply, one queue per broker


def reply_topic(cluster: str) -> str:
    """The topic a cluster's brokers store replies in (RocketMQ's `<cluster>_REPLY_TOPIC`)."""
    return cluster + REPLY_TOPIC_SUFFIX
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"

SYSTEM_TOPICS = frozenset({
    "TBW102", SCHEDULE_TOPIC, "BenchmarkTest", HALF_TOPIC, TRACE_TOPIC, OP_HALF_TOPIC,
    CHECK_MAX_TOPIC, "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT", "CHECKPOINT_TOPIC", TIMER_TOPIC,
})
# Apps may not send to these (RocketMQ's list plus the timer topic).
NOT_ALLOWED_SEND = frozenset({SCHEDULE_TOPIC, HALF_TOPIC, OP_HALF_TOPIC, CHECK_MAX_TOPIC,
                              "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT", TIMER_TOPIC})


class UnsafePathError(InvalidParameterError):
    """A path built from a name would leave its base directory (raised by `confine`)."""


def is_system_topic(topic: str) -> bool:
    return topic in SYSTEM_TOPICS or topic.startswith("rmq_sys_")


# ---- topics and groups --------------------------------------------------------------

def topic_problem(name) -> str | None:
    """What is wrong with `name` as a topic (a remark), or None."""
    if type(name) is str and len(name) <= TOPIC_MAX_CHARS and TOPIC_RE.match(name):
        return None  # the common case, first
    limit = SYSTEM_TOPIC_MAX_CHARS if type(name) is str and name.startswith((RETRY_PREFIX, DLQ_PREFIX)) \
        else TOPIC_MAX_CHARS
    return _problem("topic", name, TOPIC_RE, limit, _TOPIC_ALLOWED)


def group_problem(name) -> str | None:
    """What is wrong with `name` as a consumer or producer group (a remark), or None."""
    return _problem("group", name, TOPIC_RE, GROUP_MAX_CHARS, _TOPIC_ALLOWED)


def check_topic(name, for_send: bool = False, for_create: bool = False, for_delete: bool = False) -> None:
    """Raise MessageIllegalError (bad name) or NoPermissionError (system topic) saying what to fix.

    `for_send`: apps may not send to the system topics of NOT_ALLOWED_SEND;
    `for_create`, `for_delete`: nor create or delete a system topic (deleting the half
    queue would strand every open transaction)."""
    problem = topic_problem(name)
    if problem is not None:
        raise MessageIllegalError(problem)
    if for_send and name in NOT_ALLOWED_SEND:
        raise NoPermissionError(f"topic {name!r} is a system topic: apps cannot send to it")
    if for_create and is_system_topic(name):
        raise NoPermissionError(f"topic {name!r} is reserved for the system: pick another name")
    if for_delete and is_system_topic(name):
        raise NoPermissionError(f"topic {name!r} is a system topic: it cannot be deleted")


def check_group(name) -> None:
    problem = group_problem(name)
    if problem is not None:
        raise MessageIllegalError(problem)


def is_valid_topic(name) -> bool:
    return topic_problem(name) is None


def is_valid_group(name) -> bool:
    return group_problem(name) is None


# ---- brokers and clusters ----------------------------------------------------------------

def broker_name_problem(name, what: str = "broker name") -> str | None:
    """What is wrong with `name` as a broker (or, with `what`, cluster) name, or None."""
    problem = _problem(what, name, BROKER_NAME_RE, BROKER_NAME_MAX_CHARS, _BROKER_ALLOWED)
    if problem is None and name in (".", ".."):
        problem = f"{what} {name!r} names a directory itself: use letters or digits too"
    return problem


def check_broker_name(name) -> None:
    problem = broker_name_problem(name)
    if problem is not None:
        raise InvalidParameterError(problem)


def check_cluster(name) -> None:
    problem = broker_name_problem(name, "cluster name")
    if problem is not None:
        raise InvalidParameterError(problem)


def is_valid_broker_name(name) -> bool:
    return broker_name_problem(name) is None


def is_valid_cluster(name) -> bool:
    return broker_name_problem(name, "cluster name") is None


# ---- addresses ------------------------------------------------------------------------------

def addr_problem(addr) -> str | None:
    """What is wrong with `addr` as "host:port" (host a hostname, IPv4 or [IPv6]), or None."""
    if type(addr) is not str:
        return f"address must be a string 'host:port', got {type(addr).__name__}"
    if not addr.isascii() or not addr.isprintable():
        return f"address {shown(addr)} has a non-ASCII or control character: use 'host:port'"
    if addr.startswith("["):
        end = addr.find("]")
        if end < 0 or addr[end + 1:end + 2] != ":":
            return f"address {shown(addr)} is not '[IPv6]:port'"
        host, port = addr[1:end], addr[end + 2:]
        if "%" in host:
            return f"address {shown(addr)}: IPv6 zone ids are not supported"
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return f"address {shown(addr)}: {host!r} is not an IPv6 address"
    else:
        host, sep, port = addr.rpartition(":")
        if not sep:
            return f"address {shown(addr)} has no port: use 'host:port'"
        if ":" in host:
            if _is_ipv6(host):
                return f"address {shown(addr)}: an IPv6 host goes in brackets, '[{host}]:{port}'"
            return f"address {shown(addr)} is not 'host:port' (one ':' only, no scheme)"
        problem = _host_problem(host)
        if problem is not None:
            return f"address {shown(addr)}: {problem}"
    if not _PORT_RE.fullmatch(port) or not 1 <= int(port) <= PORT_MAX:
        return f"address {shown(addr)}: port must be a number 1..{PORT_MAX}, got {port[:16]!r}"
    return None


def check_addr(addr) -> tuple[str, int]:
    """(host, port) of "host:port" (host without IPv6 brackets); raises InvalidParameterError."""
    problem = addr_problem(addr)
    if problem is not None:
        raise InvalidParameterError(problem)
    host, _, port = addr.rpartition(":")
    return host.strip("[]"), int(port)


def is_valid_addr(addr) -> bool:
    return addr_problem(addr) is None


def _is_ipv6(host: str) -> bool:
    try:
        ipaddress.IPv6Address(host)
    except ValueError:
        return False
    return True


def _host_problem(host: str) -> str | None:
    if not host:
        return "the host is empty"
    if len(host) > HOST_MAX_CHARS:
        return f"the host is {len(host)} characters long; the limit is {HOST_MAX_CHARS}"
    labels = (host[:-1] if host.endswith(".") else host).split(".")
    if all(label.isdigit() for label in labels):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            return f"{host!r} is not an IPv4 address (four numbers 0..255, no leading zeros)"
        return None
    for label in labels:
        if not _LABEL_RE.fullmatch(label):
            return (f"{host!r} is not a hostname: dot-separated labels of 1..63 letters, digits, '-' "
                    f"or '_', not starting or ending with '-'")
    return None


# ---- paths --------------------------------------------------------------------------------------

BACKUP_NAME_MAX_CHARS = 200
_BACKUP_PART_RE = re.compile(r"[a-zA-Z0-9_-][a-zA-Z0-9_.-]*")


def backup_name_problem(name) -> str | None:
    """What is wrong with `name` as a backup's directory under a broker's backup root (a
    relative path of names of letters, digits, '_', '-' and '.', none starting with '.'), or None."""
    if type(name) is not str or not name:
        return "the backup name must be a non-empty string"
    if len(name) > BACKUP_NAME_MAX_CHARS:
        return f"the backup name is {len(name)} characters long; the limit is {BACKUP_NAME_MAX_CHARS}"
    if name.startswith("/"):
        return (f"the backup name {shown(name)} is an absolute path: give a name relative to the broker's "
                f"--backup-dir")
    for part in name.split("/"):
        if not _BACKUP_PART_RE.fullmatch(part):
            return (f"the backup name {shown(name)} has a part {shown(part)} that is not letters, digits, '_', '-' "
                    f"and '.' (not starting with '.', none empty)")
    return None


BACKUP_URL_MAX_CHARS = 600
_BACKUP_URL_RE = re.compile(r"s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/(.+)")
_ENDPOINT_RE = re.compile(r"https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?/?")


def backup_url_problem(url) -> str | None:
    """What is wrong with `url` as an object-store backup target, s3://BUCKET/PREFIX (the prefix
    a backup name: it holds that backup only), or None."""
    if type(url) is not str or len(url) > BACKUP_URL_MAX_CHARS:
        return f"the backup URL must be a string of at most {BACKUP_URL_MAX_CHARS} characters"
    m = _BACKUP_URL_RE.fullmatch(url)
    if not m:
        return f"the backup URL {shown(url)} is not s3://BUCKET/PREFIX (bucket 3-63 of a-z 0-9 . -)"
    problem = backup_name_problem(m.group(1).rstrip("/"))
    return f"the prefix of {shown(url)}: {problem}" if problem else None


def endpoint_problem(url) -> str | None:
    """What is wrong with `url` as an S3-compatible endpoint (http[s]://HOST[:PORT]), or None."""
    if type(url) is not str or len(url) > 256 or not _ENDPOINT_RE.fullmatch(url):
        return f"the S3 endpoint {shown(url)} is not http[s]://HOST[:PORT]"
    return None


def confine(base_dir: str, *parts: str) -> str:
    """`base_dir/parts...` resolved (symlinks followed); raises UnsafePathError unless it lies
    strictly under realpath(base_dir). Call it before a path built from a name is created,
    read or deleted; use what it returns."""
    base = os.path.realpath(base_dir)
    if not parts:
        return base
    for part in parts:
        if type(part) is not str or not part or "\x00" in part:
            raise UnsafePathError(f"path part {shown(part)} must be a non-empty string without NUL")
    path = os.path.realpath(os.path.join(base, *parts))
    if path == base or os.path.commonpath((base, path)) != base:
        raise UnsafePathError(f"path {shown(os.path.join(*parts))} leaves its base directory: refused")
    return path


# ---- remarks ----------------------------------------------------------------------------------------

def _problem(what: str, name, pattern: re.Pattern, limit: int, allowed: str) -> str | None:
    if type(name) is not str:
        return f"{what} must be a string, got {type(name).__name__}"
    if not name.strip():
        return f"{what} is blank: give a name"
    if len(name) > limit:
        return f"{what} is {len(name)} characters long; the limit is {limit}"
    if not pattern.match(name):
        # a path separator or NUL is named first: it says what the name was trying to do
        at, ch = next(((i, c) for i, c in enumerate(name) if c in "/\\\x00"), None) \
            or next((i, c) for i, c in enumerate(name) if not pattern.match(c))
        return f"{what} {shown(name)} has illegal characters ({_describe(ch)} at position {at}): only {allowed} are allowed"
    return None


def _describe(ch: str) -> str:
    if ch == "\x00":
        return "NUL"
    if ch in "/\\":
        return f"the path separator {ch!r}"
    if not ch.isascii():
        return f"the non-ASCII character U+{ord(ch):04X}"
    if not ch.isprintable():
        return f"the control character U+{ord(ch):04X}"
    return repr(ch)


def shown(value, limit: int = 64) -> str:
    """A name as a remark shows it: ASCII only (no right-to-left tricks), cut at `limit`."""
    if type(value) is not str:
        return type(value).__name__
    return ascii(value[:limit]) + ("..." if len(value) > limit else "")


def split_addrs(text: str | list | None) -> list[str]:
    """"h:p;h:p" (or a list) as a list of addresses, blanks dropped."""
    if not text:
        return []
    if isinstance(text, (list, tuple)):
        return [a.strip() for a in text if a.strip()]
    return [a.strip() for a in text.replace(",", ";").split(";") if a.strip()]
