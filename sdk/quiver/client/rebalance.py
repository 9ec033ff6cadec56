"""Queue allocation inside a consumer group, shared by the push and pull consumers.

Owns the allocation strategies (RocketMQ's AllocateMessageQueueAveragely,
AveragelyByCircle and ConsistentHash); `Rebalancer`, which asks a broker
for the group's client ids, takes every readable queue of each subscribed
topic, and returns the queues this client should own; and `RebalanceLoop`,
the one loop both consumers run: a round at start, every interval, at once
when a broker says the group changed (NOTIFY_CONSUMER_IDS_CHANGED) and a
second after a round that could not take a queue it was given. A round
releases the queues no longer this client's and takes the new ones through
the consumer's `release(mq)` and `take(mq, notified_at)`. A subscribed topic
that does not exist is logged once, listed in `Rebalancer.missing` and looked
for every second until it is created (RocketMQ's lite pull consumer and Kafka
wait for it too). It does not own
process queues, offsets or pulling: the consumer does.
"""

import bisect
import hashlib
import logging
import threading
import time

from quiver.wire import requests as rq
from quiver.client.base import MessageQueue
from quiver.errors import FieldError, QuiverError, TopicNotExistError

log = logging.getLogger(__name__)


def allocate_averagely(me: str, mqs: list, cids: list) -> list:
    """Contiguous blocks; the first Q mod C clients get one extra (Q=8, C=3: 3, 3, 2)."""
    if me not in cids or not mqs:
        return []
    i, q, c = cids.index(me), len(mqs), len(cids)
    mod = q % c
    if q <= c:
        size = 1
    elif mod > 0 and i < mod:
        size = q // c + 1
    else:
        size = q // c
    start = i * size if mod > 0 and i < mod else i * size + mod
    return [mqs[(start + k) % q] for k in range(min(size, q - start))]


def allocate_circle(me: str, mqs: list, cids: list) -> list:
    """Queue j goes to client j mod C."""
    if me not in cids:
        return []
    i, c = cids.index(me), len(cids)
    return [mq for j, mq in enumerate(mqs) if j % c == i]


def _hash(key: str) -> int:
    return int.from_bytes(hashlib.md5(key.encode()).digest()[:8], "big")


def allocate_consistent_hash(me: str, mqs: list, cids: list, virtual_nodes: int = 10) -> list:
    """Each client has `virtual_nodes` points on a ring; a queue goes to the next point clockwise."""
    if me not in cids:
        return []
    ring = sorted((_hash(f"{cid}-{n}"), cid) for cid in cids for n in range(virtual_nodes))
    points = [p for p, _ in ring]
    out = []
    for mq in mqs:
        i = bisect.bisect_right(points, _hash(f"{mq.topic}@{mq.broker}@{mq.queue_id}")) % len(ring)
        if ring[i][1] == me:
            out.append(mq)
    return out


STRATEGIES = {
    "averagely": allocate_averagely,
    "circle": allocate_circle,
    "consistent_hash": allocate_consistent_hash,
}


def strategy(name_or_fn):
    if callable(name_or_fn):
        return name_or_fn
    try:
        return STRATEGIES[name_or_fn]
    except KeyError:
        raise ValueError(f"unknown allocation strategy {name_or_fn!r}: use one of {sorted(STRATEGIES)}") from None


class RebalanceListener:
    """Told when a consumer's queues change: RocketMQ's MessageQueueListener, Kafka's
    ConsumerRebalanceListener. Subclass it and override either method; give it to a consumer as
    `rebalance_listener=`. Both run on the consumer's rebalance thread (asyncio consumers: hand
    work to the loop with loop.call_soon_threadsafe); what they raise is logged.

        class Log(RebalanceListener):
            def on_assigned(self, queues):
                print("now mine:", queues)
    """

    def on_revoked(self, queues: list[MessageQueue]) -> None:
        """These queues are about to be given up (a rebalance, an unsubscribe, shutdown); the
        consumer still owns them, so a pull consumer may commit() what it consumed of them."""

    def on_assigned(self, queues: list[MessageQueue]) -> None:
        """These queues are this consumer's now; their first messages follow."""


class Rebalancer:
    """Computes this client's queues for each subscribed topic.

    `client` is a started ClientBase with `group` and `client_id`. Broadcasting
    takes every queue; clustering allocates the sorted queues over the sorted
    client ids reported by one broker of the topic.
    """

    def __init__(self, client, group: str, allocate="averagely", broadcast: bool = False):
        self.client = client
        self.group = group
        self.allocate = strategy(allocate)
        self.broadcast = broadcast
        self.missing: dict[str, float] = {}   # subscribed topics a name server says do not exist: since when

    def client_ids(self, route) -> list[str]:
        for broker in sorted(route.addrs):
            try:
                env = self.client.call_broker(route.addrs[broker], rq.GetConsumerList(group=self.group))
                return sorted(rq.ConsumerListReply.decode(env.ext).ids)
            except QuiverError as exc:
                log.warning("consumer list of %s from %s failed: %s", self.group, broker, exc)
        return []

    def topic_queues(self, topic: str) -> list[MessageQueue] | None:
        """This client's share of `topic`, or None when it could not be computed."""
        try:
            route = self.client.route(topic, refresh=True)
        except TopicNotExistError:
            if topic not in self.missing:   # logged once: it is looked for every RETRY_S
                self.missing[topic] = time.monotonic()
                log.warning("topic %s does not exist (yet): %s takes its queues once it is created", topic, self.group)
            return []
        except QuiverError as exc:
            log.warning("route of %s unavailable: %s", topic, exc)
            return None
        if self.missing.pop(topic, None) is not None:
            log.info("topic %s exists now: %s takes its queues", topic, self.group)
        mqs = sorted(route.read_queues)
        if self.broadcast:
            return mqs
        cids = self.client_ids(route)
        if not cids:
            return None
        return sorted(self.allocate(self.client.client_id, mqs, cids))

    def assignment(self, topics) -> dict[str, list[MessageQueue] | None]:
        topics = list(topics)
        for gone in set(self.missing) - set(topics):   # unsubscribed meanwhile
            self.missing.pop(gone, None)
        return {t: self.topic_queues(t) for t in topics}


