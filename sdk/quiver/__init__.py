"""Quiver's client SDK: messages, producers, consumers, admin, and the wire protocol."""

# The release, as pyproject.toml's version (a test keeps them equal): `quiver --version`, every
# service's STATUS and /metrics (quiver_build_info). First, before any import that may need it.
__version__ = "0.1.0"

import importlib.abc
import importlib.util
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import TYPE_CHECKING, cast

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
           "Admin", "SendStatus", "SendResult", "ConsumeResult", "TransactionState", "MessageSelector",
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
    raise AttributeError(name)

# ---- the flat names of before the layers -------------------------------------------------------
# quiver.record, quiver.codes, quiver.protocol ... (DESIGN.md's names, used by code outside this
# repo) import the module of its layer, lazily: the same module object under both names.

_MOVED = {
    "quiver.admin": "quiver.client.admin",
    "quiver.cli": "quiver.tools.cli",
    "quiver.codes": "quiver.wire.codes",
    "quiver.compose": "quiver.tools.compose",
    "quiver.consume_service": "quiver.client.consume_service",
    "quiver.consumer": "quiver.client.consumer",
    "quiver.demo": "quiver.tools.demo",
    "quiver.direct": "quiver.wire.direct",
    "quiver.filter_route": "quiver.client.filter_route",
    "quiver.futures": "quiver.wire.futures",
    "quiver.idempotent": "quiver.client.idempotent",
    "quiver.local": "quiver.tools.local",
    "quiver.loops": "quiver.runtime.loops",
    "quiver.message": "quiver.client.message",
    "quiver.names": "quiver.wire.names",
    "quiver.offset_store": "quiver.client.offset_store",
    "quiver.options": "quiver.client.options",
    "quiver.process_queue": "quiver.client.process_queue",
    "quiver.producer": "quiver.client.producer",
    "quiver.protocol": "quiver.wire.protocol",
    "quiver.push_consumer": "quiver.client.push_consumer",
    "quiver.queue_puller": "quiver.client.queue_puller",
    "quiver.range_reader": "quiver.client.range_reader",
    "quiver.rebalance": "quiver.client.rebalance",
    "quiver.record": "quiver.wire.record",
    "quiver.replies": "quiver.wire.replies",
    "quiver.requests": "quiver.wire.requests",
    "quiver.schema": "quiver.wire.schema",
    "quiver.service": "quiver.runtime.service",
    "quiver.settings": "quiver.runtime.settings",
    "quiver.system_properties": "quiver.client.system_properties",
    "quiver.tags": "quiver.client.tags",
    "quiver.transaction": "quiver.client.transaction",
    "quiver.transaction_producer": "quiver.client.transaction_producer",
    "quiver.transport": "quiver.wire.transport",
    "quiver.validation": "quiver.wire.validation",
}


class _MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        return importlib.util.spec_from_loader(name, self) if name in _MOVED else None

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        module = importlib.import_module(_MOVED[spec.name])
        spec.loader_state = module.__spec__  # the import system overwrites __spec__: put it back
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = cast(ModuleSpec, module.__spec__).loader_state  # set by create_module


sys.meta_path.insert(0, _MovedFinder())  # first: a stale flat file must not win
