"""The send path: validate a single or batch send, park delayed messages, put, reply.

A request (`quiver.wire.requests.SendMessage`, decoded and ranged before it gets
here) carries one body per message, packed in one frame for a batch, and the
per-message flag and properties as compact arrays. The whole batch
is one put (one write, one CRC pass per body, one ConsumeQueue run). With
SYNC flush the reply waits for the group commit that covers the batch's end
offset (group_commit.py); past the deadline it answers FLUSH_DISK_TIMEOUT (the
data is stored).
A SYNC_MASTER then waits for a slave's ack of that offset (ha_master.py):
FLUSH_SLAVE_TIMEOUT or SLAVE_NOT_AVAILABLE, the data still stored.
"""

import ipaddress
import logging
import struct
import time

from quiver.runtime.service import Answer, Direct
from quiver.wire import record
from quiver.wire.codes import RequestCode, ResponseCode
from quiver.errors import InvalidParameterError, MessageIllegalError, ProtocolError, ServiceNotAvailableError
from quiver.wire.names import NOT_ALLOWED_SEND, SCHEDULE_TOPIC, TIMER_TOPIC, TRACE_TOPIC, check_topic
from quiver.wire.requests import SendMessage
from quiver.wire.replies import SendReply
from quiver.wire.properties import (DELAY, KEYS, REAL_QID, REAL_TOPIC, TIMER_DELIVER_MS, check_client_put, check_put,
                                   mentions)
from quiver.wire.property_string import NAME_SEP, PROP_SEP, format_properties, get_property as get_props_value

from .status_codes import check_stored
from .tracing import trace_topic
from .traffic import Traffic

log = logging.getLogger(__name__)

_DELAY_AT = DELAY + NAME_SEP
_TIMER_AT = TIMER_DELIVER_MS + NAME_SEP
_LOOPBACK_HOST = b"\x7f\x00\x00\x01\x00\x00\x00\x00"


def born_host(addr: str | None) -> bytes:
    """A request's "host:port" born host (its schema checked the form) as 8 bytes.

    Only an IPv4 literal is packed as is: a hostname would cost a DNS lookup
    on the service thread and an IPv6 host does not fit, so both read as
    127.0.0.1 with their port; no born host reads as 127.0.0.1:0."""
    if not addr:
        return _LOOPBACK_HOST
    host, _, port = addr.rpartition(":")
    try:
        ip = ipaddress.IPv4Address(host).packed
    except ValueError:
        ip = _LOOPBACK_HOST[:4]
    try:
        return ip + struct.pack(">i", int(port))
    except (ValueError, struct.error):
        return _LOOPBACK_HOST


