"""Broker side of the scheduler (issue 4): SCHEDULE_INIT and SCHEDULE_REPUT.

Owns the two requests a scheduler process makes of a broker; the scheduler
itself (services/scheduler) owns waiting, progress and cancellation.

- SCHEDULE_INIT: creates SCHEDULE_TOPIC_XXXX (one queue per delay level) and
  the timer topic if missing, and answers the broker's delay table
  (`delay_levels_ms`): the broker owns the table, the scheduler computes a
  level message's due time as store_timestamp + delay_levels_ms[queue_id],
  exactly what the ConsumeQueue tagsCode holds.
- SCHEDULE_REPUT: a batch of parked messages (one body frame each, fields in
  `m` = [[flag, properties, born_ts, reconsume, sys_flag, due_ms], ...]) is
  put back where it belongs: topic/queue from REAL_TOPIC/REAL_QID, DELAY and
  TIMER_* dropped, keys/tags/other properties kept (REAL_* stay, as in
  RocketMQ), SCHEDULE_ORIGIN_ID = the producer's msgId (UNIQ_KEY, unchanged
  too) and SCHEDULE_DUE_MS = the due time. System topics are allowed here
  (the SEND path refuses them). With `"roll": true` the entries are instead
  re-appended to the timer topic unchanged (a timer rolled forward past
  CommitLog retention). Consecutive entries for one queue are one put.
  A message whose real topic is gone or is the half topic is dropped and
  reported in `dropped` (indices). The properties of every entry are checked
  again (quiver.wire.properties: REAL_TOPIC a valid topic name, REAL_QID
  0..1023 and a queue of the real topic, i.e. below max(read, write), ...): a
  request with a bad entry is answered MESSAGE_ILLEGAL, the remark naming the
  entry and the property, `bad` listing every bad entry, and nothing is put,
  so the scheduler can drop those and re-put the rest.
"""

import logging
import time

from quiver.wire import properties
from quiver.wire import requests as rq
from quiver.wire.codes import RequestCode, ResponseCode
from quiver.errors import QuiverError
from quiver.wire.properties import (DELAY, REAL_QID, REAL_TOPIC, SCHEDULE_DUE_MS, SCHEDULE_ORIGIN_ID, TIMER_DELAY_MS,
                                    TIMER_DELAY_SEC, TIMER_DELIVER_MS, UNIQ_KEY)
from quiver.wire.names import HALF_TOPIC, RETRY_PREFIX, SCHEDULE_TOPIC, TIMER_TOPIC
from quiver.wire.property_string import format_properties, parse_properties

from .sending import born_host
from .status_codes import check_stored

log = logging.getLogger(__name__)

_DROP = (DELAY, TIMER_DELIVER_MS, TIMER_DELAY_SEC, TIMER_DELAY_MS)


def restore(props: str, due_ms: int | None = None) -> tuple[str | None, int, str]:
    """(real topic, real queue id, properties to store) of a parked message."""
    p = parse_properties(props)
    topic = p.get(REAL_TOPIC)
    qid = properties.read_int(p, REAL_QID, 0)  # the caller checks the kept REAL_* again
    for name in _DROP:
        p.pop(name, None)
    uniq = p.get(UNIQ_KEY)
    if uniq:
        p[SCHEDULE_ORIGIN_ID] = uniq
    if type(due_ms) is int and due_ms > 0:
        p[SCHEDULE_DUE_MS] = str(due_ms)
    return topic, qid, format_properties(p)


