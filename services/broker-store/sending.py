"""The send path: validate a single or batch send, park delayed messages, put, reply.

A request (`quiver.requests.SendMessage`, decoded and ranged before it gets
here) carries one body per message, packed in one frame for a batch, and the
per-message flag and properties as compact arrays. The whole batch
is one put (one write, one CRC pass per body, one ConsumeQueue run). With
SYNC flush the reply waits for the group commit that covers the batch's end
offset; past the deadline it answers FLUSH_DISK_TIMEOUT (the data is stored).
A SYNC_MASTER then waits for a slave's ack of that offset (ha_master.py):
FLUSH_SLAVE_TIMEOUT or SLAVE_NOT_AVAILABLE, the data still stored.
"""

import logging
import time
from collections import deque

from quiver import record
from quiver.codes import ResponseCode
from quiver.errors import InvalidParameterError, MessageIllegalError, ServiceNotAvailableError
from quiver.message import DELAY, REAL_QID, REAL_TOPIC, TIMER_DELIVER_MS
from quiver.record import get_property as get_props_value
from quiver.requests import SendMessage
from quiver.system_properties import check_put
from quiver.validation import SCHEDULE_TOPIC, TIMER_TOPIC, check_topic

log = logging.getLogger(__name__)

_DELAY_AT = DELAY + "\x01"
_TIMER_AT = TIMER_DELIVER_MS + "\x01"


