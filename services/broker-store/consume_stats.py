"""Consumer progress as the broker sees it (GET_CONSUME_STATS) and group watching.

Per queue of this broker that a group has an offset for (or subscribes to):
broker max offset, consumer offset, lag, the store time of the last consumed
message, and the client that owns the queue (consumers list their queues in
heartbeats). The reply also carries the group's subscription conflicts.

The watch step (on the service thread) drops clients silent past the
configured expiry and logs a group's subscription conflicts when they change:
members of one group subscribing differently silently lose messages.
"""

import logging

from quiver.wire import record
from quiver.wire.codes import RequestCode, ResponseCode
from quiver.wire.replies import ConsumeStatsReply, ConsumeStatsRow

from .store import GetStatus

log = logging.getLogger(__name__)


def _last_consume_ms(store, topic: str, qid: int, consumer_offset: int | None) -> int | None:
    if not consumer_offset:
        return None
    try:
        res = store.get_messages(topic, qid, consumer_offset - 1, 1, None, 1 << 22)
    except Exception:  # an expired or unreadable slot: no time to show
        return None
    if res.status is not GetStatus.FOUND or not res.count:
        return None
    recs = record.decode_many(res.data)
    return recs[0].store_ts if recs else None


class ConsumeStats:
    """GET_CONSUME_STATS of this broker (`broker_name`: the queues consumers say they own here)."""

    def __init__(self, broker_name: str, store, metadata, topics, clients):
        self.broker_name = broker_name
        self.store = store
        self.metadata = metadata
        self.topics = topics
        self.clients = clients

    def handlers(self) -> dict:
        return {RequestCode.GET_CONSUME_STATS: self.get_stats}

    def get_stats(self, req) -> None:
        req.reply(ResponseCode.SUCCESS, "", self.stats(req.args.group))

    def owners(self, group: str) -> dict[tuple[str, int], str]:
        """(topic, queue id) of this broker -> owning client id, from heartbeats."""
        out = {}
        for cid, info in self.clients.consumers.get(group, {}).items():
            for topic, broker, qid in info.queues:
                if broker == self.broker_name:
                    out[(topic, qid)] = cid
        return out

    def stats(self, group: str) -> ConsumeStatsReply:
        store = self.store
        offsets = self.metadata.group_offsets(group)
        members = self.clients.consumers.get(group, {})
        topics = {t for t, _ in offsets}
        for info in members.values():
            topics.update(info.subscriptions)
        owned = self.owners(group)
        rows = []
        for topic in sorted(topics):
            conf = self.topics.get(topic)
            if conf is None:
                continue
            for qid in range(conf["read"]):
                consumer = offsets.get((topic, qid))
                broker = store.max_offset(topic, qid)
                rows.append(ConsumeStatsRow(topic=topic, queue_id=qid, broker_offset=broker, consumer_offset=consumer,
                                            lag=max(0, broker - (consumer or 0)),
                                            last_consume_time=_last_consume_ms(store, topic, qid, consumer),
                                            client_id=owned.get((topic, qid))))
        return ConsumeStatsReply(rows=rows, clients=sorted(members),
                                 conflicts=self.clients.subscription_conflicts(group))


class GroupWatch:
    """The watch step: `clients` forget members silent past their expiry, `notify_group_changed`
    tells a group that lost one; `failures` (Service.failures) counts a step that failed."""

    def __init__(self, clients, failures, notify_group_changed, expiry_ms: int):
        self.clients = clients
        self.failures = failures
        self.notify_group_changed = notify_group_changed
        self.period_s = min(10.0, max(0.2, expiry_ms / 4000))
        self.reported: dict[str, str] = {}

    def step(self) -> None:
        each = self.failures.each
        each("group_watch", self.clients.expire(), self._lost_member)
        each("group_watch", list(self.clients.consumers), self._watch_conflicts)

    def _lost_member(self, group: str) -> None:
        log.info("consumer group %s lost a silent member", group)
        self.notify_group_changed(group)

    def _watch_conflicts(self, group: str) -> None:
        conflicts = self.clients.subscription_conflicts(group)
        text = repr(sorted((t, sorted(e)) for t, e in conflicts.items())) if conflicts else ""
        if text != self.reported.get(group, ""):
            if conflicts:
                log.warning("consumer group %s has inconsistent subscriptions (messages may be lost): %s",
                            group, conflicts)
            self.reported[group] = text
