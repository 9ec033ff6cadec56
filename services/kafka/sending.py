"""Sends of one Kafka batch to the queue its partition names, with the batch's born time.

The SDK's Producer picks queues itself and stamps its own clock as the born time; a Kafka
batch names its partition and carries its records' timestamps. One batch is one request (one
message: SEND_MESSAGE, more: SEND_BATCH_MESSAGE), so its records get consecutive queue offsets
and the first is the batch's base offset.
"""

from quiver.client.base import MessageQueue
from quiver.client.message import Message
from quiver.client.producer import _STATUS, Producer
from quiver.errors import MessageIllegalError
from quiver.wire import requests as rq
from quiver.wire.codes import RequestCode

GROUP = "quiver-kafka"


class QueueSender(Producer):
    def __init__(self, namesrv: str, timeout: float, max_message_bytes: int):
        super().__init__(GROUP, namesrv, send_timeout=timeout, max_message_bytes=max_message_bytes)
        self.start()

    def send(self, mq: MessageQueue, msgs: list[Message], born_ts: int, wait: bool = True) -> int:  # type: ignore[override]
        """Store `msgs` in `mq`; the first one's queue offset (-1 when not waiting)."""
        route = self.route(mq.topic)
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
            return -1
        env = self._io().call(addr, code, req.ext(), frames, self.send_timeout, ok=tuple(_STATUS))
        return self._result(env, mq, addr, [""] * len(msgs))[0].queue_offset