class Sender:
    def __init__(self, app):
        self.app = app
        self.config = app.config
        self.store = app.store
        self.levels_ms = app.config.delay_levels_ms
        self.sync = app.config.flush == "sync"
        self.timeout_s = app.config.sync_flush_timeout_ms / 1000
        self.waiting: deque = deque()  # (end_offset, deadline, req, ext, topic, qid), in offset order
        self.max_bytes = app.config.max_message_bytes
        self.sync_master = app.config.ha_role == "SYNC_MASTER"

    # ---- request -------------------------------------------------------------

    def handle(self, req, batch: bool) -> None:
        a = req.args
        topic = a.topic
        check_topic(topic, for_send=True)
        flags, props = a.metas
        bodies = a.bodies(req.env.bodies)
        if not batch and len(bodies) != 1:
            raise InvalidParameterError("SEND_MESSAGE carries exactly one message; use SEND_BATCH_MESSAGE")
        # list-wise checks (C-level map/min/max): this runs for every message of every batch
        lens = list(map(len, bodies))
        if min(lens) == 0:
            raise MessageIllegalError("body is empty: a message needs at least one byte")
        if max(lens) > self.max_bytes:
            raise MessageIllegalError(f"body is {max(lens)} bytes; the limit is {self.max_bytes} (max_message_bytes)")
        check_put(props)  # properties with system meaning (DELAY, REAL_TOPIC ...): MESSAGE_ILLEGAL if out of range
        if batch and sum(lens) > self.max_bytes:
            raise MessageIllegalError(f"batch is {sum(lens)} bytes; the limit is {self.max_bytes}: split it")
        conf = self.app.topic_config(topic, create=True)
        queue_id = a.queue_id
        if queue_id >= conf["write"]:
            raise InvalidParameterError(
                f"queue {queue_id!r} is not a write queue of {topic!r} (it has {conf['write']})")
        if not conf["perm"] & 2:
            raise ServiceNotAvailableError(f"topic {topic!r} is not writable on this broker")
        sys_flag = a.sys_flag
        if sys_flag & record.TX_MASK:  # a half message: transaction.py decides where it is stored
            topic, queue_id, props, sys_flag = self.app.transactions.prepare(topic, queue_id, props, sys_flag, batch)
        joined = "\x02".join(props)
        if _DELAY_AT in joined or _TIMER_AT in joined:  # two C-level scans, no per-message parse
            if batch and len(bodies) > 1:
                raise MessageIllegalError("a batch cannot carry a delay or delivery time: send delayed messages one by one")
            topic, queue_id, parked = self._park(topic, queue_id, props[0], get_props_value(props[0], DELAY),
                                                 get_props_value(props[0], TIMER_DELIVER_MS))
            props = [parked]  # _park returns one properties string
        self._put(req, topic, queue_id, bodies, props, flags, sys_flag, a)

    def _park(self, topic, queue_id, prop, delay, deliver_at):
        """Move a delayed message to its schedule topic, keeping where it belongs."""
        extra = f"{REAL_TOPIC}\x01{topic}\x02{REAL_QID}\x01{queue_id}\x02"
        if delay:
            try:
                level = int(delay)
            except ValueError:
                raise MessageIllegalError(f"DELAY must be a level number, got {delay!r}") from None
            if level <= 0:
                return topic, queue_id, prop
            level = min(level, len(self.levels_ms))  # clamped like RocketMQ
            self.app.topic_config(SCHEDULE_TOPIC, create=True, system=True, queues=len(self.levels_ms))
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
        self.app.topic_config(TIMER_TOPIC, create=True, system=True, queues=1)
        return TIMER_TOPIC, 0, prop + extra

    def _put(self, req, topic, queue_id, bodies, props, flags, sys_flag, a: SendMessage) -> None:
        """Store and answer; `a` gives born time and host, reconsume count, prepared offset, wait."""
        born_ts = a.born_ts or int(time.time() * 1000)
        try:
            res = self.store.put_batch(topic, queue_id, bodies, props, flags, sys_flag, born_ts,
                                       self.app.born_host(a.born_host), a.reconsume, a.prepared_offset)
        except ValueError as exc:  # a record larger than a CommitLog segment
            raise MessageIllegalError(f"message does not fit a CommitLog segment: {exc}") from None
        if res.status.name == "DISK_FULL":
            raise ServiceNotAvailableError("broker disk is full (over 90 % used): writes refused until space is freed")
        self.app.counters["put_messages"] += len(bodies)
        out = {"t": topic, "q": queue_id, "o": res.first_queue_offset, "p": res.phys_offsets}
        ha = self.app.ha
        if ha is not None:
            ha.note_put(res.end_offset)
        if self.sync:
            # visible to consumers (and, with WAIT, answered) only once flushed
            if not a.wait:
                req.reply(ResponseCode.SUCCESS, "", out)
                req = None
            self.waiting.append((res.end_offset, time.monotonic() + self.timeout_s, req, out, topic, queue_id))
            self.store.request_flush(res.end_offset)
            return
        if self.sync_master and a.wait:
            ha.wait_for_slave(res.end_offset, req, out)  # SYNC_MASTER: SEND_OK once a slave has it
        else:
            req.reply(ResponseCode.SUCCESS, "", out)
        self.app.puller.notify(topic, queue_id)

    # ---- group commit completion (service thread) ---------------------------------

    def on_flushed(self, offset: int) -> None:
        touched = set()
        w = self.waiting
        while w and w[0][0] <= offset:
            end, _, req, out, topic, qid = w.popleft()
            if req is not None and not req.answered:
                if self.sync_master:  # flushed; SYNC_MASTER also needs a slave's ack
                    self.app.ha.wait_for_slave(end, req, out)
                else:
                    req.reply(ResponseCode.SUCCESS, "", out)
            touched.add((topic, qid))
        for topic, qid in touched:
            self.app.puller.notify(topic, qid)

    def expire_step(self) -> None:
        now = time.monotonic()
        w = self.waiting
        for entry in w:
            if entry[1] > now:
                break  # deadlines grow with the offsets
            _, _, req, out, _, _ = entry
            if req is None or req.answered:
                continue
            req.reply(ResponseCode.FLUSH_DISK_TIMEOUT,
                      f"stored but not flushed within {self.config.sync_flush_timeout_ms} ms", out)
