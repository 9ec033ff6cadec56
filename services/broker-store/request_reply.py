"""Request-reply on the broker (RocketMQ 4.6+): SEND_REPLY_MESSAGE, stored, then pushed.

A requester (Producer.request) sends a normal message carrying CORRELATION_ID,
REPLY_TO_CLIENT (its client id), TTL and CLUSTER, and heartbeats its producer
group to every broker first, so each broker knows its connection. A replier
(Producer.reply) sends the reply with SEND_REPLY_MESSAGE to queue 0 of
`<cluster>_REPLY_TOPIC` on the broker the request was stored on. Here the reply
is checked (one message, this broker's cluster, the two properties), stored
through the send path like any message (the replier's answer is its SendResult,
so a reply is never lost silently from the replier's side) and, once written,
pushed (PUSH_REPLY_MESSAGE_TO_CLIENT, the stored record) to the requester over
its own connection, found by the client id its heartbeat registered. A
requester that is gone or unknown is counted (`reply_push_failed`); the reply
stays stored and the requester's request times out.

Does not own the send path (sending.py) or who is connected (clients.py).
"""

import logging

from quiver.errors import MessageIllegalError
from quiver.wire import protocol
from quiver.wire import requests as rq
from quiver.wire.codes import RequestCode
from quiver.wire.names import reply_topic
from quiver.wire.properties import CORRELATION_ID, REPLY_TO_CLIENT
from quiver.wire.property_string import get_property
from quiver.wire.transport import next_request_id

log = logging.getLogger(__name__)

REPLY_QUEUES = 1   # RocketMQ's reply topic has one queue per broker


class ReplyRequests:
    """SEND_REPLY_MESSAGE. `send(req) -> PutResult | None` is Sender.handle of one message;
    `push(identity, frames) -> bool` sends over a connection that exists now."""

    def __init__(self, broker_name: str, cluster: str, store, topics, clients, send, push, counters):
        self.broker_name = broker_name
        self.topic = reply_topic(cluster)
        self.store = store
        self.topics = topics
        self.clients = clients
        self.send = send
        self.push = push
        self.counters = counters

    def handlers(self) -> dict:
        return {RequestCode.SEND_REPLY_MESSAGE: self.reply}

    def reply(self, req) -> None:
        a = req.args
        client_id = self._check(a)
        self.topics.config(self.topic, create=True, system=True, queues=REPLY_QUEUES)
        res = self.send(req, batch=False)
        self.counters["replies_stored"] += 1
        if res is None or not res.phys_offsets:
            return
        self._push(client_id, res.phys_offsets[0])

    def _check(self, a) -> str:
        """The requester's client id; MESSAGE_ILLEGAL saying what to fix otherwise."""
        if a.topic != self.topic:
            raise MessageIllegalError(f"a reply goes to {self.topic} on this broker (its cluster's reply topic), "
                                      f"not {a.topic!r}: send it with Producer.reply")
        props = a.metas[1]
        if len(props) != 1:
            raise MessageIllegalError(f"SEND_REPLY_MESSAGE carries one reply, not {len(props)}")
        client_id = get_property(props[0], REPLY_TO_CLIENT)
        if not client_id or not get_property(props[0], CORRELATION_ID):
            raise MessageIllegalError(f"a reply needs the request's {CORRELATION_ID} and {REPLY_TO_CLIENT} "
                                      "properties: build it with Producer.reply(request, body)")
        return client_id

    def _push(self, client_id: str, phys: int) -> None:
        info = self.clients.find(client_id)
        rec = self.store.lookup(phys) if info is not None else None
        if info is None or rec is None:
            self._failed(client_id, "not connected (no heartbeat of it on this broker)")
            return
        frames = protocol.request(rq.PushReplyMessage(broker=self.broker_name), next_request_id(), None, [rec.stored])
        if self.push(info.identity, frames):
            self.counters["replies_pushed"] += 1
        else:
            self._failed(client_id, "gone (its connection is closed)")

    def _failed(self, client_id: str, why: str) -> None:
        self.counters["reply_push_failed"] += 1
        log.debug("reply to %s stored, not pushed: the requester is %s", client_id, why)