# after a round that could not take every queue it was given (a lock held elsewhere), and while a
# subscribed topic does not exist (its route is asked for again)
RETRY_S = 1.0


class RebalanceLoop:
    """Keeps a consumer's owned queues equal to its share of the group.

    `topics()` names what to allocate; `owned` is the consumer's dict of queues
    (mq -> its state), changed only by `take(mq, notified_at) -> bool` (False: not
    now, tried again a second later) and `release(mq)`; `changed()`, if given,
    runs after a round that took or released something. `notified_at` is when the
    notification that started the round arrived (monotonic s), else None."""

    def __init__(self, rebalancer: Rebalancer, interval_s: float, topics, owned: dict, take, release,
                 changed=None, listener: "RebalanceListener | None" = None):
        self.rebalancer, self.group = rebalancer, rebalancer.group
        self.interval_s = interval_s
        self.topics, self.owned, self.take, self.release, self.changed = topics, owned, take, release, changed
        self.listener = listener
        self.notified_at: float | None = None
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._retry_soon = False

    def start(self, name: str) -> None:
        """A first round now (on the caller's thread), then the loop on its own thread."""
        self._stopped.clear()
        self.step()
        threading.Thread(target=self._run, name=name, daemon=True).start()

    def stop(self) -> None:
        self._stopped.set()
        self._wake.set()

    def wake(self) -> None:
        self._wake.set()

    def notified(self, addr: str, env) -> None:
        """A broker's NOTIFY_CONSUMER_IDS_CHANGED: a round now if it is about this group."""
        try:
            group = rq.NotifyConsumerIdsChanged.decode(env.ext).group
        except FieldError as exc:
            log.warning("ignoring a malformed consumer-ids notification from %s: %s", addr, exc)
            return
        if group in (None, self.group):
            if self.notified_at is None:
                self.notified_at = time.monotonic()
            self._wake.set()

    def step(self) -> None:
        """One round: release what is no longer ours, take what is."""
        changed = False
        with self._lock:
            if self._stopped.is_set():
                return
            notified_at, self.notified_at = self.notified_at, None
            missing = False
            topics = list(self.topics())
            going = [m for m in list(self.owned) if m.topic not in topics]   # unsubscribed
            coming: list[MessageQueue] = []
            for topic, mqs in self.rebalancer.assignment(topics).items():
                if mqs is None:
                    continue  # unknown right now: keep what we have
                want = set(mqs)
                going += [m for m in list(self.owned) if m.topic == topic and m not in want]
                coming += sorted(want - set(self.owned))
            if going:   # told before they go: a listener may still commit what it consumed of them
                self._tell("on_revoked", sorted(going))
            for mq in going:
                self.release(mq)
                changed = True
            taken = []
            for mq in coming:
                if self.take(mq, notified_at):
                    taken.append(mq)
                else:
                    missing = True
            if taken:
                changed = True
                self._tell("on_assigned", taken)
            soon, self._retry_soon = self._retry_soon, missing or bool(self.rebalancer.missing)
            if self._retry_soon and not soon:
                self._wake.set()   # the loop may be in a full interval's wait: from now on RETRY_S
        if changed:
            log.info("%s of %s now owns %s", self.rebalancer.client.client_id, self.group,
                     [f"{m.topic}:{m.broker}:{m.queue_id}" for m in sorted(self.owned)])
            if self.changed is not None:
                self.changed()

    def release_all(self) -> None:
        """Give up every owned queue (shutdown), after any round under way."""
        with self._lock:
            if self.owned:
                self._tell("on_revoked", sorted(self.owned))
            for mq in list(self.owned):
                self.release(mq)

    def telling_revoked(self) -> None:
        """Tell the listener every owned queue is revoked, without releasing them (a consumer
        shutting down that keeps its queues until it closes)."""
        with self._lock:
            if self.owned:
                self._tell("on_revoked", sorted(self.owned))

    def _tell(self, what: str, mqs: list[MessageQueue]) -> None:
        """The listener's callback; what it raises is logged, the round goes on."""
        if self.listener is None:
            return
        try:
            getattr(self.listener, what)(mqs)
        except Exception:
            log.exception("rebalance listener %s of %s failed", what, self.group)

    def _run(self) -> None:
        while not self._stopped.is_set():
            self._wake.wait(RETRY_S if self._retry_soon else self.interval_s)
            self._wake.clear()
            if self._stopped.is_set():
                return
            try:
                self.step()
            except QuiverError as exc:
                if self._stopped.is_set():
                    return  # shut down meanwhile: its calls fail by design, nothing to report
                log.warning("rebalance of %s failed: %s", self.group, exc)
            except Exception:
                log.exception("rebalance of %s failed", self.group)
