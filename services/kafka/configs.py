"""AlterConfigs and IncrementalAlterConfigs: the topic settings the gateway states are fixed.

A Quiver topic has none of Kafka's per-topic settings to change: retention is the brokers',
the largest message the gateway's --max-message-bytes, timestamps are the producer's. So an
alteration is taken only when it changes nothing - a SET to the value DescribeConfigs gives,
a DELETE (back to that value), an APPEND of a list item already there or a SUBTRACT of one
that is not - and every other one is refused, the resource as a whole as Kafka does:
INVALID_CONFIG for a topic setting (named, with its fixed value), INVALID_REQUEST for a
broker's (the gateway's command line), UNKNOWN_TOPIC_OR_PARTITION for a topic that does not
exist.
"""

from quiver.errors import QuiverError
from quiver.wire.names import topic_problem

from .handlers import error_of
from .protocol import ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS, INVALID_REQUEST, NONE
from .topics import BROKER_RESOURCE, INVALID_TOPIC, TOPIC_RESOURCE

INVALID_CONFIG = 40
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
LIST_CONFIGS = frozenset({"cleanup.policy"})


class Configs:
    def __init__(self, topics):
        self.topics, self.gw = topics, topics.gw

    def apis(self) -> dict:
        return {ALTER_CONFIGS: self.alter_configs, INCREMENTAL_ALTER_CONFIGS: self.incremental_alter_configs}

    def alter_configs(self, body) -> dict:
        return self._alter(body, "alter_configs", lambda c: (SET, c.value))

    def incremental_alter_configs(self, body) -> dict:
        return self._alter(body, "incremental_alter_configs", lambda c: (c.config_operation, c.value))

    def _alter(self, body, api: str, operation) -> dict:
        out = []
        for r in body.resources:
            err, msg = self._check(r, operation)
            self.gw._count(api, err)
            out.append({"error_code": err, "error_message": msg, "resource_type": r.resource_type,
                        "resource_name": r.resource_name})
        return {"throttle_time": 0, "responses": out}

    def _check(self, r, operation) -> tuple[int, str | None]:
        if r.resource_type == BROKER_RESOURCE:
            return INVALID_REQUEST, "broker settings are the gateway's command line, not changed by a client"
        if r.resource_type != TOPIC_RESOURCE:
            return INVALID_REQUEST, f"resource type {r.resource_type}: only topics (2) have settings here"
        problem = topic_problem(r.resource_name)
        if problem:
            return INVALID_TOPIC, problem
        try:
            now = self.topics.topic_configs(r.resource_name)
        except QuiverError as exc:
            return error_of(exc), str(exc)
        for c in r.configs:
            op, value = operation(c)
            if c.name not in now:
                return INVALID_CONFIG, (f"{c.name!r} is not a topic setting the gateway has; it has "
                                        f"{', '.join(sorted(now))}")
            if not _changes_nothing(op, value, now[c.name], c.name in LIST_CONFIGS):
                if op not in (SET, DELETE, APPEND, SUBTRACT):
                    return INVALID_REQUEST, f"config operation {op}: 0-3 are Kafka's"
                return INVALID_CONFIG, f"{c.name} is fixed at {now[c.name]!r} on a Quiver topic"
        return NONE, None


def _changes_nothing(op: int, value: str | None, now: str, is_list: bool) -> bool:
    if op == SET:
        return value == now
    if op == DELETE:
        return True   # back to the value it has
    if op in (APPEND, SUBTRACT) and is_list and value is not None:
        items, given = now.split(","), [v.strip() for v in value.split(",")]
        return all((v in items) == (op == APPEND) for v in given)
    return False
