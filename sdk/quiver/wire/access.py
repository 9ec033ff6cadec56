"""What each request code needs: its resources and action, declared beside its schema.

Every request schema is registered with an `Access` (`@request(code, access)` in
requests.py), so a code cannot exist without saying who may send it. With auth
on, a service checks the declaration against the sender's principal before the
handler runs; a resource known only after a lookup (the topic of a message
found by its offset) is declared `later` and checked by the handler through
`Request.authorize`.

Resources follow RocketMQ ACL 2.0: `cluster`, `topic:NAME`, `group:NAME`. A
retry or dead-letter topic (`%RETRY%G`, `%DLQ%G`) is the group G's resource.
Actions: PUB, SUB, CREATE, UPDATE, DELETE, GET, LIST (ALL in a rule grants them
all). Service roles (`broker`, `filter`, `scheduler`, `txn-checker`, `replica`)
are not users: a code that only a service may send names its roles, and no
user key — not even a SUPER user's — can send it.
"""

from quiver.wire.names import DLQ_PREFIX, RETRY_PREFIX

PUB, SUB, CREATE, UPDATE, DELETE, GET, LIST, ALL = "PUB", "SUB", "CREATE", "UPDATE", "DELETE", "GET", "LIST", "ALL"
ACTIONS = (PUB, SUB, CREATE, UPDATE, DELETE, GET, LIST, ALL)
CLUSTER = "cluster"
ROLES = frozenset({"broker", "filter", "scheduler", "txn-checker", "replica"})


def topic_resource(topic: str) -> str:
    """A topic's resource: a retry or dead-letter topic belongs to its group."""
    for prefix in (RETRY_PREFIX, DLQ_PREFIX):
        if topic.startswith(prefix):
            return "group:" + topic[len(prefix):]
    return "topic:" + topic


class Need:
    """One resource (or several, from a list field) and the actions any one of which grants it."""
    __slots__ = ("resources", "actions", "what")

    def __init__(self, resources, actions: tuple, what: str):
        self.resources = resources  # args -> iterable of resource strings
        self.actions = frozenset(actions)
        self.what = what


def topic(field: str, *actions: str, open_to_users: frozenset = frozenset()) -> Need:
    """The topic in `field` (absent: no check). A topic of `open_to_users` needs no rule: any
    authenticated user may (the trace topic, which every traced client writes)."""
    def resources(args):
        name = getattr(args, field)
        return (topic_resource(name),) if name and name not in open_to_users else ()
    what = f"topic:<{field}>"
    if open_to_users:
        what += f" (any user for {', '.join(sorted(open_to_users))})"
    return Need(resources, actions, what)


def group(field: str, *actions: str) -> Need:
    def resources(args):
        name = getattr(args, field)
        return ("group:" + name,) if name else ()
    return Need(resources, actions, f"group:<{field}>")


def each(fn, what: str, *actions: str) -> Need:
    """Resources computed from the request (a list field): `fn(args)` yields them."""
    return Need(fn, actions, what)


def cluster(*actions: str) -> Need:
    return Need(lambda args: (CLUSTER,), actions, CLUSTER)


class Access:
    """A request code's declaration. Exactly one of: `needs` (resources x actions for users),
    `roles` (service roles only), `anyone` (any authenticated principal), `super_only`."""
    __slots__ = ("needs", "roles", "anyone", "super_only", "later")

    def __init__(self, needs=(), roles=(), anyone=False, super_only=False, later=()):
        self.needs = tuple(needs)
        self.roles = frozenset(roles)
        self.anyone = anyone
        self.super_only = super_only
        self.later = tuple(later)  # (what, action) the handler checks once it knows the resource
        if not (self.needs or self.roles or anyone or super_only or self.later):
            raise TypeError("an Access must declare needs, roles, anyone, super_only or later")
        unknown = self.roles - ROLES
        if unknown:
            raise TypeError(f"unknown service roles {sorted(unknown)}")

    def describe(self) -> str:
        if self.roles:
            return "service role " + "|".join(sorted(self.roles))
        if self.anyone:
            return "any authenticated user"
        if self.super_only:
            return "a SUPER user"
        parts = [f"{'|'.join(sorted(n.actions))} on {n.what}" for n in self.needs]
        parts += [f"{action} on {what} (checked by the handler)" for what, action in self.later]
        return ", ".join(parts)


def needs(*items: Need, later=()) -> Access:
    return Access(needs=items, later=later)


def service(*roles: str) -> Access:
    return Access(roles=roles)


ANYONE = Access(anyone=True)
SUPER_ONLY = Access(super_only=True)
