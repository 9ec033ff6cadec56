"""One check round: read half and op messages of the owned brokers, ask about the open ones.

Owns the decision per half message (RocketMQ's TransactionalMessageServiceImpl
.check), done from outside the broker through the SDK:

- resolved (an op record or a check answer named its transaction id): skip;
- TRANSACTION_CHECK_TIMES >= max_checks: CHECK_DISCARD (to TRANS_CHECK_MAX_TIME_TOPIC);
- younger than its immunity (transaction timeout, or CHECK_IMMUNITY_TIME_IN_SECONDS
  when larger): without the property the scan of this broker stops (later
  messages are younger); with it the message is re-put unchanged (CHECK_REQUEUE);
- otherwise CHECK_ASK: the broker pushes CHECK_TRANSACTION_STATE to a live
  producer of the group and re-puts the half with the count + 1 (not counted
  when no producer is live).
The actions and the TRANSACTION_CHECK request and reply are quiver.wire.requests'.
A malformed property (CHECK_IMMUNITY_TIME_IN_SECONDS=inf, TRANSACTION_CHECK_TIMES=x)
is read as absent, counted in `bad_system_properties` and logged: one bad half
message never stops a round.
A round stops at the half queue's max offset seen when it began (re-put copies
are next round's work). Progress = consumer offsets of `group` on the half and
op queues, committed after the broker acknowledged the round's checks, so a
kill -9 replays at most one round's checks (the broker answers those for an
already resolved transaction with "resolved": nothing is committed twice).
No zmq here: the broker calls go through the SDK client.
"""

import collections
import logging
import os
import time

from quiver.client import queue_puller
from quiver.client.access import broker_access
from quiver.wire import requests as rq
from quiver.client.base import ClientBase
from quiver.wire.codes import ResponseCode
from quiver.errors import QueryNotFoundError, QuiverError
from quiver.client.rebalance import Rebalancer, allocate_averagely
from quiver.wire.properties import (CHECK_IMMUNITY_TIME_IN_SECONDS as CHECK_IMMUNITY,
                                    TRANSACTION_CHECK_TIMES as CHECK_TIMES, TRANSACTION_ID, TRAN_BORN_MS as BORN_MS,
                                    read_int)
from quiver.wire.validation import HALF_TOPIC, OP_HALF_TOPIC

log = logging.getLogger(__name__)

SKIP = "skip"   # already resolved: no TRANSACTION_CHECK entry
RESOLVED_KEEP = 500_000  # transaction ids remembered per broker (the broker is the authority anyway)


class CheckerClient(ClientBase):
    """The SDK client of a checker: heartbeats as a member of the checker group."""

    def __init__(self, namesrv, group: str, heartbeat_interval_s: float, advertised: str = ""):
        super().__init__(namesrv, 5.0)
        self.group = group
        self._heartbeat_interval_s = heartbeat_interval_s
        if advertised:
            # peers find each other's health port in the id: a killed instance stays registered
            # with the brokers for a while, but stops answering PING at once
            self.client_id = f"txn@{advertised}#{os.getpid()}#{time.monotonic_ns()}"

    def _heartbeat_payload(self) -> rq.HeartBeat:
        """This instance as a member of the checker group, subscribed to the half topic (tag "*")."""
        me = rq.ConsumerData(group=self.group, subscriptions={HALF_TOPIC: rq.Subscription(type="TAG", expression="*")})
        return rq.HeartBeat(client_id=self.client_id, consumers=[me])


class _BrokerState:
    __slots__ = ("half", "op", "resolved", "behind")

    def __init__(self):
        self.half: int | None = None
        self.op: int | None = None
        self.behind = 0   # half messages past where the last round stopped (/metrics)
        self.resolved: collections.OrderedDict = collections.OrderedDict()

    def resolve(self, txid: str) -> None:
        self.resolved[txid] = None
        if len(self.resolved) > RESOLVED_KEEP:
            self.resolved.popitem(last=False)


