"""ACL, shaped like RocketMQ ACL 2.0: users, rules, and the decision for one request.

A user has a name, a CURVE public key and a type (NORMAL or SUPER). A rule
gives a user a decision (ALLOW or DENY) for some actions on a resource pattern
— `cluster`, `topic:Orders`, `topic:orders-*`, `group:*` — optionally only from
a source CIDR. For one (user, resource, action, source): a SUPER user is
allowed; otherwise any matching DENY wins, then any matching ALLOW allows, and
nothing matching denies. System topics (SCHEDULE_TOPIC_XXXX, the half and op
topics, rmq_sys_*) are for SUPER users and services only, whatever a rule says.

Decisions are cached per (user, resource, action, source) in a dict, so the hot
path is one lookup; a new snapshot (any change) starts a new cache.
"""

import dataclasses
import ipaddress
import re

from quiver.wire.access import ACTIONS, ALL
from quiver.wire.names import is_system_topic

NORMAL, SUPER = "NORMAL", "SUPER"
USER_RE = re.compile(r"^[A-Za-z0-9_.@-]{1,64}\Z")
RESOURCE_RE = re.compile(r"^(cluster|(topic|group):[%|A-Za-z0-9_.-]{0,255}\*?)\Z")
_CACHE_MAX = 100_000


def user_problem(name) -> str | None:
    if not isinstance(name, str) or not USER_RE.match(name):
        return f"user name {name!r} must be 1-64 of letters, digits, '_', '.', '@' and '-'"
    return None


def resource_problem(pattern) -> str | None:
    if not isinstance(pattern, str) or not RESOURCE_RE.match(pattern) or pattern in ("topic:", "group:"):
        return (f"resource {pattern!r} must be 'cluster', 'topic:NAME' or 'group:NAME' "
                "(a trailing '*' matches a prefix: 'topic:orders-*', 'group:*')")
    return None


def source_problem(cidr) -> str | None:
    if cidr in (None, ""):
        return None
    try:
        ipaddress.ip_network(cidr, strict=False)
    except (TypeError, ValueError):
        return f"source {cidr!r} is not a CIDR (e.g. 10.0.0.0/8 or 127.0.0.1/32)"
    return None


@dataclasses.dataclass(frozen=True)
class User:
    name: str
    public_key: str
    type: str = NORMAL

    @property
    def is_super(self) -> bool:
        return self.type == SUPER

    def to_row(self) -> list:
        return [self.name, self.public_key, self.type]


@dataclasses.dataclass(frozen=True)
class Rule:
    user: str
    resource: str              # pattern: cluster | topic:NAME | group:NAME, '*' suffix for a prefix
    actions: frozenset
    deny: bool = False
    source: str | None = None  # CIDR; None: from anywhere

    def to_row(self) -> list:
        return [self.user, self.resource, sorted(self.actions), "DENY" if self.deny else "ALLOW", self.source or ""]

    @classmethod
    def from_row(cls, row) -> "Rule":
        user, resource, actions, decision, source = row
        return cls(user, resource, frozenset(actions), decision == "DENY", source or None)

    def matches(self, resource: str, action: str, ip) -> bool:
        if ALL not in self.actions and action not in self.actions:
            return False
        pattern = self.resource
        if pattern.endswith("*"):
            if not resource.startswith(pattern[:-1]):
                return False
        elif pattern != resource:
            return False
        if self.source is None:
            return True
        return ip is not None and ip in ipaddress.ip_network(self.source, strict=False)


def check_rule(rule: Rule) -> str | None:
    """A rule's first problem, or None: what `acl grant` refuses."""
    return (user_problem(rule.user) or resource_problem(rule.resource) or source_problem(rule.source)
            or (None if rule.actions and rule.actions <= set(ACTIONS)
                else f"actions must be some of {', '.join(ACTIONS)}, got {sorted(rule.actions)}"))


class Acl:
    """One immutable snapshot of users and rules, with its decision cache."""

    def __init__(self, users=(), rules=(), version: str = ""):
        self.version = version
        self.users: dict[str, User] = {u.name: u for u in users}
        self.by_key: dict[str, User] = {u.public_key: u for u in users}
        self.rules: dict[str, tuple[Rule, ...]] = {}
        for r in rules:
            self.rules[r.user] = self.rules.get(r.user, ()) + (r,)
        self._cache: dict = {}

    def snapshot(self) -> dict:
        """The wire form (ACL_SNAPSHOT replies, HA metadata sync)."""
        return {"version": self.version, "users": [u.to_row() for u in self.users.values()],
                "rules": [r.to_row() for rs in self.rules.values() for r in rs]}

    @classmethod
    def from_snapshot(cls, data: dict) -> "Acl":
        return cls([User(*row) for row in data.get("users", [])],
                   [Rule.from_row(row) for row in data.get("rules", [])], data.get("version", ""))

    def allowed(self, user: str, resource: str, action: str, source: str | None = None) -> bool:
        key = (user, resource, action, source)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._decide(user, resource, action, source)
            if len(self._cache) >= _CACHE_MAX:
                self._cache.clear()
            self._cache[key] = hit
        return hit

    def _decide(self, user: str, resource: str, action: str, source: str | None) -> bool:
        u = self.users.get(user)
        if u is None:
            return False
        if u.is_super:
            return True
        if resource.startswith("topic:") and is_system_topic(resource[6:]):
            return False
        ip = None
        if source:
            try:
                ip = ipaddress.ip_address(source)
            except ValueError:
                ip = None
        allow = False
        for rule in self.rules.get(user, ()):
            if rule.matches(resource, action, ip):
                if rule.deny:
                    return False
                allow = True
        return allow

    def any_allowed(self, user: str, resource: str, actions, source: str | None = None) -> bool:
        return any(self.allowed(user, resource, a, source) for a in actions)


EMPTY = Acl()
