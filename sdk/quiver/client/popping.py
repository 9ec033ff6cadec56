"""The POP engine one client uses for one group: receive, ack, change invisible duration.

Shared by SimpleConsumer and PushConsumer's POP mode (pop_push.py). A receive
asks every broker that serves a subscribed topic in turn (no long poll), and
when none has anything, long-polls the next one in rotation for the rest of the
wait (at most `LONG_POLL_SLICE_S` at a time when there are several, so a message
on another broker waits at most that long). Acks and changes go to the broker
named in the message's receipt handle (quiver.wire.receipt_handle).
"""

import itertools
import time

from quiver.client.message import MessageExt, MessageSelector, decode_messages
from quiver.errors import ClientError, QuiverError
from quiver.wire import requests as rq
from quiver.wire.receipt_handle import MAX_INVISIBLE_MS, MIN_INVISIBLE_MS, ReceiptHandle

LONG_POLL_SLICE_S = 1.0


def invisible_ms(seconds: float) -> int:
    """Seconds -> the wire's invisible milliseconds, ValueError outside its range."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise ValueError(f"an invisible duration is a number of seconds, not {seconds!r}")
    ms = round(seconds * 1000)
    if not MIN_INVISIBLE_MS <= ms <= MAX_INVISIBLE_MS:
        raise ValueError(f"an invisible duration is {MIN_INVISIBLE_MS / 1000}..{MAX_INVISIBLE_MS // 1000} s, "
                         f"not {seconds!r}")
    return ms


def handle_of(msg: MessageExt) -> ReceiptHandle:
    if not isinstance(msg, MessageExt) or not msg.receipt_handle:
        raise ClientError("this message has no receipt handle: only messages from a POP receive can be acked")
    try:
        return ReceiptHandle.parse(msg.receipt_handle)
    except ValueError as exc:
        raise ClientError(f"not a receipt handle: {exc}") from None


class Popper:
    """`client`: a started ClientBase (routes, broker calls)."""

    def __init__(self, client, group: str, *, consume_from: str = "last", fifo: bool = False,
                 max_reconsume_times: int | None = None):
        if consume_from not in ("first", "last"):
            raise ValueError(f"consume_from is 'first' or 'last' for a POP group, not {consume_from!r}")
        self.client = client
        self.group = group
        self.consume_from = consume_from
        self.fifo = fifo
        self.max_reconsume_times = max_reconsume_times
        self._turn = itertools.count()

    def _targets(self, subscriptions: dict[str, MessageSelector]) -> list[tuple[str, str, str, str]]:
        out = []
        for topic, sel in subscriptions.items():
            route = self.client.route(topic)
            for broker in sorted({mq.broker for mq in route.read_queues}):
                addr = route.addrs.get(broker)
                if addr:
                    out.append((topic, sel.expression, broker, addr))
        return out

    def receive(self, subscriptions: dict[str, MessageSelector], max_messages: int, invisible: int,
                wait_s: float) -> list[MessageExt]:
        """Up to `max_messages`, each invisible for `invisible` ms; waits up to `wait_s` for one."""
        deadline = time.monotonic() + max(0.0, wait_s)
        while True:
            targets = self._targets(subscriptions)
            if not targets:
                return []
            turn = next(self._turn)
            got: list[MessageExt] = []
            for i in range(len(targets)):
                got.extend(self._pop(targets[(turn + i) % len(targets)], max_messages - len(got), invisible, 0))
                if len(got) >= max_messages:
                    break
            left = deadline - time.monotonic()
            if got or left <= 0.05:
                return got
            slice_s = left if len(targets) == 1 else min(left, LONG_POLL_SLICE_S)
            got = self._pop(targets[turn % len(targets)], max_messages, invisible, int(slice_s * 1000))
            if got or deadline - time.monotonic() <= 0.05:
                return got

    def pop_broker(self, topic: str, expression: str, broker: str, n: int, invisible: int,
                   poll_ms: int) -> list[MessageExt]:
        """One POP of `topic` on `broker`, long-polling up to `poll_ms` (a proxy serving a client's queue)."""
        return self._pop((topic, expression, broker, self.client.broker_addr(broker, topic)), n, invisible, poll_ms)

    def _pop(self, target, n: int, invisible: int, poll_ms: int) -> list[MessageExt]:
        topic, expression, broker, addr = target
        req = rq.PopMessage(group=self.group, topic=topic, max_msgs=n, invisible_ms=invisible, poll_ms=poll_ms,
                            expression=expression, order=self.fifo, max_reconsume=self.max_reconsume_times,
                            consume_from=self.consume_from)
        env = self.client.call_broker(addr, req, timeout=self.client.request_timeout + poll_ms / 1000)
        handles = rq.PopReply.decode(env.ext).handles
        msgs = decode_messages(env.bodies[0], broker) if env.bodies and handles else []
        if len(msgs) != len(handles):
            raise ClientError(f"broker {broker} answered {len(msgs)} records with {len(handles)} receipt handles")
        for m, h in zip(msgs, handles):
            m.receipt_handle = h.encode()
            m.reconsume_times = h.reconsume
        return msgs

    def ack(self, msg: MessageExt) -> None:
        h = handle_of(msg)
        addr = self.client.broker_addr(h.broker, h.topic)
        self.client.call_broker(addr, rq.AckMessage(group=self.group, topic=h.topic, handles=[h]))

    def change_invisible(self, msg: MessageExt, invisible: int) -> str:
        h = handle_of(msg)
        addr = self.client.broker_addr(h.broker, h.topic)
        env = self.client.call_broker(addr, rq.ChangeInvisibleDuration(group=self.group, topic=h.topic, handle=h,
                                                                       invisible_ms=invisible))
        try:
            new = rq.ChangeInvisibleReply.decode(env.ext).handle
        except QuiverError as exc:
            raise ClientError(f"broker {h.broker} answered no valid new handle: {exc}") from None
        msg.receipt_handle = new.encode()
        return msg.receipt_handle
