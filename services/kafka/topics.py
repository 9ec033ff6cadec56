"""CreateTopics, DeleteTopics, CreatePartitions: Kafka's topic admin over Quiver's Admin.

A topic of N partitions is created with its queues spread over the registered brokers in name
order (the first N mod B brokers one queue more), so partition i is the i-th queue by broker
name then queue id, as Metadata numbers them. New partitions are queues added on the broker
that sorts last, so the existing partitions keep their numbers. The replication factor, replica
assignments and topic configs are not Kafka's to set here: replication is the brokers' own
(master/slave), retention the brokers' settings; they are accepted and not applied, except
cleanup.policy=compact, which makes a compacted topic (`quiver topic create --compact`).
"""

from quiver.client.access import broker_access
from quiver.errors import QuiverError, TopicNotExistError
from quiver.wire.names import topic_problem

from .handlers import error_of
from .protocol import CREATE_PARTITIONS, CREATE_TOPICS, DELETE_TOPICS, DESCRIBE_CONFIGS, INVALID_REQUEST, NONE

TOPIC_ALREADY_EXISTS, INVALID_PARTITIONS, INVALID_TOPIC = 36, 37, 17
TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
STATIC_SOURCE, DEFAULT_SOURCE = 4, 5   # Kafka's ConfigSource: static broker config, default
MAX_PARTITIONS = 1024


class Topics:
    def __init__(self, gateway):
        self.gw = gateway

    def apis(self) -> dict:
        return {CREATE_TOPICS: self.create_topics, DELETE_TOPICS: self.delete_topics,
                CREATE_PARTITIONS: self.create_partitions, DESCRIBE_CONFIGS: self.describe_configs}

    def _exists(self, topic: str) -> bool:
        try:
            return bool(broker_access(self.gw.admin).route(topic, refresh=True).read_queues)
        except TopicNotExistError:
            return False

    def _brokers(self) -> list[str]:
        return sorted(broker_access(self.gw.admin).all_broker_addrs())

    def create_topics(self, body) -> dict:
        out = []
        for t in body.topics:
            compact = any(c.name == "cleanup.policy" and "compact" in (c.value or "") for c in t.configs or ())
            err, msg = self._create(t.name, t.num_partitions, body.validate_only, compact)
            self.gw._count("create_topics", err)
            out.append({"name": t.name, "error_code": err, "error_message": msg, "topic_id": None,
                        "num_partitions": t.num_partitions if not err else -1, "replication_factor": -1,
                        "configs": []})
        return {"throttle_time": 0, "topics": out}

    def _create(self, topic: str, partitions: int, validate_only: bool, compact: bool = False):
        problem = topic_problem(topic)
        if problem:
            return INVALID_TOPIC, problem
        if partitions == -1:
            partitions = 4   # the broker default a Kafka client leaves it to
        if not 1 <= partitions <= MAX_PARTITIONS:
            return INVALID_PARTITIONS, f"partitions are 1..{MAX_PARTITIONS}, not {partitions}"
        try:
            if self._exists(topic):
                return TOPIC_ALREADY_EXISTS, f"topic {topic!r} exists"
            brokers = self._brokers()
            if not brokers:
                return INVALID_REQUEST, "no broker is registered with the name servers"
            if validate_only:
                return NONE, None
            share, extra = divmod(partitions, len(brokers))
            for i, name in enumerate(brokers):
                queues = share + (1 if i < extra else 0)
                if queues:
                    self.gw.admin.create_topic(topic, queues=queues, brokers=[name], compact=compact or None)
        except QuiverError as exc:
            return error_of(exc), str(exc)
        return NONE, None

    def delete_topics(self, body) -> dict:
        out = []
        for name in body.topic_names:
            err = NONE
            if topic_problem(name):
                err = INVALID_TOPIC
            else:
                try:
                    if not self._exists(name):
                        err = error_of(TopicNotExistError(name))
                    else:
                        self.gw.admin.delete_topic(name)
                except QuiverError as exc:
                    err = error_of(exc)
            self.gw._count("delete_topics", err)
            out.append({"name": name, "topic_id": None, "error_code": err, "error_message": None})
        return {"throttle_time": 0, "responses": out}

    def create_partitions(self, body) -> dict:
        out = []
        for t in body.topics:
            err, msg = self._grow(t.name, t.count, body.validate_only)
            self.gw._count("create_partitions", err)
            out.append({"name": t.name, "error_code": err, "error_message": msg})
        return {"throttle_time": 0, "results": out}

    def _grow(self, topic: str, count: int, validate_only: bool):
        try:
            now = self.gw.partitions(topic, refresh=True)
        except QuiverError as exc:
            return error_of(exc), str(exc)
        if not len(now) < count <= MAX_PARTITIONS:
            return INVALID_PARTITIONS, f"{topic!r} has {len(now)} partitions: ask for more, at most {MAX_PARTITIONS}"
        last = now[-1].broker
        have = sum(q.broker == last for q in now)
        if have + count - len(now) > MAX_PARTITIONS:
            return INVALID_PARTITIONS, f"broker {last} holds at most {MAX_PARTITIONS} queues of a topic"
        if validate_only:
            return NONE, None
        try:
            self.gw.admin.create_topic(topic, queues=have + count - len(now), brokers=[last])
        except QuiverError as exc:
            return error_of(exc), str(exc)
        return NONE, None

    def topic_configs(self, topic: str) -> dict[str, str]:
        """The topic settings a Kafka client reads, as the gateway states them; QuiverError (no such topic)."""
        self.gw.partitions(topic, refresh=True)
        return {"cleanup.policy": "delete", "max.message.bytes": str(self.gw.config.max_message_bytes),
                "message.timestamp.type": "CreateTime", "compression.type": "producer"}

    def describe_configs(self, body) -> dict:
        """The few settings a Kafka client reads that the gateway can state (read-only); a topic must exist."""
        out = []
        for r in body.resources:
            err, configs = NONE, {}
            if r.resource_type == TOPIC_RESOURCE:
                try:
                    configs = self.topic_configs(r.resource_name)
                except QuiverError as exc:
                    err = error_of(exc)
            elif r.resource_type == BROKER_RESOURCE:
                configs = {"message.max.bytes": str(self.gw.config.max_message_bytes),
                           "auto.create.topics.enable": "false"}
            else:
                err = INVALID_REQUEST
            wanted = set(r.configuration_keys) if r.configuration_keys is not None else None
            out.append({"error_code": err, "error_message": None, "resource_type": r.resource_type,
                        "resource_name": r.resource_name, "configs": [
                            {"name": k, "value": v, "read_only": True, "config_source": STATIC_SOURCE,
                             "is_default": False, "is_sensitive": False, "synonyms": [], "config_type": 0,
                             "documentation": None}
                            for k, v in sorted(configs.items()) if wanted is None or k in wanted]})
            self.gw._count("describe_configs", err)
        return {"throttle_time": 0, "results": out}
