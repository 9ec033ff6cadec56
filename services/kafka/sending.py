"""Sends of one Kafka batch to the queue its partition names, with the batch's born time.

The SDK's Producer picks queues itself and stamps its own clock as the born time; a Kafka
batch names its partition and carries its records' timestamps. One batch is one request (one
message: SEND_MESSAGE, more: SEND_BATCH_MESSAGE), so its records get consecutive queue offsets
and the first is the batch's base offset.
"""

from quiver.client.base import MessageQueue
from quiver.client.message import Message
from quiver.client.producer import _STATUS, Producer
from quiver.errors import MessageIllegalError, error_for
from quiver.wire import requests as rq
from quiver.wire.codes import RequestCode

GROUP = "quiver-kafka"


class QueueSender(Producer):
    def __init__(self, namesrv: str, timeout: float, max_message_bytes: int, credentials=None):
        super().__init__(GROUP, namesrv, send_timeout=timeout, max_message_bytes=max_message_bytes,
                         credentials=credentials)
        self.start()

    def submit(self, mq: MessageQueue, msgs: list[Message], born_ts: int, wait: bool = True) -> "Sent | None":
        """Send `msgs` to `mq` without waiting; what `Sent.offset()` waits on (None when not waiting).
        Sends to one broker leave in call order, so a partition's batches are stored in order."""
        route = self._route(mq.topic)
        if mq not in route.write_queues:
            raise MessageIllegalError(f"{mq.topic}:{mq.broker}:{mq.queue_id} is not writable now")
        props = [self._encode(m)[1] for m in msgs]
        bodies = [m.body for m in msgs]
        if sum(map(len, bodies)) > self.max_message_bytes:
            raise MessageIllegalError(f"batch is {sum(map(len, bodies))} bytes; the limit is {self.max_message_bytes}")
        lengths, frames = rq.pack_bodies(bodies)
        req = rq.SendMessage(topic=mq.topic, queue_id=mq.queue_id, metas=([0] * len(msgs), props), lengths=lengths,
                             group=self.group, born_ts=max(0, born_ts), wait=wait)
        code = RequestCode.SEND_MESSAGE if len(msgs) == 1 else RequestCode.SEND_BATCH_MESSAGE
        addr = route.addr(mq.broker)
        if not wait:
            self._io().oneway(addr, code, req.ext(), frames)
            return None
        return Sent(self, self._io().call_future(addr, code, req.ext(), frames, self.send_timeout), mq, addr, len(msgs))

    def send(self, mq: MessageQueue, msgs: list[Message], born_ts: int, wait: bool = True) -> int:  # type: ignore[override]
        """Store `msgs` in `mq`; the first one's queue offset (-1 when not waiting)."""
        sent = self.submit(mq, msgs, born_ts, wait)
        return -1 if sent is None else sent.offset()


class Sent:
    """A send under way: `offset()` waits for the broker and gives the first message's queue offset,
    or raises what the SDK raises for its answer."""

    def __init__(self, sender: QueueSender, future, mq: MessageQueue, addr: str, count: int):
        self.sender, self.future, self.mq, self.addr, self.count = sender, future, mq, addr, count

    def offset(self) -> int:
        env = self.future.result(self.sender.send_timeout + 1.0)
        if env.code not in _STATUS:
            raise error_for(env.code, env.remark or "")
        return rq.SendReply.decode(env.ext).queue_offset
