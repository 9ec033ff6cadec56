"""TransactionProducer: half message, local transaction, END_TRANSACTION, check-backs.

`send_in_transaction(msg, execute, arg)` sends the message flagged as prepared
(TRAN_MSG, PGROUP, sys flag TX_PREPARED): the broker parks it in
RMQ_SYS_TRANS_HALF_TOPIC where no consumer sees it. Then `execute(msg, arg)`
runs the local transaction (an exception counts as UNKNOWN) and
END_TRANSACTION tells the broker COMMIT, ROLLBACK or UNKNOWN (one-way, like
RocketMQ: a lost answer is recovered by the txn-checker's check-back).

The producer heartbeats its group to every broker; a broker asks one live
producer of the group about an open transaction with CHECK_TRANSACTION_STATE
(a batch of messages), `checker(msg)` answers for each, and the answers go
back as one END_TRANSACTION marked as from a check. Checkers must answer from
durable local state: any producer of the group may be asked.

`transaction_id(msg)` gives the id inside `execute` (on the copy it receives)
and inside `checker` (the same id): key your local record by it.
"""

import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from quiver.wire import record
from quiver.wire import requests as rq
from quiver.wire.codes import RequestCode
from quiver.wire.protocol import Envelope
from quiver.client.base import MessageQueue
from quiver.errors import ClientError, FieldError, MessageIllegalError, QuiverError
from quiver.client.message import Message, MessageExt, SendResult, SendStatus, TransactionState
from quiver.wire.properties import (CHECK_IMMUNITY_TIME_IN_SECONDS as CHECK_IMMUNITY, KEYS, PGROUP, TAGS, TRANSACTION_ID,
                                    TRAN_MSG, UNIQ_KEY)
from quiver.wire.ids import host_bytes, offset_msg_id
from quiver.wire.property_string import format_properties
from quiver.client.producer import _STATUS, Producer

log = logging.getLogger(__name__)

# execute(msg, arg) runs the local transaction; checker(msg) answers a check-back from durable state
Execute = Callable[[Message, Any], TransactionState]
Checker = Callable[[MessageExt], TransactionState]
# a half message as END_TRANSACTION names it: (broker address, phys offset, queue offset)
Half = tuple[str, int, int]

_WIRE = {"COMMIT": record.TX_COMMIT, "ROLLBACK": record.TX_ROLLBACK, "UNKNOWN": record.TX_NOT}


def transaction_id(msg: Message | MessageExt) -> str | None:
    """The transaction id of the message `execute` or `checker` was given."""
    props = msg.properties or {}
    return props.get(TRANSACTION_ID) or props.get(UNIQ_KEY)


@dataclass(slots=True)
class TransactionSendResult(SendResult):
    local_state: object = None  # the TransactionState that was sent with END_TRANSACTION


