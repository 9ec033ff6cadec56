"""Transactional sends of v2 clients: half messages, EndTransaction, and check-backs through telemetry.

The proxy's TransactionProducer (group --transaction-group) sends every half message, so the
txn-checker's CHECK_TRANSACTION_STATE comes to the proxy; `TxProducer` does not answer it
itself but hands each open half to `forward(topic, transaction id, message)`, which sends a
RecoverOrphanedTransactionCommand on the telemetry stream of a client that publishes the
topic. That client's EndTransaction (source SERVER_CHECK, or CLIENT) comes back with the
transaction id, which names the half:

    "q1:<broker name>:<commit log offset>:<queue offset>:<message id>"

so no state is kept here between the send and the end (RocketMQ's transaction id carries
the same). A check nobody answers is asked again by the txn-checker's next round.
"""

import logging
import time

from rocketmq.grpc_protocol.definition_pb2 import Code, TransactionResolution

from quiver.client.message import Message
from quiver.client.transaction_producer import TransactionProducer, _check_message
from quiver.errors import FieldError
from quiver.wire import record
from quiver.wire import requests as rq
from quiver.wire.codes import RequestCode
from quiver.wire.names import broker_name_problem

from .statuses import Refused

log = logging.getLogger(__name__)

VERSION = "q1"
MAX_ID_CHARS = 256
_STATES = {TransactionResolution.COMMIT: record.TX_COMMIT, TransactionResolution.ROLLBACK: record.TX_ROLLBACK}


def encode_id(broker: str, phys: int, qoff: int, msg_id: str) -> str:
    return f"{VERSION}:{broker}:{phys}:{qoff}:{msg_id}"


def parse_id(text: str) -> tuple[str, int, int, str]:
    """(broker, commit log offset, queue offset, message id), Refused(INVALID_TRANSACTION_ID) if malformed."""
    parts = text.split(":") if isinstance(text, str) and 0 < len(text) <= MAX_ID_CHARS and text.isascii() else []
    if len(parts) != 5 or parts[0] != VERSION or broker_name_problem(parts[1]) \
            or not all(p.isdigit() and len(p) <= 19 for p in parts[2:4]) or not parts[4].isalnum():
        raise Refused(Code.INVALID_TRANSACTION_ID, "not a transaction id this proxy gave: use the send "
                                                   "receipt's transaction_id")
    return parts[1], int(parts[2]), int(parts[3]), parts[4]


class TxProducer(TransactionProducer):
    """`forward(topic, transaction_id, MessageExt) -> bool`: hand a check to a client (False: nobody to ask)."""

    def __init__(self, group, namesrv, forward, **kw):
        super().__init__(group, namesrv, checker=None, heartbeat_interval_s=10.0, **kw)
        self.forward = forward
        self.checks_forwarded = 0

    def send_half(self, msg: Message) -> tuple[str, str]:
        """Send `msg` as a half message: (message id, transaction id)."""
        msg_id, props = self._half_properties(msg, _never_called, None)
        env, mq, addr = self._call_with_retry(msg.topic, [props], [msg.body], [msg.flag], RequestCode.SEND_MESSAGE,
                                              None, sys_flag=record.TX_PREPARED)
        _res, (_addr, phys, qoff) = self._half_sent(env, mq, addr, msg_id, props, time.monotonic())
        return msg_id, encode_id(mq.broker, phys, qoff, msg_id)

    def end(self, topic: str, transaction_id: str, resolution: int, from_check: bool) -> None:
        broker, phys, qoff, msg_id = parse_id(transaction_id)
        state = _STATES.get(resolution)
        if state is None:
            raise Refused(Code.BAD_REQUEST, "resolution is COMMIT or ROLLBACK")
        addr = self._broker_addr(broker, topic)
        self._end(addr, [(phys, qoff, state, msg_id)], from_check=from_check)

    def _on_check(self, addr, env):
        try:
            entries = rq.CheckTransactionState.decode(env.ext).entries
        except FieldError as exc:
            log.warning("malformed CHECK_TRANSACTION_STATE from %s: %s", addr, exc)
            return None
        names = {a: n for n, a in self._all_broker_addrs().items()}
        broker = names.get(addr)
        if broker is None:
            log.warning("CHECK_TRANSACTION_STATE from %s, which no name server routes: ignored", addr)
            return None
        for e, body in zip(entries, env.bodies):
            phys, qoff, txid, topic, qid, born, stored, flag, props_s = e
            try:
                msg = _check_message(addr, body, phys, qoff, txid, topic, qid, born, stored, flag, props_s)
            except ValueError:
                log.warning("malformed CHECK_TRANSACTION_STATE entry from %s", addr)
                continue
            if self.forward(topic, encode_id(broker, phys, qoff, txid), msg):
                self.checks_forwarded += 1
        return None

    _push_handlers = {RequestCode.CHECK_TRANSACTION_STATE: _on_check}


def _never_called(_msg, _arg):  # half_properties wants the local transaction; the client runs it
    raise AssertionError("the client runs the local transaction")