class Sender:
    """SEND_MESSAGE, SEND_MESSAGE_V2, SEND_BATCH_MESSAGE; `park` and `put` also serve retry.py.

    `prepare_half` is transaction.Transactions.prepare; `note_put` tells replication
    (ReplicationMaster.note_put, None on a slave); `wait_for_slave` is set on a SYNC_MASTER."""

    def __init__(self, config, store, topics, commit, counters, notify, prepare_half, note_put=None,
                 wait_for_slave=None, traffic=None):
        self.config = config
        self.store = store
        self.topics = topics
        self.commit = commit              # group_commit.GroupCommit
        self.counters = counters
        self.notify = notify              # puller.notify(topic, queue_id)
        self.prepare_half = prepare_half
        self.note_put = note_put
        self.wait_for_slave = wait_for_slave
        self.traffic = traffic if traffic is not None else Traffic()  # messages and bytes in: /metrics
        self.levels_ms = config.delay_levels_ms
        self.max_bytes = config.max_message_bytes

    def handlers(self) -> dict:
        one, batch = Direct(self.send, self.direct), Direct(self.send_batch, self.direct)
        return {RequestCode.SEND_MESSAGE: one, RequestCode.SEND_MESSAGE_V2: one, RequestCode.SEND_BATCH_MESSAGE: batch}

    # ---- request -------------------------------------------------------------

    def send(self, req) -> None:
        self.handle(req, batch=False)

    def send_batch(self, req) -> None:
        self.handle(req, batch=True)

    def handle(self, req, batch: bool) -> None:
        a = req.args
        topic = a.topic
        if topic in NOT_ALLOWED_SEND:  # the name itself was checked with the request's schema
            check_topic(topic, for_send=True)
        flags, props = a.metas
        bodies = a.bodies(req.env.bodies)
        if not batch and len(bodies) != 1:
            raise InvalidParameterError("SEND_MESSAGE carries exactly one message; use SEND_BATCH_MESSAGE")
        self._check_messages(bodies, props, batch, topic)
        queue_id = a.queue_id
        self._check_writable(topic, queue_id)
        sys_flag = a.sys_flag
        if sys_flag & record.TX_MASK:  # a half message: transaction.py decides where it is stored
            topic, queue_id, props, sys_flag = self.prepare_half(topic, queue_id, props, sys_flag, batch)
        joined = PROP_SEP.join(props)
        if _DELAY_AT in joined or _TIMER_AT in joined:  # two C-level scans, no per-message parse
            if batch and len(bodies) > 1:
                raise MessageIllegalError("a batch cannot carry a delay or delivery time: send delayed messages one by one")
            topic, queue_id, parked = self.park(topic, queue_id, props[0], get_props_value(props[0], DELAY),
                                                get_props_value(props[0], TIMER_DELIVER_MS))
            props = [parked]  # park returns one properties string
        return self.put(req, topic, queue_id, bodies, props, flags, sys_flag, a)

    def direct(self, service, identity: bytes, env) -> bool:
        """A plain send answered in one step, the `handle` path's steps inlined: False, before
        anything is stored or counted, for whatever is not plain (a malformed or refused request,
        a system, trace or unknown topic, a half message, properties with system meaning, an empty
        or oversized body, SYNC flush, a SYNC_MASTER's wait); `handle` then answers it."""
        if self.commit.sync or self.wait_for_slave is not None:
            return False
        try:
            a = SendMessage.decode(env.ext)
            bodies = a.bodies(env.bodies)
        except ProtocolError:
            return False
        topic, queue_id, sys_flag = a.topic, a.queue_id, a.sys_flag
        conf = self.topics.rows.get(topic)
        if (conf is None or topic in NOT_ALLOWED_SEND or topic == TRACE_TOPIC or sys_flag & record.TX_MASK
                or queue_id >= conf["write"] or not conf["perm"] & 2):
            return False
        n = len(bodies)
        if n != 1 and (n == 0 or env.code != RequestCode.SEND_BATCH_MESSAGE):
            return False
        lens = list(map(len, bodies))
        flags, props = a.metas
        joined = PROP_SEP.join(props)
        if min(lens) == 0 or sum(lens) > self.max_bytes or mentions(joined):
            return False
        try:
            check_client_put(joined)
        except MessageIllegalError:
            return False
        self.put(Answer(service, identity, env, a), topic, queue_id, bodies, props, flags, sys_flag, a)
        return True

    def _check_messages(self, bodies, props, batch: bool, topic: str) -> None:
        # list-wise checks (C-level map/min/max): this runs for every message of every batch
        lens = list(map(len, bodies))
        if min(lens) == 0:
            self._check_tombstones(topic, lens, props)
        if max(lens) > self.max_bytes:
            raise MessageIllegalError(f"body is {max(lens)} bytes; the limit is {self.max_bytes} (max_message_bytes)")
        check_put(props)  # properties with system meaning (DELAY, REAL_TOPIC ...): MESSAGE_ILLEGAL if out of range
        check_client_put(props)  # and none of those only the broker writes (where a re-put goes)
        if batch and sum(lens) > self.max_bytes:
            raise MessageIllegalError(f"batch is {sum(lens)} bytes; the limit is {self.max_bytes}: split it")

    def _check_tombstones(self, topic: str, lens: list[int], props: list[str]) -> None:
        """Empty bodies: tombstones of a compacted topic, each with keys; refused anywhere else."""
        if not self.topics.is_compacted(topic):
            raise MessageIllegalError(f"body is empty: a message needs at least one byte (an empty body is a "
                                      f"tombstone, only for a compacted topic; {topic!r} is not)")
        if any(n == 0 and get_props_value(p, KEYS) is None for n, p in zip(lens, props)):
            raise MessageIllegalError("an empty body (a tombstone) needs keys: the key it removes")

    def _check_writable(self, topic: str, queue_id: int) -> None:
        if topic not in self.topics.rows and self.store.disk.full:
            raise ServiceNotAvailableError(f"writes refused: {self.store.disk.remark}")  # not even the topic row
        conf = self.topics.config(topic, create=True) if topic != TRACE_TOPIC else trace_topic(self.topics)
        if queue_id >= conf["write"]:
            raise InvalidParameterError(
                f"queue {queue_id!r} is not a write queue of {topic!r} (it has {conf['write']})")
        if not conf["perm"] & 2:
            raise ServiceNotAvailableError(f"topic {topic!r} is not writable on this broker")

    def park(self, topic, queue_id, prop, delay, deliver_at):
        """Move a delayed message to its schedule topic, keeping where it belongs."""
        extra = format_properties(((REAL_TOPIC, topic), (REAL_QID, queue_id)))
        if delay:
            try:
                level = int(delay)
            except ValueError:
                raise MessageIllegalError(f"DELAY must be a level number, got {delay!r}") from None
            if level <= 0:
                return topic, queue_id, prop
            level = min(level, len(self.levels_ms))  # clamped like RocketMQ
            self.topics.config(SCHEDULE_TOPIC, create=True, system=True, queues=len(self.levels_ms))
            return SCHEDULE_TOPIC, level - 1, prop + extra
        try:
            due = int(deliver_at)
        except ValueError:
            raise MessageIllegalError(f"deliver time must be epoch ms, got {deliver_at!r}") from None
        now = int(time.time() * 1000)
        horizon = self.config.timer_horizon_ms
        if due - now > horizon:
            raise MessageIllegalError(
                f"delivery time is {(due - now) // 1000} s ahead; the limit is {horizon // 1000} s")
        if due <= now:
            return topic, queue_id, prop  # due already: a normal message
        self.topics.config(TIMER_TOPIC, create=True, system=True, queues=1)
        return TIMER_TOPIC, 0, prop + extra

    def put(self, req, topic, queue_id, bodies, props, flags, sys_flag, a: SendMessage):
        """Store and answer (the store's PutResult returned); `a` gives born time and host, reconsume
        count, prepared offset, wait."""
        born_ts = a.born_ts or int(time.time() * 1000)
        try:
            res = self.store.put_batch(topic, queue_id, bodies, props, flags, sys_flag, born_ts,
                                       born_host(a.born_host), a.reconsume, a.prepared_offset)
        except ValueError as exc:  # a record larger than a CommitLog segment
            raise MessageIllegalError(f"message does not fit a CommitLog segment: {exc}") from None
        check_stored(res, "writes")
        self.counters["put_messages"] += len(bodies)
        self.traffic.put(topic, bodies)
        out = SendReply.wire(topic, queue_id, res.first_queue_offset, res.phys_offsets)   # the hot path's form
        if self.note_put is not None:
            self.note_put(res.end_offset)
        if self.commit.sync:
            # visible to consumers (and, with WAIT, answered) only once flushed
            if not a.wait:
                req.reply(ResponseCode.SUCCESS, "", out)
            self.commit.wait(req if a.wait else None, out, [(topic, queue_id, res.end_offset)])
            return res
        if self.wait_for_slave is not None and a.wait:
            self.wait_for_slave(res.end_offset, req, out)  # SYNC_MASTER: SEND_OK once a slave has it
        else:
            req.reply(ResponseCode.SUCCESS, "", out)
        self.notify(topic, queue_id)
        return res
