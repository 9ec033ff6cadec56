"""Cancelling a delayed or timer message: find the schedulers, ask each, and fall back to the
brokers' index of the parked topics. `Producer.cancel_scheduled` is the public entry.

A cancel names the message's id and its topic: a scheduler cancels only a
message of that topic (its tombstones are (id, topic) pairs), so with auth on
PUB on the topic is the right to cancel. The topic left out is read off the
parked message (SUB on the system topics: a SUPER user's right).
"""

import logging

from quiver.wire import properties
from quiver.wire.properties import REAL_TOPIC
from quiver.errors import NoPermissionError, QueryNotFoundError, QuiverError, ServiceNotAvailableError
from quiver.wire import record
from quiver.wire import requests as rq
from quiver.wire.codes import ResponseCode
from quiver.wire.validation import SCHEDULE_TOPIC, TIMER_TOPIC

log = logging.getLogger(__name__)


def cancel(client, msg_id: str, topic: str | None, group: str, timeout: float) -> bool:
    """Cancel a delayed/timer message not yet delivered: True if cancelled, False if too late.

    `topic` is the message's topic (what `send` was given): a scheduler
    cancels only a message of that topic, and with auth on PUB on it is
    the right to cancel (plus GET on `group:SCHEDULE_CONSUMER`, to find
    the schedulers). Left out, it is read from the parked message in the
    brokers' schedule and timer topics (with auth on, a SUPER user's
    right: pass `topic`).

    The cancel goes to every live scheduler (their addresses are in the
    client ids of the scheduler group, listed by any broker); each answers
    cancelled / too_late / unknown and remembers the (id, topic) as a
    tombstone, so a message not yet read by its owner is skipped when it
    is. "unknown" everywhere is checked against the brokers' index of the
    schedule and timer topics: still parked -> True, nowhere ->
    QueryNotFoundError.
    """
    brokers = client.all_broker_addrs()
    parked = None
    if topic is None:
        parked = topic = parked_topic(client, brokers, msg_id)
    ids, refused = set(), None
    for addr in brokers.values():
        try:
            env = client.call_broker(addr, rq.GetConsumerList(group=group))
            ids.update(rq.ConsumerListReply.decode(env.ext).ids)
        except NoPermissionError as exc:
            refused = exc   # finding the schedulers needs GET on group:<group>
        except QuiverError as exc:
            log.warning("scheduler list from %s: %s", addr, exc)
    addrs = {p[1] for p in (i.split("|") for i in ids) if len(p) >= 3 and p[0] == "scheduler"}
    if not addrs and refused is not None:
        raise refused
    futs = [client.transport.call_future(a, rq.ScheduleCancel(msg_id=msg_id, topic=topic), timeout=timeout)
            for a in sorted(addrs)]
    answers, problems = [], []
    for addr, f in zip(sorted(addrs), futs):
        try:
            env = f.result(timeout + 1)
            if env.code == ResponseCode.SUCCESS:
                answers.append(rq.ScheduleCancelReply.decode(env.ext).result)
            else:
                problems.append(f"{addr}: {env.remark}")
        except QuiverError as exc:
            problems.append(f"{addr}: {exc}")
    if not answers:
        raise ServiceNotAvailableError(f"no scheduler of group {group!r} answered: cannot cancel {msg_id} "
                                       f"({'; '.join(problems) or 'none is running'})")
    if "cancelled" in answers:
        return True
    if "too_late" in answers:
        return False
    if parked is None:
        parked = parked_topic(client, brokers, msg_id)
    if parked != topic:
        raise QueryNotFoundError(f"no scheduled message {msg_id!r} of topic {topic!r}")
    return True   # parked, not yet read by a scheduler: the tombstones stop it


def parked_topic(client, brokers: dict, msg_id: str) -> str:
    """The real topic of the message `msg_id` parked in a schedule or timer topic."""
    for name, addr in brokers.items():
        for parking in (SCHEDULE_TOPIC, TIMER_TOPIC):
            try:
                env = client.call_broker(addr, rq.QueryMessage(topic=parking, key=msg_id, max_msgs=1))
            except QueryNotFoundError:
                continue
            except QuiverError as exc:
                log.warning("lookup of %s on %s: %s", msg_id, name, exc)
                continue
            for body in env.bodies:
                topic = properties.read_topic(record.decode_at(body).props, REAL_TOPIC)
                if topic is not None:
                    return topic
    raise QueryNotFoundError(f"no scheduled message {msg_id!r}: wrong id, or delivered long ago "
                             "(with auth on, pass its topic)")
