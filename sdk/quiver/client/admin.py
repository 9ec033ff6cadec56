"""Admin: topics, routes, cluster info, message lookups, offsets, group progress, dead letters. Needs no start()."""

import dataclasses
import logging
import time
from dataclasses import dataclass
from typing import Any, cast

from quiver.client import queue_puller
from quiver.wire import trace as msg_trace
from quiver.wire import record
from quiver.wire import requests as rq
from quiver.client.acl_admin import AclCommands
from quiver.client.admin_types import ConsumerStats, HaRow, ProgressRow, TraceEvent
from quiver.client.admin_inspect import InspectCommands
from quiver.client.base import ClientBase, MessageQueue
from quiver.wire.codes import ResponseCode
from quiver.errors import ClientError, QueryNotFoundError, QuiverError, TopicNotExistError
from quiver.client.message import Message, MessageExt, SendResult
from quiver.wire.ids import parse_offset_msg_id
from quiver.wire.properties import BROKER_WRITTEN, DLQ_ORIGIN_MESSAGE_ID, DLQ_ORIGIN_TOPIC, RESERVED_PROPERTIES
from quiver.wire.curve import Credentials
from quiver.wire.protocol import Envelope
from quiver.wire.validation import DLQ_PREFIX, check_group, check_topic

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OffsetReset:
    """What `Admin.reset_offset` did: the offset stored for each queue, and how many online
    members of the group its brokers told (each member heartbeats to every broker: the most any
    broker told). `online` False: nobody was consuming, the group resumes from these offsets
    at its next start."""
    offsets: dict[MessageQueue, int]
    members: int

    @property
    def online(self) -> bool:
        return self.members > 0


