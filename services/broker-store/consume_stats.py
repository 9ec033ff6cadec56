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

from quiver import record
from quiver.codes import RequestCode, ResponseCode

log = logging.getLogger(__name__)


def _last_consume_ms(store, topic: str, qid: int, consumer_offset: int | None) -> int | None:
    if not consumer_offset:
        return None
    try:
        res = store.get_messages(topic, qid, consumer_offset - 1, 1, None, 1 << 22)
    except Exception:  # an expired or unreadable slot: no time to show
        return None
    if res.status.name != "FOUND" or not res.count:
        return None
    recs = record.decode_many(res.data)
    return recs[0].store_ts if recs else None


def owners(app, group: str) -> dict[tuple[str, int], str]:
    """(topic, queue id) of this broker -> owning client id, from heartbeats."""
    me = app.config.name
    out = {}
    for cid, info in app.clients.consumers.get(group, {}).items():
        for topic, broker, qid in info.queues:
            if broker == me:
                out[(topic, qid)] = cid
    return out


def consume_stats(app, group: str) -> dict:
    store = app.store
    offsets = app.metadata.group_offsets(group)
    members = app.clients.consumers.get(group, {})
    topics = {t for t, _ in offsets}
    for info in members.values():
        topics.update(info.subscriptions)
    owned = owners(app, group)
    rows = []
    for topic in sorted(topics):
        conf = app.topics.get(topic)
        if conf is None:
            continue
        for qid in range(conf["read"]):
            consumer = offsets.get((topic, qid))
            broker = store.max_offset(topic, qid)
            rows.append({"topic": topic, "queue_id": qid, "broker_offset": broker, "consumer_offset": consumer,
                         "lag": max(0, broker - (consumer or 0)),
                         "last_consume_time": _last_consume_ms(store, topic, qid, consumer),
                         "client_id": owned.get((topic, qid))})
    return {"rows": rows, "clients": sorted(members), "conflicts": app.clients.subscription_conflicts(group)}


class GroupWatch:
    def __init__(self, app):
        self.app = app
        self.expiry_ms = getattr(app.config, "client_expiry_ms", 120_000)
        app.clients.expiry_s = self.expiry_ms / 1000
        self.period_s = min(10.0, max(0.2, self.expiry_ms / 4000))
        self.reported: dict[str, str] = {}

    def step(self) -> None:
        app = self.app
        each = app.service.failures.each
        each("group_watch", app.clients.expire(), self._lost_member)
        each("group_watch", list(app.clients.consumers), self._watch_conflicts)

    def _lost_member(self, group: str) -> None:
        log.info("consumer group %s lost a silent member", group)
        self.app.notify_group_changed(group)

    def _watch_conflicts(self, group: str) -> None:
        conflicts = self.app.clients.subscription_conflicts(group)
        text = repr(sorted((t, sorted(e)) for t, e in conflicts.items())) if conflicts else ""
        if text != self.reported.get(group, ""):
            if conflicts:
                log.warning("consumer group %s has inconsistent subscriptions (messages may be lost): %s",
                            group, conflicts)
            self.reported[group] = text


def make_handlers(app):
    watch = GroupWatch(app)
    app.service.every("group_watch", watch.period_s, watch.step)

    def get_stats(req):
        group = req.args.group
        req.reply(ResponseCode.SUCCESS, "", consume_stats(app, group))

    return {RequestCode.GET_CONSUME_STATS: get_stats}