class TransactionProducer(Producer):
    """A Producer that also sends transactional messages and answers check-backs. `checker(msg)`
    -> TransactionState answers a broker's check of an open transaction from durable local state
    (any producer of the group may be asked); other settings are Producer's.

        def execute(msg, order):
            db.insert_order(transaction_id(msg), order)      # the local transaction
            return TransactionState.COMMIT

        def check(msg):
            return TransactionState.COMMIT if db.has_order(transaction_id(msg)) else TransactionState.ROLLBACK

        with TransactionProducer("tpg", namesrv=ns, checker=check) as tp:
            r = tp.send_in_transaction(Message("Orders", b"o-1"), execute, arg=order)
    """

    def __init__(self, group: str, namesrv: str | list[str] | None = None, checker: Checker | None = None,
                 heartbeat_interval_s: float = 30.0, **kw: Any) -> None:
        super().__init__(group, namesrv, **kw)
        self.checker = checker
        self._heartbeat_interval_s = heartbeat_interval_s
        self._checks_answered = 0

    def _heartbeat_payload(self) -> rq.HeartBeat:
        """The producer group's heartbeat: brokers ask a live member of it about open transactions."""
        return rq.HeartBeat(client_id=self.client_id, producers=[self.group])

    # ---- send --------------------------------------------------------------------------

    def send_in_transaction(self, msg: Message, execute: Execute, arg: object = None,
                            check_immunity_ms: int | None = None,
                            timeout: float | None = None) -> TransactionSendResult:
        """Half message -> execute(msg, arg) -> END_TRANSACTION. Returns the half's SendResult with
        transaction_id and local_state set."""
        msg_id, props = self._half_properties(msg, execute, check_immunity_ms)
        t0 = time.monotonic()
        env, mq, addr = self._call_with_retry(msg.topic, [props], [msg.body], [msg.flag], RequestCode.SEND_MESSAGE,
                                              timeout, sys_flag=record.TX_PREPARED)
        res, half = self._half_sent(env, mq, addr, msg_id, props, t0)
        state = TransactionState.ROLLBACK  # not safely stored: RocketMQ rolls back
        if res.status is SendStatus.SEND_OK:
            try:
                state = execute(self._local_view(msg, msg_id), arg)
            except Exception:
                log.exception("local transaction %s failed: its state is UNKNOWN (the checker will ask)", msg_id)
                state = TransactionState.UNKNOWN
        return self._end_transaction(res, half, msg_id, state)

    # the steps of send_in_transaction, shared with quiver.aio (which awaits execute)

    def _half_properties(self, msg: Message, execute: object, check_immunity_ms: int | None) -> tuple[str, str]:
        """(msg id, properties) of the half message, after checking it can be one."""
        self._need_started()
        if isinstance(msg, (list, tuple)):
            raise MessageIllegalError("transactional messages cannot be batched: send them one by one")
        if msg.delay_level or msg.deliver_at is not None or msg.delay_ms is not None:
            raise MessageIllegalError("transactional messages cannot be delayed: drop delay_level / deliver_at / delay_ms")
        if execute is None:
            raise ClientError("send_in_transaction needs execute(msg, arg) -> TransactionState")
        msg_id, props = self._encode(msg)
        half: dict[str, Any] = {TRAN_MSG: "true", PGROUP: self.group}
        if check_immunity_ms is not None:
            half[CHECK_IMMUNITY] = max(1, round(check_immunity_ms / 1000))
        return msg_id, props + format_properties(half)

    def _half_sent(self, env: Envelope, mq: MessageQueue, addr: str, msg_id: str, props: str = "",
                  started: float | None = None) -> tuple[TransactionSendResult, Half]:
        """The half's SendResult and (broker address, phys offset, queue offset) from its reply;
        traced as a Pub of a half message (`props`, `started`: its properties, monotonic send time)."""
        sent = rq.SendReply.decode(env.ext)
        phys, qoff = sent.phys_offsets[0], sent.queue_offset
        res = TransactionSendResult(_STATUS[env.code], msg_id, mq.broker, mq.queue_id, qoff, mq.topic,
                                    self._store_host(addr), phys, msg_id)
        tracer = self.tracer
        if tracer is not None:
            tracer.pub([res], [props], started if started is not None else time.monotonic(), {"transaction": "half"})
        return res, (addr, phys, qoff)

    @staticmethod
    def _local_view(msg: Message, msg_id: str) -> Message:
        """The copy `execute` receives: it carries the transaction id (`transaction_id(view)`)."""
        return dataclasses.replace(msg, properties={**msg.properties, UNIQ_KEY: msg_id, TRANSACTION_ID: msg_id})

    def _end_transaction(self, res: TransactionSendResult, half: Half, msg_id: str,
                        state: object) -> TransactionSendResult:
        """END_TRANSACTION with the local state (anything but a TransactionState counts as UNKNOWN)."""
        if not isinstance(state, TransactionState):
            log.warning("execute returned %r, not a TransactionState: treated as UNKNOWN", state)
            state = TransactionState.UNKNOWN
        self._end(half[0], [(half[1], half[2], _WIRE[state.value], msg_id)], from_check=False)
        tracer = self.tracer
        if tracer is not None:
            tracer.end_transaction(res.topic, res.broker, [(msg_id, state.value)], from_check=False)
        res.local_state = state
        return res

    def _end(self, addr: str, entries: list[tuple[int, int, int, str]], from_check: bool) -> None:
        """`entries`: (half phys offset, half queue offset, TX_* state, transaction id) tuples."""
        req = rq.EndTransaction(group=self.group, entries=entries, from_check=from_check)

        def done(env: Envelope | Exception) -> None:
            if isinstance(env, Exception):
                log.info("END_TRANSACTION to %s not confirmed (%s): the checker will ask", addr, env)
            elif env.code != 0:
                log.warning("END_TRANSACTION refused by %s: %s", addr, env.remark)
        try:
            self._io().send(addr, req, None, (), done, self.send_timeout)
        except QuiverError as exc:
            log.info("END_TRANSACTION to %s not sent (%s): the checker will ask", addr, exc)

    # ---- check-backs (a worker thread of the transport) --------------------------------------

    def _on_check(self, addr: str, env: Envelope) -> None:
        from quiver.client.message import TransactionState
        try:
            entries = rq.CheckTransactionState.decode(env.ext).entries
        except FieldError as exc:  # the broker asks again at its next check round
            log.warning("malformed CHECK_TRANSACTION_STATE from %s: %s", addr, exc)
            return None
        answers: list[tuple[int, int, int, str]] = []
        traced: list[tuple[str, str, str]] = []
        for e, body in zip(entries, env.bodies):
            phys, qoff, txid, topic, qid, born, stored, flag, props_s = e
            try:
                msg = _check_message(addr, body, phys, qoff, txid, topic, qid, born, stored, flag, props_s)
            except ValueError:  # the sender's address (msgId) or the properties would not parse
                log.warning("malformed CHECK_TRANSACTION_STATE entry from %s", addr)
                continue
            state = TransactionState.UNKNOWN
            if self.checker is None:
                log.warning("no checker set on TransactionProducer %s: answering UNKNOWN", self.group)
            else:
                try:
                    state = self.checker(msg)
                except Exception:
                    log.exception("checker failed for %s: UNKNOWN", txid)
                if not isinstance(state, TransactionState):
                    state = TransactionState.UNKNOWN
            answers.append((phys, qoff, _WIRE[state.value], txid))
            traced.append((msg.topic, msg.msg_id, state.value))
        self._checks_answered += len(answers)
        if answers and self._started:
            self._end(addr, answers, from_check=True)
            tracer = self.tracer
            if tracer is not None:
                for topic, mid, answer in traced:
                    tracer.end_transaction(topic, addr, [(mid, answer)], from_check=True)
        return None

    def _heartbeat_brokers(self) -> dict[str, str]:
        """Every broker of the cluster: any of them may hold its group's open transactions."""
        return self._all_broker_addrs()
    _push_handlers = {**Producer._push_handlers, RequestCode.CHECK_TRANSACTION_STATE: _on_check}


def _check_message(addr: str, body: bytes, phys: int, qoff: int, txid: str, topic: str, qid: int, born: int,
                   stored: int, flag: int, props_s: str) -> MessageExt:
    props = record.client_properties(props_s)   # without the store's __CRC32#
    keys = props.get(KEYS)
    host, port = addr.rsplit(":", 1)
    return MessageExt(topic, body, props.get(TAGS), keys.split(" ") if keys else [], props, txid,
                      offset_msg_id(host_bytes(host, int(port)), phys), "", qid, qoff, 0, born, stored, phys, flag)
