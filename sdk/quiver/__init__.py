"""Quiver's client SDK: messages, producers, consumers, admin, and the wire protocol."""

# The release, as pyproject.toml's version (a test keeps them equal): `quiver --version`, every
# service's STATUS and /metrics (quiver_build_info). First, before any import that may need it.
__version__ = "0.1.0"

from typing import TYPE_CHECKING

from quiver.errors import (error_for, QuiverError, ProtocolError, FieldError, ClientError, RequestTimeoutError,
                           BrokerSystemError, SystemBusyError, RequestCodeNotSupportedError,
                           FlushDiskTimeoutError, SlaveNotAvailableError, FlushSlaveTimeoutError,
                           MessageIllegalError, ServiceNotAvailableError, VersionNotSupportedError,
                           NoPermissionError, TopicNotExistError, TopicExistAlreadyError, PullNotFoundError,
                           PullRetryImmediatelyError, PullOffsetMovedError, QueryNotFoundError,
                           SubscriptionParseError, SubscriptionNotExistError, SubscriptionNotLatestError,
                           SubscriptionGroupNotExistError, FilterDataNotExistError, FilterDataNotLatestError,
                           InvalidParameterError, TransactionShouldCommitError,
                           TransactionShouldRollbackError, TransactionStateUnknownError,
                           TransactionStateGroupWrongError, NoBuyerIdError, FlowControlError,
                           PropertiesSizeExceededError, IllegalOperationError, GoAwayError, BadRequestError,
                           DiskFullError, ReceiptHandleExpiredError)
from quiver.client.message import (ConsumeResult, Message, MessageExt, MessageSelector, PullStatus, SendResult,
                                   SendStatus, TransactionState)

__all__ = ["__version__", "Message", "MessageExt", "Producer", "TransactionProducer", "PushConsumer", "PullConsumer", "SimpleConsumer",
           "Admin", "RebalanceListener", "SendStatus", "SendResult", "ConsumeResult", "TransactionState", "MessageSelector",
           "PullStatus", "error_for", "QuiverError", "ProtocolError", "FieldError", "ClientError",
           "RequestTimeoutError", "BrokerSystemError", "SystemBusyError", "RequestCodeNotSupportedError",
           "FlushDiskTimeoutError", "SlaveNotAvailableError", "FlushSlaveTimeoutError", "MessageIllegalError",
           "ServiceNotAvailableError", "VersionNotSupportedError", "NoPermissionError", "TopicNotExistError",
           "TopicExistAlreadyError", "PullNotFoundError", "PullRetryImmediatelyError", "PullOffsetMovedError",
           "QueryNotFoundError", "SubscriptionParseError", "SubscriptionNotExistError",
           "SubscriptionNotLatestError", "SubscriptionGroupNotExistError", "FilterDataNotExistError",
           "FilterDataNotLatestError", "InvalidParameterError", "TransactionShouldCommitError",
           "TransactionShouldRollbackError", "TransactionStateUnknownError", "TransactionStateGroupWrongError",
           "NoBuyerIdError", "FlowControlError", "PropertiesSizeExceededError", "IllegalOperationError",
           "GoAwayError", "BadRequestError", "DiskFullError", "ReceiptHandleExpiredError"]

if TYPE_CHECKING:  # what type checkers see; at run time the clients load on first use (below)
    from quiver.client.admin import Admin
    from quiver.client.consumer import PullConsumer
    from quiver.client.producer import Producer
    from quiver.client.push_consumer import PushConsumer
    from quiver.client.rebalance import RebalanceListener
    from quiver.client.simple_consumer import SimpleConsumer
    from quiver.client.transaction_producer import TransactionProducer


def __getattr__(name: str) -> type:
    # Clients pull in zmq and threads: import them on first use.
    if name == "Producer":
        from quiver.client.producer import Producer
        return Producer
    if name == "TransactionProducer":
        from quiver.client.transaction_producer import TransactionProducer
        return TransactionProducer
    if name == "PullConsumer":
        from quiver.client.consumer import PullConsumer
        return PullConsumer
    if name == "PushConsumer":
        from quiver.client.push_consumer import PushConsumer
        return PushConsumer
    if name == "SimpleConsumer":
        from quiver.client.simple_consumer import SimpleConsumer
        return SimpleConsumer
    if name == "Admin":
        from quiver.client.admin import Admin
        return Admin
    if name == "RebalanceListener":
        from quiver.client.rebalance import RebalanceListener
        return RebalanceListener
    raise AttributeError(name)
