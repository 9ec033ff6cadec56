"""Quiver's client SDK: messages, producers, consumers, admin, and the wire protocol."""

from .errors import QuiverError
from .message import (ConsumeResult, Message, MessageExt, MessageSelector, PullStatus, SendResult,
                      SendStatus, TransactionState)

__all__ = ["Message", "MessageExt", "Producer", "TransactionProducer", "PushConsumer", "PullConsumer",
           "Admin", "SendStatus", "SendResult", "ConsumeResult", "TransactionState", "MessageSelector",
           "PullStatus", "QuiverError"]


def __getattr__(name):
    # Clients pull in zmq and threads: import them on first use.
    if name == "Producer":
        from .producer import Producer
        return Producer
    if name == "TransactionProducer":
        from .transaction_producer import TransactionProducer
        return TransactionProducer
    if name == "PullConsumer":
        from .consumer import PullConsumer
        return PullConsumer
    if name == "PushConsumer":
        from .push_consumer import PushConsumer
        return PushConsumer
    if name == "Admin":
        from .admin import Admin
        return Admin
    raise AttributeError(name)