class Schedule:
    """SCHEDULE_INIT and SCHEDULE_REPUT; `commit` answers once the re-put is visible."""

    def __init__(self, config, store, topics, commit, counters):
        self.config = config
        self.store = store
        self.topics = topics
        self.commit = commit              # group_commit.GroupCommit
        self.counters = counters

    def handlers(self) -> dict:
        return {RequestCode.SCHEDULE_INIT: self.init, RequestCode.SCHEDULE_REPUT: self.reput}

    def init(self, req) -> None:
        c, levels, topics = self.config, self.config.delay_levels_ms, self.topics
        schedule = topics.config(SCHEDULE_TOPIC, create=True, system=True, queues=len(levels))
        timer = topics.config(TIMER_TOPIC, create=True, system=True, queues=1)
        req.reply(ResponseCode.SUCCESS, "", rq.ScheduleInitReply(
            delay_levels_ms=list(levels), broker_name=c.name, schedule_queues=schedule["read"],
            timer_queues=timer["read"], timer_horizon_ms=c.timer_horizon_ms, now_ms=int(time.time() * 1000),
            max_message_bytes=c.max_message_bytes))

    def reput(self, req) -> None:
        a = req.args  # quiver.wire.requests.ScheduleReput: entries typed and ranged
        bodies, roll = a.bodies(req.env.bodies), a.roll
        groups, dropped, bad = self._group(bodies, a.metas, roll)
        if bad:
            self.counters["schedule_reput_illegal"] += len(bad)
            more = f" ({len(bad) - 1} more bad entries)" if len(bad) > 1 else ""
            log.warning("re-put refused: entry %d: %s%s", bad[0][0], bad[0][1], more)
            req.reply(ResponseCode.MESSAGE_ILLEGAL, f"entry {bad[0][0]}: {bad[0][1]}{more}",
                      rq.ScheduleReputReply(bad=[i for i, _ in bad], dropped=dropped))
            return
        if roll:
            self.topics.config(TIMER_TOPIC, create=True, system=True, queues=1)
        self._put_groups(req, groups, dropped, len(bodies))

    def _group(self, bodies, metas, roll: bool) -> tuple[list, list[int], list[tuple[int, str]]]:
        """(groups, dropped, bad): one group per run of entries for one queue
        ([key, bodies, props, flags, born_ts], order kept per queue); dropped entries'
        indices; (index, remark) of each bad entry (the request is refused)."""
        groups: dict[tuple, list] = {}
        dropped: list[int] = []
        bad: list[tuple[int, str]] = []
        for i, (body, meta) in enumerate(zip(bodies, metas)):
            flag, props, born_ts, reconsume, sys_flag, due = meta[:6]
            if roll:
                topic, qid, problem = TIMER_TOPIC, 0, properties.first_problem(props)
            else:
                topic, qid, props, problem = real_queue(self.topics, self.counters, props, due)
            if problem is not None:
                bad.append((i, problem))
                continue
            if topic is None:
                dropped.append(i)
                continue
            key = (topic, qid, int(reconsume or 0), int(sys_flag or 0))
            g = groups.get(key)
            if g is None:
                g = groups[key] = [key, [], [], [], int(born_ts or 0)]
            g[1].append(body)
            g[2].append(props)
            g[3].append(int(flag or 0))
        return list(groups.values()), dropped, bad

    def _put_groups(self, req, groups, dropped, total) -> None:
        host = born_host(req.args.born_host)
        store_ts = 0
        touched = []
        for (topic, qid, reconsume, sys_flag), bodies, props, flags, born_ts in groups:
            res = self.store.put_batch(topic, qid, bodies, props, flags, sys_flag,
                                       born_ts or int(time.time() * 1000), host, reconsume, 0)
            check_stored(res, "re-put")
            store_ts = store_ts or res.store_ts
            touched.append((topic, qid, res.end_offset))
        self.counters["schedule_reput"] += total - len(dropped)
        out = rq.ScheduleReputReply(count=total - len(dropped), dropped=dropped,
                                    store_ts=store_ts or int(time.time() * 1000))
        self.commit.answer(req, out, touched)


def real_queue(topics, counters, props: str, due) -> tuple[str | None, int, str, str | None]:
    """(real topic, queue id, properties to store, problem) of a parked entry; a problem makes
    the request MESSAGE_ILLEGAL, a None topic (gone, or the half topic) drops the entry."""
    topic, qid, props = restore(props, due)
    problem = properties.first_problem(props)
    if problem is not None:
        return topic, qid, props, problem
    target = _target(topics, counters, topic)
    if target is None:
        return None, qid, props, None
    queues = max(target["read"], target["write"])  # a topic scaled in keeps its read queues
    if qid >= queues:
        problem = f"property {REAL_QID} must be a queue of {topic!r} (0..{queues - 1}), got {qid}"
    return topic, qid, props, problem


def _target(topics, counters, topic: str | None) -> dict | None:
    if not topic or topic == HALF_TOPIC:
        return None
    try:
        return topics.config(topic, create=True, system=topic.startswith(RETRY_PREFIX))
    except QuiverError as exc:
        log.warning("re-put to %r dropped: %s", topic, exc)
        counters["schedule_reput_dropped"] += 1
        return None