class Admin(InspectCommands, AclCommands, ClientBase):
    """Cluster administration, RocketMQ's mqadmin as calls: topics, routes, message lookups,
    offsets, consumer groups, dead letters, transactions, broker status and the ACL. Started
    on construction (no start() needed); `timeout` is each request's, in seconds; `namesrv` and
    `credentials` as for Producer. Errors are the server's (quiver.errors), e.g.
    TopicNotExistError, QueryNotFoundError, NoPermissionError; ClientError when nothing answers.

        admin = Admin(namesrv="127.0.0.1:9876")
        admin.create_topic("Orders", queues=8)
        for row in admin.consumer_progress("cg"):
            print(row["topic"], row["queue_id"], row["lag"])
        admin.shutdown()
    """

    def __init__(self, namesrv: str | list[str] | None = None, timeout: float = 5.0,
                 credentials: str | Credentials | None = None) -> None:
        super().__init__(namesrv, timeout, credentials)
        self._store_hosts: dict[str, str] = {}  # store host -> advertised address (see _by_store_host)
        self.start()

    # ---- topics ---------------------------------------------------------------------

    def create_topic(self, topic: str, queues: int = 4, perm: int = 6, order: bool = False,
                     brokers: list[str] | None = None, wait_s: float = 5.0, *, write_queues: int | None = None,
                     force: bool = False, compact: bool | None = None) -> dict[str, Any]:
        """Create (or update) a topic on every broker, or on the named ones: `queues` read queues
        and `write_queues` (default as many) write queues.

        Lowering the read queues of a topic whose removed queues hold messages some group has
        not consumed raises IllegalOperationError naming them, unless `force`: lower the write
        queues first and the read queues once the backlog drained (`shrink_topic`).
        `compact=True` makes it a compacted topic (the latest message of each key is kept;
        `compact_topic`), False an ordinary one; None leaves an existing topic as it is.
        Returns once every name server routes it (up to `wait_s`), so a producer or
        consumer started right after sees the topic.
        """
        check_topic(topic, for_create=True)
        addrs = self._all_broker_addrs()
        if brokers:
            missing = set(brokers) - set(addrs)
            if missing:
                raise ClientError(f"unknown brokers: {sorted(missing)}")
            addrs = {b: addrs[b] for b in brokers}
        if not addrs:
            raise ClientError("no broker is registered with the name servers")
        write = queues if write_queues is None else write_queues
        req = rq.CreateTopic(topic=topic, read=queues, write=write, perm=perm, order=order, force=force,
                             compact=compact)
        out = {name: dataclasses.asdict(rq.TopicConfigReply.decode(self._call_broker(addr, req).ext).config)
               for name, addr in addrs.items()}
        self._routes.pop(topic, None)
        if wait_s > 0:
            self._wait_routed(topic, set(addrs), write, wait_s)
        return out

    def _wait_routed(self, topic: str, brokers: set[str], queues: int, wait_s: float) -> None:
        """Brokers re-register asynchronously: wait until every name server routes the topic."""
        deadline = time.monotonic() + wait_s
        pending = list(self.namesrvs)
        while pending:
            addr = pending[0]
            try:
                env = self._io().call(addr, rq.GetRouteInfo(topic=topic), timeout=1.0)
                routed = {q.broker_name for q in rq.RouteReply.decode(env.ext).route.queues if q.write == queues}
                if brokers <= routed:
                    pending.pop(0)
                    continue
            except QuiverError:
                pass
            if time.monotonic() > deadline:
                log.warning("topic %s is not yet routed by name server %s", topic, addr)
                pending.pop(0)
                continue
            time.sleep(0.02)

    def delete_topic(self, topic: str) -> None:
        """Delete `topic` on every broker (config, queues, offsets); a broker without it is skipped."""
        for name, addr in self._all_broker_addrs().items():
            try:
                self._call_broker(addr, rq.DeleteTopic(topic=topic))
            except QuiverError as exc:
                if getattr(exc, "code", None) != ResponseCode.TOPIC_NOT_EXIST:
                    raise
        self._routes.pop(topic, None)

    def compact_topic(self, topic: str, timeout: float = 600.0) -> dict[str, dict[str, int]]:
        """Run a compaction pass over a compacted topic on every broker that has it, now; returns
        per broker name the queues compacted and the records read and kept."""
        out: dict[str, dict[str, int]] = {}
        for name, addr in self._all_broker_addrs().items():
            try:
                env = self._call_broker(addr, rq.CompactTopic(topic=topic), timeout=timeout)
            except QuiverError as exc:
                if getattr(exc, "code", None) != ResponseCode.TOPIC_NOT_EXIST:
                    raise
                continue
            out[name] = dataclasses.asdict(rq.CompactTopicReply.decode(env.ext))
        if not out:
            raise QueryNotFoundError(f"no broker has topic {topic!r}")
        return out

    def topic_route(self, topic: str) -> dict[str, Any]:
        """The name server's route as it sent it (for people; clients use the parsed route)."""
        route: dict[str, Any] = self._call_namesrv(rq.GetRouteInfo(topic=topic))["route"]
        return route

    def cluster_info(self) -> dict[str, Any]:
        """The name server's cluster info: brokers (name -> cluster, addrs by id), clusters, live
        brokers; an address that is not host:port is left out."""
        return self._cluster_info()

    def topic_list(self) -> list[str]:
        """Every topic the name servers route."""
        return rq.TopicListReply.decode(self._call_namesrv(rq.GetTopicList())).topics

    def queues(self, topic: str) -> list[MessageQueue]:
        """`topic`'s readable queues, from a fresh route (TopicNotExistError if there is none)."""
        return self._route(topic, refresh=True).read_queues

    # ---- messages ---------------------------------------------------------------------

    def query_by_key(self, topic: str, key: str, max_num: int = 32, begin_ms: int = 0,
                     end_ms: int = 2 ** 62) -> list[MessageExt]:
        """Messages of `topic` with key (or unique id) `key` stored in [begin_ms, end_ms], oldest
        first, at most `max_num` (every broker's index is asked)."""
        out: list[MessageExt] = []
        route = self._route(topic, refresh=True)
        for broker, addr in sorted(route.addrs.items()):
            if addr is None:
                raise ClientError(f"broker {broker!r} of topic {topic!r} has no address")
            try:
                env = self._call_broker(addr, rq.QueryMessage(topic=topic, key=key, max_msgs=max_num,
                                                             begin_ts=begin_ms, end_ts=end_ms))
            except QueryNotFoundError:
                continue
            out.extend(MessageExt.from_record(record.decode_at(b), broker) for b in env.bodies)
        out.sort(key=lambda m: m.store_timestamp)
        return out[:max_num]

    def trace(self, msg_id: str, max_records: int = 256) -> list[TraceEvent]:
        """The message's trace timeline, oldest first: one dict per event and message with at least
        type (Pub, SubBefore, SubAfter, EndTransaction, Delayed, Retry, DLQ), time_ms, cost_ms
        (or None), status, topic, broker, group, client, msg_id, keys, tags, queue_id,
        queue_offset, plus the type's extras (quiver.wire.trace). Asks every broker for the
        trace messages keyed by `msg_id` (IndexFile); [] when nothing traced it. With auth on the
        trace topic is a system topic: a SUPER user's key reads it."""
        rows: list[dict[str, Any]] = []
        for broker, addr in sorted(self._all_broker_addrs().items()):
            req = rq.QueryMessage(topic=msg_trace.TRACE_TOPIC, key=msg_id, max_msgs=max_records)
            try:
                env = self._call_broker(addr, req)
            except (QueryNotFoundError, TopicNotExistError):
                continue
            for raw in env.bodies:
                try:
                    rows.extend(msg_trace.decode(record.decode_at(raw).body))
                except (msg_trace.TraceFormatError, record.BadRecord) as exc:  # anyone may write the topic
                    log.warning("trace record on %s skipped: %s", broker, exc)
        return cast(list[TraceEvent], msg_trace.timeline(rows, msg_id))

    def view_message(self, msg_id: str, topic: str | None = None) -> MessageExt:
        """By offset msgId (broker address + commitlog offset), or by unique id within `topic`."""
        brokers = self._all_broker_addrs()
        try:
            addr, offset = parse_offset_msg_id(msg_id)
        except ValueError:
            addr, offset = None, None
        by_addr = {a: n for n, a in brokers.items()}
        if addr is not None and addr not in by_addr:
            if self._store_hosts.get(addr) not in by_addr:   # unknown, or that broker is gone: ask again
                self._store_hosts = self._by_store_host(brokers)
            addr = self._store_hosts.get(addr, addr)
        if addr in by_addr:
            env = self._call_broker(addr, rq.ViewMessage(offset=offset))
            return MessageExt.from_record(record.decode_at(env.bodies[0]), by_addr[addr])
        if topic is None:
            raise ClientError(f"{msg_id!r} is not an offset msgId of a live broker: pass the topic to look up a unique id")
        for m in self.query_by_key(topic, msg_id):
            if m.msg_id == msg_id:
                return m
        raise QueryNotFoundError(f"no message {msg_id!r} in topic {topic!r}")

    def _by_store_host(self, brokers: dict[str, str]) -> dict[str, str]:
        """Store host (the ip:port an offset msgId carries) -> advertised address, from each
        broker's STATUS: under compose a broker advertises a hostname but stores its IPv4."""
        out: dict[str, str] = {}
        for addr in brokers.values():
            try:
                host = self.status(addr).get("store_host")
            except QuiverError:
                continue
            if isinstance(host, str):
                out[host] = addr
        return out

    # ---- offsets -------------------------------------------------------------------------

    def _queue_call(self, mq: MessageQueue, kind: type[rq.Schema], **fields: Any) -> Envelope:
        """A request about one queue (`kind` is its schema) to the queue's broker."""
        addr = self._broker_addr(mq.broker, mq.topic)
        return self._call_broker(addr, kind(topic=mq.topic, queue_id=mq.queue_id, **fields))

    def _offset(self, mq: MessageQueue, kind: type[rq.Schema], **fields: Any) -> int:
        return rq.OffsetReply.decode(self._queue_call(mq, kind, **fields).ext).offset

    def max_offset(self, mq: MessageQueue) -> int:
        """The queue's next offset to be written (its message count so far)."""
        return self._offset(mq, rq.GetMaxOffset)

    def min_offset(self, mq: MessageQueue, local: bool = False, compacted: bool = False) -> int:
        """The queue's first offset still stored; `local`: the first one on the broker's own disk
        (above the range its tiered store serves; the same when it has none); `compacted`: the
        first one its compaction has not covered (below it, a compacted topic's queue keeps the
        latest message of each key; the same when nothing was compacted)."""
        if compacted:
            return self._offset(mq, rq.GetMinOffset, compacted=True)
        return self._offset(mq, rq.GetMinOffset, local=local) if local else self._offset(mq, rq.GetMinOffset)

    def search_offset(self, mq: MessageQueue, ts_ms: int) -> int:
        """The queue's first offset stored at or after `ts_ms` (epoch ms)."""
        return self._offset(mq, rq.SearchOffsetByTimestamp, timestamp=ts_ms)

    def consumer_offset(self, group: str, mq: MessageQueue) -> int | None:
        """`group`'s committed offset of the queue, None if it has committed none."""
        try:
            return self._offset(mq, rq.QueryConsumerOffset, group=group)
        except QueryNotFoundError:
            return None

    def reset_offset(self, group: str, topic: str, ts_ms: int | None = None, *,
                     offset: int | None = None) -> OffsetReset:
        """Move a group's offsets on every queue of `topic` to the first message stored at or
        after `ts_ms`, or to `offset` (held to each queue's min and max), RocketMQ's
        resetOffset (INVOKE_BROKER_TO_RESET_OFFSET): each broker stores them and tells the
        group's online members, which drop what they cached of those queues and consume
        again from there. A stopped group needs no force: it starts from them next time."""
        if (ts_ms is None) == (offset is None):
            raise ClientError("reset_offset needs a timestamp (ts_ms) or an offset, exactly one of them")
        check_group(group)
        route = self._route(topic, refresh=True)
        req = rq.ResetOffset(group=group, topic=topic, timestamp=ts_ms, offset=offset)
        offsets: dict[MessageQueue, int] = {}
        members = 0
        for broker in sorted({mq.broker for mq in route.read_queues}):
            reply = rq.ResetOffsetReply.decode(self._call_broker(route.addr(broker), req).ext)
            offsets.update({MessageQueue(topic, broker, q): off for q, off in reply.offsets})
            members = max(members, reply.members)
        return OffsetReset(dict(sorted(offsets.items())), members)

    def consumer_stats(self, group: str) -> ConsumerStats:
        """Every broker's view of a group: rows per queue, members, subscription conflicts."""
        rows: list[ProgressRow] = []
        clients: set[str] = set()
        conflicts: dict[str, dict[str, list[str]]] = {}
        for broker, addr in sorted(self._all_broker_addrs().items()):
            stats = rq.ConsumeStatsReply.decode(self._call_broker(addr, rq.GetConsumeStats(group=group)).ext)
            rows.extend(cast(ProgressRow, {"broker": broker, **dataclasses.asdict(r)}) for r in stats.rows)
            clients.update(stats.clients)
            for topic, exprs in stats.conflicts.items():
                for expr, cids in exprs.items():
                    merged = conflicts.setdefault(topic, {}).setdefault(expr, [])
                    merged.extend(c for c in cids if c not in merged)
        rows.sort(key=lambda r: (r["topic"], r["broker"], r["queue_id"]))
        return {"rows": rows, "clients": sorted(clients), "conflicts": conflicts}

    def consumer_progress(self, group: str, topics: list[str] | None = None) -> list[ProgressRow]:
        """Per queue: broker offset, consumer offset, lag, last consume time (store ms), owning client id."""
        rows = self.consumer_stats(group)["rows"]
        if topics:
            rows = [r for r in rows if r["topic"] in topics]
        return rows

    def subscription_conflicts(self, group: str) -> dict[str, Any]:
        """topic -> {"TAG:expr": [client ids]} where members of `group` subscribe differently."""
        conflicts: dict[str, Any] = self.consumer_stats(group)["conflicts"]
        return conflicts

    def set_group_config(self, group: str, retry_max_times: int = 16) -> None:
        """Subscription group config on every broker (max reconsume times before the DLQ)."""
        for addr in self._all_broker_addrs().values():
            self._call_broker(addr, rq.UpdateSubscriptionGroup(group=group, retry_max_times=retry_max_times))

    # ---- dead letters ------------------------------------------------------------------------

    def dlq_messages(self, group: str, max_num: int = 64) -> list[MessageExt]:
        """Messages in `%DLQ%<group>` (every broker), oldest first."""
        topic = f"{DLQ_PREFIX}{group}"
        out: list[MessageExt] = []
        try:
            route = self._route(topic, refresh=True)
        except TopicNotExistError:
            return []
        for mq in route.read_queues:
            addr = route.addr(mq.broker)
            off = self.min_offset(mq)
            while len(out) < max_num:
                want = min(32, max_num - len(out))
                req = queue_puller.request(topic, mq.queue_id, off, max_msgs=want)
                pulled = queue_puller.fetch(self._brokers, addr, req)
                if pulled.status is not queue_puller.FOUND:
                    break
                out.extend(pulled.messages(mq.broker))
                off = pulled.next
        out.sort(key=lambda m: m.store_timestamp)
        return out[:max_num]

    def resend_dlq(self, group: str, msg_ids: list[str] | None = None) -> list[SendResult]:
        """Send chosen dead letters (by msg id or origin msg id; all when None) back to their original topic:
        the DLQ_ORIGIN_TOPIC the broker recorded (a letter without one is skipped and logged)."""
        from quiver.client.producer import Producer
        chosen = [m for m in self.dlq_messages(group, max_num=1 << 20)
                  if msg_ids is None or m.msg_id in msg_ids or m.properties.get(DLQ_ORIGIN_MESSAGE_ID) in msg_ids]
        if not chosen:
            return []
        results: list[SendResult] = []
        p = Producer("QUIVER_DLQ_RESEND", namesrv=";".join(self.namesrvs), credentials=self.credentials)
        p._transport_factory = self._transport_factory   # the admin's network (quiver.testing's too)
        with p:
            for m in chosen:
                # the topic the broker recorded when it dead-lettered (clients cannot send this
                # property): never one the message's sender chose, as this writes with our rights
                topic = m.properties.get(DLQ_ORIGIN_TOPIC)
                if not topic:   # put there by a send, not by the broker: skipped, the others go on
                    log.warning("dead letter %s of %s has no %s recorded by the broker: not resent (read it with "
                                "quiver consumer dlq and send it yourself)", m.msg_id, group, DLQ_ORIGIN_TOPIC)
                    continue
                props = {k: v for k, v in m.properties.items()
                         if k not in RESERVED_PROPERTIES and k not in BROKER_WRITTEN and not k.startswith("DLQ_")}
                results.append(p.send(Message(topic, m.body, tags=m.tags, keys=m.keys or None, properties=props,
                                              flag=m.flag)))
        return results

    # ---- cluster ---------------------------------------------------------------------------

    def status(self, addr: str) -> dict[str, Any]:
        """The STATUS map of the service at `addr` (a broker: store, groups, config, HA ...)."""
        return rq.StatusReply.decode(self._call_broker(addr, rq.Status()).ext).status

    def scheduler_addrs(self, group: str = "SCHEDULE_CONSUMER") -> list[str]:
        """Addresses of the live schedulers (their client ids, listed by the brokers, name them)."""
        ids: set[str] = set()
        for addr in self._all_broker_addrs().values():
            ids.update(rq.ConsumerListReply.decode(self._call_broker(addr, rq.GetConsumerList(group=group)).ext).ids)
        return sorted({p[1] for p in (i.split("|") for i in ids) if len(p) >= 3 and p[0] == "scheduler"})

    def scheduler_status(self, group: str = "SCHEDULE_CONSUMER") -> dict[str, dict[str, Any]]:
        """STATUS of every scheduler: pending per level and timers, delivery lag p50/p99."""
        out: dict[str, dict[str, Any]] = {}
        for addr in self.scheduler_addrs(group):
            try:
                out[addr] = self.status(addr)
            except QuiverError as exc:
                out[addr] = {"error": str(exc)}
        return out

    def open_transactions(self, limit: int = 1000) -> dict[str, list[dict[str, Any]]]:
        """Per broker: open half messages (transaction_id, topic, group, age_ms, checks, ...), oldest first."""
        out: dict[str, list[dict[str, Any]]] = {}
        for name, addr in sorted(self._all_broker_addrs().items()):
            env = self._call_broker(addr, rq.TransactionListOpen(limit=limit))
            out[name] = rq.TransactionListReply.decode(env.ext).open
        return out

    def ha_status(self) -> list[HaRow]:
        """One row per broker address (master id 0, slaves >= 1): role, CommitLog max
        offset and, for a slave, its replication lag in bytes and ms as its master counts
        it (lag_ms: age of the oldest byte the slave has not acknowledged)."""
        rows: list[dict[str, Any]] = []
        for name, info in sorted(self._cluster_info()["brokers"].items()):
            by_addr: dict[str, dict[str, Any]] = {}
            for bid, addr in sorted(info["addrs"].items(), key=lambda kv: int(kv[0])):
                row: dict[str, Any] = {"broker": name, "id": int(bid), "addr": addr}
                try:
                    st = rq.StatusReply.decode(self._call_broker(addr, rq.Status(), timeout=2.0).ext).status
                except QuiverError as exc:
                    row["error"] = str(exc)
                    rows.append(row)
                    continue
                ha = st.get("ha") or {}
                row.update(role=st.get("ha_role", "?"), max_offset=st["store"]["max_phys_offset"],
                           lag_bytes=ha.get("lag_bytes"), lag_ms=None, ha=ha)
                by_addr[addr] = row
                rows.append(row)
            for master in [r for r in by_addr.values() if r["id"] == 0]:
                for link in master["ha"].get("slaves", []):
                    slave = by_addr.get(link["addr"])
                    if slave is not None:
                        slave.update(lag_bytes=link["lag_bytes"], lag_ms=link["lag_ms"],
                                     ack_latency=link.get("ack_latency"))
        return cast(list[HaRow], rows)

    def ping(self, addr: str, timeout: float = 1.0) -> dict[str, Any]:
        """PING the service at `addr`: its reply's ext. ClientError if it cannot be reached, or
        RequestTimeoutError when it does not answer within `timeout` seconds."""
        return self._call_broker(addr, rq.Ping(), timeout=timeout).ext

    def clean_expired(self, broker_addr: str) -> int:
        """Delete the broker's expired CommitLog segments now; how many were deleted."""
        return rq.CleanExpiredReply.decode(self._call_broker(broker_addr, rq.CleanExpired()).ext).deleted_segments

    def backup(self, broker: str, name: str, timeout: float = 600.0, url: str | None = None,
               endpoint: str | None = None) -> rq.BrokerBackupReply:
        """Snapshot a running broker (`broker`: its address, or a broker name whose master is
        taken) into `name` under its --backup-dir; returns where, and the CommitLog offset covered.
        With `url` (s3://BUCKET/PREFIX) the broker uploads it there (`endpoint`: default its
        --s3-endpoint) and keeps no copy."""
        addr = broker if ":" in broker else self._broker_addr(broker)
        req = rq.BrokerBackup(name=name, url=url, endpoint=endpoint)
        return rq.BrokerBackupReply.decode(self._call_broker(addr, req, timeout=timeout).ext)

    def messages_between(self, topic: str, begin_ms: int, end_ms: int, max_num: int = 32) -> list[MessageExt]:
        """Messages of `topic` stored in [begin_ms, end_ms), oldest first, at most `max_num`: each
        queue is read from its first offset stored at or after `begin_ms` (the web console's
        search by time)."""
        route = self._route(topic, refresh=True)
        out: list[MessageExt] = []
        for mq in route.read_queues:
            off, found = self.search_offset(mq, begin_ms), list[MessageExt]()
            while len(found) < max_num:
                req = queue_puller.request(topic, mq.queue_id, off, max_msgs=min(32, max_num))
                pulled = queue_puller.fetch(self._brokers, route.addr(mq.broker), req)
                batch = pulled.messages(mq.broker) if pulled.status is queue_puller.FOUND else []
                found.extend(m for m in batch if begin_ms <= m.store_timestamp < end_ms)
                if not batch or batch[-1].store_timestamp >= end_ms:
                    break
                off = pulled.next
            out.extend(found[:max_num])
        out.sort(key=lambda m: m.store_timestamp)
        return out[:max_num]