class Checker:
    def __init__(self, client: ClientBase, config, counters):
        self.client = broker_access(client)   # routes, broker calls, transport
        self.config = config
        self.counters = counters
        self.rebalancer = Rebalancer(self.client, config.group)
        self.brokers: dict[str, _BrokerState] = {}
        self.owned: dict[str, str] = {}

    # ---- ownership ------------------------------------------------------------------

    def rebalance(self) -> dict[str, str]:
        """Broker name -> address of the half queues this instance owns (averagely split)."""
        try:
            route = self.client.route(HALF_TOPIC, refresh=True)
        except QuiverError as exc:
            if getattr(exc, "code", None) != ResponseCode.TOPIC_NOT_EXIST:
                raise
            return {}  # no transaction was ever sent
        cids = self.rebalancer.client_ids(route)
        if not cids:
            return self.owned  # could not tell: keep what we had
        me = self.client.client_id
        live = sorted(cid for cid in set(cids) | {me} if cid == me or self._alive(cid))
        mqs = allocate_averagely(me, sorted(mq for mq in route.read_queues if mq.queue_id == 0), live)
        owned = {mq.broker: route.addrs[mq.broker] for mq in mqs}
        for gone in [b for b in self.brokers if owned.get(b) != self.owned.get(b)]:
            # gone, or a new master after a failover: re-read the committed offsets where it is now
            self.brokers.pop(gone, None)
        if owned != self.owned:
            log.info("checking brokers %s", sorted(owned))
        self.owned = owned
        return owned

    def _alive(self, cid: str) -> bool:
        """A peer checker answers STATUS with this id on the address in its id (ids without one
        count as alive; a restarted instance on the same port has a new id)."""
        if not cid.startswith("txn@") or "#" not in cid:
            return True
        try:
            env = self.client.transport.call(cid[4:cid.index("#")], rq.Status(), timeout=0.5)
            return rq.StatusReply.decode(env.ext).status.get("client_id") == cid
        except QuiverError:   # no answer, or not a status (FieldError)
            return False

    # ---- the round --------------------------------------------------------------------

    def step(self) -> dict:
        """One round over every owned broker; returns the round's counts."""
        totals = collections.Counter()
        try:
            owned = self.rebalance()
        except QuiverError as exc:
            log.warning("rebalance failed: %s", exc)
            owned = self.owned
        for broker, addr in sorted(owned.items()):
            try:
                totals.update(self.check_broker(broker, addr))
            except QuiverError as exc:
                log.warning("check round on %s failed: %s", broker, exc)
                self.brokers.pop(broker, None)  # resume from committed offsets
        self.counters["rounds"] += 1
        self.counters.update(totals)
        return dict(totals)

    def check_broker(self, broker: str, addr: str) -> collections.Counter:
        st = self.brokers.get(broker)
        if st is None:
            st = self.brokers[broker] = _BrokerState()
            st.half = self._start_offset(addr, HALF_TOPIC)
            st.op = self._start_offset(addr, OP_HALF_TOPIC)
        counts = collections.Counter()
        self._read_ops(addr, st)
        began = time.monotonic()
        deadline = began + self.config.round_budget_ms / 1000
        max_off = self._offset(addr, rq.GetMaxOffset(topic=HALF_TOPIC, queue_id=0))
        if st.half > max_off:
            # the queue went back (its store was replaced): walking on from our offset would wait forever
            log.warning("half queue of %s ends at %d, before our offset %d: starting again from its min",
                        broker, max_off, st.half)
            st.half = self._offset(addr, rq.GetMinOffset(topic=HALF_TOPIC, queue_id=0))
        off, batch, stop = st.half, [], False
        while off < max_off and not stop and time.monotonic() < deadline:
            msgs, nxt = self._pull(addr, HALF_TOPIC, off, min(self.config.pull_batch, max_off - off))
            if msgs is None:
                off = nxt
                continue
            if not msgs:
                break
            now = int(time.time() * 1000)
            for m in msgs:
                if m.queue_offset >= max_off:
                    stop = True
                    break
                action = self._decide(m, st, now)
                if action is None:
                    stop = True
                    break
                if action != SKIP:
                    batch.append(((m.commit_log_offset, m.queue_offset, action), m.properties.get(TRANSACTION_ID, "")))
                off = m.queue_offset + 1
                if len(batch) >= self.config.check_batch:
                    self._send_checks(addr, st, batch, counts)
                    batch = []
            else:
                off = max(off, nxt)
        self._send_checks(addr, st, batch, counts)
        st.half = off
        st.behind = max(0, max_off - off)
        self._commit(addr, HALF_TOPIC, st.half)
        self._commit(addr, OP_HALF_TOPIC, st.op)
        return counts

    def _decide(self, m, st: _BrokerState, now: int) -> str | None:
        """The TRANSACTION_CHECK action for `m`, SKIP, or None (stop: the rest is younger).
        Never raises: a malformed property is counted, logged, and its default used."""
        props = m.properties
        txid = props.get(TRANSACTION_ID, "")
        if txid in st.resolved:
            return SKIP

        def bad(remark: str) -> None:
            self.counters["bad_system_properties"] += 1
            log.warning("half message %a at offset %d: %s; its default is used", txid, m.queue_offset, remark)
        checks = read_int(props, CHECK_TIMES, 0, bad)
        # a half cannot be born after it was stored: a future TRAN_BORN_MS would stop every round here
        born = min(read_int(props, BORN_MS, m.born_timestamp, bad), m.store_timestamp)
        immune_s = read_int(props, CHECK_IMMUNITY, 0, bad)
        if checks >= self.config.max_checks:
            return rq.CHECK_DISCARD
        if now - born < max(self.config.transaction_timeout_ms, immune_s * 1000):
            return rq.CHECK_REQUEUE if immune_s else None
        return rq.CHECK_ASK

    def _send_checks(self, addr: str, st: _BrokerState, batch: list, counts) -> None:
        """`batch`: ((half phys, half qoff, action), transaction id) per half message."""
        if not batch:
            return
        env = self.client.call_broker(addr, rq.TransactionCheck(entries=[e for e, _ in batch]), timeout=10.0)
        for (_, txid), result in zip(batch, rq.TransactionCheckReply.decode(env.ext).results):
            counts[result] += 1
            if result in ("resolved", "discarded"):
                st.resolve(txid)

    # ---- SDK calls ---------------------------------------------------------------------

    def _offset(self, addr: str, req) -> int:
        """The offset a broker answers `req` with (GET_MAX_OFFSET, GET_MIN_OFFSET, QUERY_CONSUMER_OFFSET)."""
        return rq.OffsetReply.decode(self.client.call_broker(addr, req).ext).offset

    def _start_offset(self, addr: str, topic: str) -> int:
        try:
            return self._offset(addr, rq.QueryConsumerOffset(group=self.config.group, topic=topic, queue_id=0))
        except QueryNotFoundError:
            pass
        except QuiverError as exc:
            if getattr(exc, "code", None) != ResponseCode.TOPIC_NOT_EXIST:
                raise
            return 0
        return self._offset(addr, rq.GetMinOffset(topic=topic, queue_id=0))

    def _pull(self, addr: str, topic: str, off: int, n: int):
        """(messages, next offset), or (None, next offset) when the queue has nothing there."""
        req = queue_puller.request(topic, 0, off, group=self.config.group, max_msgs=max(1, n))
        # FieldError (a QuiverError) for a garbled answer: the round on this broker stops
        pulled = queue_puller.fetch(self.client, addr, req, timeout=10.0)
        if pulled.status is queue_puller.OFFSET_ILLEGAL and pulled.next != off:
            log.info("%s offset %d moved to %d on %s", topic, off, pulled.next, addr)
            return None, pulled.next
        if pulled.status is not queue_puller.FOUND:
            return [], off
        return pulled.messages(""), pulled.next

    def _read_ops(self, addr: str, st: _BrokerState) -> None:
        try:
            max_off = self._offset(addr, rq.GetMaxOffset(topic=OP_HALF_TOPIC, queue_id=0))
        except QuiverError as exc:
            if getattr(exc, "code", None) == ResponseCode.TOPIC_NOT_EXIST:
                return
            raise
        if st.op > max_off:
            st.op = self._offset(addr, rq.GetMinOffset(topic=OP_HALF_TOPIC, queue_id=0))
        while st.op < max_off:
            msgs, nxt = self._pull(addr, OP_HALF_TOPIC, st.op, self.config.pull_batch)
            if msgs is None:
                st.op = nxt
                continue
            if not msgs:
                break
            for m in msgs:
                txid = m.properties.get(TRANSACTION_ID)
                if txid:
                    st.resolve(txid)
            st.op = max(nxt, msgs[-1].queue_offset + 1)
            self.counters["ops_read"] += len(msgs)

    def _commit(self, addr: str, topic: str, off: int | None) -> None:
        if off is None:
            return
        try:
            self.client.call_broker(addr, rq.UpdateConsumerOffset(group=self.config.group, topic=topic, queue_id=0,
                                                                  offset=off))
        except QuiverError as exc:
            if getattr(exc, "code", None) != ResponseCode.TOPIC_NOT_EXIST:
                raise
