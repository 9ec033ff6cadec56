"""FindCoordinator, OffsetCommit, OffsetFetch: a Kafka group's offsets are Quiver consumer offsets.

The gateway is every group's coordinator (node 0, itself). A commit of partition i of a topic
stores the group's consumer offset of the i-th queue (handlers.py's partition order) on that
queue's broker, as Quiver's own consumers do, so `quiver consumer progress` shows it and a
Quiver consumer of the same group resumes there (both mean "the next offset to read"). The
commit's metadata string is not kept (fetched back as ""). A commit with a generation is
checked against the group's members (groups.py); generation -1 is a "simple" commit of a
consumer that assigns partitions itself, taken as Kafka takes it.
"""

from quiver.client.access import broker_access
from quiver.wire import requests as rq
from quiver.wire.names import group_problem

from .handlers import NODE_ID, error_of
from .protocol import (FIND_COORDINATOR, INVALID_GROUP_ID, NONE, OFFSET_COMMIT, OFFSET_FETCH,
                       TRANSACTIONAL_ID_AUTHORIZATION_FAILED)

GROUP_KEY, TRANSACTION_KEY = 0, 1
TXN_REFUSAL = "transactions are not served by the Quiver Kafka gateway"


class Offsets:
    def __init__(self, gateway, members=None):
        self.gw = gateway
        self.members = members   # groups.Coordinator, or None: every generation is taken

    def apis(self) -> dict:
        return {FIND_COORDINATOR: self.find_coordinator, OFFSET_COMMIT: self.offset_commit,
                OFFSET_FETCH: self.offset_fetch}

    def find_coordinator(self, body) -> dict:
        if getattr(body, "key_type", GROUP_KEY) == TRANSACTION_KEY:
            # the unsupported code has librdkafka and the Java client look again until their timeout;
            # this one they take as final, and its message says why
            return {"error_code": TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "error_message": TXN_REFUSAL,
                    "node_id": -1, "host": "", "port": -1}
        if getattr(body, "key_type", GROUP_KEY) != GROUP_KEY:
            return {"error_code": INVALID_GROUP_ID, "error_message": "only group coordinators (key type 0) are served",
                    "node_id": -1, "host": "", "port": -1}
        problem = group_problem(body.key)
        if problem:
            return {"error_code": INVALID_GROUP_ID, "error_message": problem, "node_id": -1, "host": "", "port": -1}
        return {"error_code": NONE, "error_message": None, "node_id": NODE_ID, "host": self.gw.host,
                "port": self.gw.port}

    def offset_commit(self, body) -> dict:
        group = body.group_id
        generation = getattr(body, "generation_id_or_member_epoch", getattr(body, "generation_id", -1))
        err = INVALID_GROUP_ID if group_problem(group) else NONE
        if not err and self.members is not None and generation >= 0:
            err = self.members.check_commit(group, body.member_id, generation, getattr(body, "group_instance_id", None))
        topics = []
        for t in body.topics:
            parts = []
            for p in t.partitions:
                e = err or self._commit(group, t.name, p.partition_index, p.committed_offset)
                self.gw._count("offset_commit", e)
                parts.append({"partition_index": p.partition_index, "error_code": e})
            topics.append({"name": t.name, "partitions": parts})
        return {"throttle_time": 0, "topics": topics}

    def _commit(self, group: str, topic: str, partition: int, offset: int) -> int:
        mq, err = self.gw.queue(topic, partition)
        if mq is None:
            return err
        try:
            access = broker_access(self.gw.admin)
            access.call_broker(access.broker_addr(mq.broker, topic), rq.UpdateConsumerOffset(
                group=group, topic=topic, queue_id=mq.queue_id, offset=max(0, offset)))
        except Exception as exc:
            return error_of(exc)
        return NONE

    def offset_fetch(self, body) -> dict:
        group = body.group_id
        if group_problem(group):
            return {"throttle_time": 0, "error_code": INVALID_GROUP_ID, "topics": []}
        topics = []
        for t in body.topics or ():   # null (every topic the group has offsets of): answered empty
            parts = []
            for i in t.partition_indexes:
                err, offset = self._fetch(group, t.name, i)
                self.gw._count("offset_fetch", err)
                parts.append({"partition_index": i, "committed_offset": offset, "committed_leader_epoch": -1,
                              "metadata": "", "error_code": err})
            topics.append({"name": t.name, "partitions": parts})
        return {"throttle_time": 0, "error_code": NONE, "topics": topics}

    def _fetch(self, group: str, topic: str, partition: int) -> tuple[int, int]:
        mq, err = self.gw.queue(topic, partition)
        if mq is None:
            return err, -1
        try:
            offset = self.gw.admin.consumer_offset(group, mq)
        except Exception as exc:
            return error_of(exc), -1
        return NONE, -1 if offset is None else offset
