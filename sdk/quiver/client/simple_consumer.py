"""SimpleConsumer: POP consumption, RocketMQ 5's model. Any number of consumers share a topic.

No queue is owned: each `receive` pops messages from the topic's queues on every
broker, and each message stays invisible to the rest of the group for the
invisible duration. `ack(msg)` ends it; a message not acked in time is delivered
again (to any consumer of the group) with `reconsume_times` + 1, and after the
group's max reconsume times (16 unless the group config says otherwise) it goes
to `%DLQ%<group>`. `change_invisible_duration(msg, s)` gives more time (or less)
and replaces `msg.receipt_handle`. Topics created with `order=True` (or a consumer
built with `fifo=True`) are FIFO: messages of one message group (property
`__SHARDINGKEY`) are delivered in order, one in flight at a time.

    from quiver import SimpleConsumer

    with SimpleConsumer("billing", namesrv="127.0.0.1:9876", consume_from="first") as c:
        c.subscribe("Orders", "paid || refunded")
        for msg in c.receive(max_messages=16, invisible_duration_s=30):
            handle(msg)
            c.ack(msg)          # not acked: delivered again after 30 s

A group consumes by POP or by the queue-owning PushConsumer / PullConsumer, not
both; other groups of the topic may use either.
"""

import logging

from quiver.client import filter_route
from quiver.client.base import ClientBase
from quiver.client.message import MessageExt, MessageSelector
from quiver.client.popping import Popper, invisible_ms
from quiver.errors import ClientError
from quiver.wire.curve import Credentials
from quiver.wire.validation import check_group

log = logging.getLogger(__name__)


class SimpleConsumer(ClientBase):
    """RocketMQ 5's SimpleConsumer, over POP: `receive` takes messages that stay invisible to the
    group for a while, `ack` finishes each one; no queue is owned, the broker hands them out.
    `consume_from`: where a group new to a queue starts, "last" (RocketMQ's default: at 0 while
    the queue's first message is in memory, else at its last message) or "first"; `fifo`: FIFO delivery per message group on any topic; `max_reconsume_times`: the
    deliveries before the DLQ when the group has no config on the broker (None: 16);
    `await_duration_s`: how long a receive waits for a message by default (long polling).
    `namesrv` and `credentials` as for Producer; ValueError for a bad setting.

        with SimpleConsumer("cg", namesrv="127.0.0.1:9876") as c:
            c.subscribe("Orders", "*")
            for msg in c.receive(16, invisible_duration_s=30):
                handle(msg)
                c.ack(msg)              # not acked in 30 s: delivered again
    """

    def __init__(self, group: str, namesrv: str | list[str] | None = None, *,
                 credentials: str | Credentials | None = None, consume_from: str = "last", fifo: bool = False,
                 max_reconsume_times: int | None = None, await_duration_s: float = 5.0,
                 request_timeout: float = 3.0) -> None:
        super().__init__(namesrv, request_timeout=request_timeout, credentials=credentials)
        check_group(group)
        if isinstance(await_duration_s, bool) or not isinstance(await_duration_s, (int, float)) \
                or not 0 <= await_duration_s <= 3600:
            raise ValueError(f"await_duration_s is 0..3600 seconds, not {await_duration_s!r}")
        self.group = group
        self._await_duration_s = float(await_duration_s)
        self._subscriptions: dict[str, MessageSelector] = {}
        self._popper = Popper(self._brokers, group, consume_from=consume_from, fifo=fifo,
                              max_reconsume_times=max_reconsume_times)

    def subscribe(self, topic: str, expression: str | MessageSelector = "*") -> None:
        """Receive `topic`'s messages whose tag matches `expression` ("*", "TagA || TagB").
        SQL92 selectors are not served by POP (ClientError)."""
        sel = filter_route.as_selector(expression)
        if sel.type != "TAG":
            raise ClientError("POP consumption filters by tag only: subscribe with a tag expression")
        self._subscriptions[topic] = sel

    def unsubscribe(self, topic: str) -> None:
        """Stop receiving `topic` (nothing happens if it was not subscribed)."""
        self._subscriptions.pop(topic, None)

    def receive(self, max_messages: int = 16, invisible_duration_s: float = 60.0,
                wait_s: float | None = None) -> list[MessageExt]:
        """Up to `max_messages` (1..1024) messages, each invisible to the group for
        `invisible_duration_s` (0.1 s .. 12 h); waits up to `wait_s` (default
        `await_duration_s`) when there is none, then returns []. Each message carries
        `receipt_handle` and `reconsume_times`.

            msgs = consumer.receive(8, invisible_duration_s=10)
        """
        self._need_started()
        if isinstance(max_messages, bool) or not isinstance(max_messages, int) or not 1 <= max_messages <= 1024:
            raise ValueError(f"max_messages is 1..1024, not {max_messages!r}")
        if not self._subscriptions:
            raise ClientError("no subscription: call subscribe(topic, expression) before receive()")
        ms = invisible_ms(invisible_duration_s)
        wait = self._await_duration_s if wait_s is None else max(0.0, float(wait_s))
        return self._popper.receive(self._subscriptions, max_messages, ms, wait)

    def ack(self, msg: MessageExt) -> None:
        """Done with `msg`: it is never delivered to the group again. Raises
        ReceiptHandleExpiredError if its handle is stale (its invisible time passed and it
        was delivered again, or a newer handle replaced it).

            consumer.ack(msg)
        """
        self._need_started()
        self._popper.ack(msg)

    def change_invisible_duration(self, msg: MessageExt, seconds: float) -> str:
        """`msg` becomes visible again `seconds` from now (longer or shorter than before);
        `msg.receipt_handle` is replaced by the new handle, which is also returned.

            consumer.change_invisible_duration(msg, 120)   # needs more time
        """
        self._need_started()
        return self._popper.change_invisible(msg, invisible_ms(seconds))
