"""Quiver's exceptions: one class per response code, built from one table.

`error_for(code, remark)` gives the class the server meant, so a client raises
exactly what the broker answered. `ProtocolError` is the only error the wire
decoder raises; `ClientError` covers local faults (timeouts, no route).
"""

from quiver.wire.codes import ResponseCode


class QuiverError(Exception):
    """A failure that carries a response code and a remark saying what to fix."""

    code: ResponseCode = ResponseCode.SYSTEM_ERROR

    def __init__(self, remark: str = "", code: int | None = None):
        super().__init__(remark)
        self.remark = remark
        if code is not None:
            self.code = _as_code(code)

    def __str__(self) -> str:
        name = self.code.name if isinstance(self.code, ResponseCode) else str(self.code)
        return f"[{name}] {self.remark}" if self.remark else f"[{name}]"


class ProtocolError(QuiverError):
    """A frame that is not a valid Quiver message (raised only by the decoder)."""

    code = ResponseCode.BAD_REQUEST


class FieldError(ProtocolError):
    """A request or reply field of the wrong type or out of range (raised by `quiver.wire.requests`).

    INVALID_PARAMETER, RocketMQ's code for a bad request field, unless the field
    names another (MESSAGE_ILLEGAL for a send's topic, PROPERTIES_SIZE_EXCEEDED ...)."""

    code = ResponseCode.INVALID_PARAMETER


class ClientError(QuiverError):
    """A local failure in the SDK: timeout, no route, client not started."""


class RequestTimeoutError(ClientError):
    """No reply within the request's deadline."""


def _as_code(code: int):
    try:
        return ResponseCode(code)
    except ValueError:
        return code


def _make(name: str, code: ResponseCode) -> type[QuiverError]:
    cls = type(name, (QuiverError,), {"code": code, "__doc__": f"Response code {code.name} ({int(code)})."})
    return cls


SystemError_ = _make("BrokerSystemError", ResponseCode.SYSTEM_ERROR)
SystemBusyError = _make("SystemBusyError", ResponseCode.SYSTEM_BUSY)
RequestCodeNotSupportedError = _make("RequestCodeNotSupportedError", ResponseCode.REQUEST_CODE_NOT_SUPPORTED)
FlushDiskTimeoutError = _make("FlushDiskTimeoutError", ResponseCode.FLUSH_DISK_TIMEOUT)
SlaveNotAvailableError = _make("SlaveNotAvailableError", ResponseCode.SLAVE_NOT_AVAILABLE)
FlushSlaveTimeoutError = _make("FlushSlaveTimeoutError", ResponseCode.FLUSH_SLAVE_TIMEOUT)
MessageIllegalError = _make("MessageIllegalError", ResponseCode.MESSAGE_ILLEGAL)
ServiceNotAvailableError = _make("ServiceNotAvailableError", ResponseCode.SERVICE_NOT_AVAILABLE)
VersionNotSupportedError = _make("VersionNotSupportedError", ResponseCode.VERSION_NOT_SUPPORTED)
NoPermissionError = _make("NoPermissionError", ResponseCode.NO_PERMISSION)
TopicNotExistError = _make("TopicNotExistError", ResponseCode.TOPIC_NOT_EXIST)
TopicExistAlreadyError = _make("TopicExistAlreadyError", ResponseCode.TOPIC_EXIST_ALREADY)
PullNotFoundError = _make("PullNotFoundError", ResponseCode.PULL_NOT_FOUND)
PullRetryImmediatelyError = _make("PullRetryImmediatelyError", ResponseCode.PULL_RETRY_IMMEDIATELY)
PullOffsetMovedError = _make("PullOffsetMovedError", ResponseCode.PULL_OFFSET_MOVED)
QueryNotFoundError = _make("QueryNotFoundError", ResponseCode.QUERY_NOT_FOUND)
SubscriptionParseError = _make("SubscriptionParseError", ResponseCode.SUBSCRIPTION_PARSE_FAILED)
SubscriptionNotExistError = _make("SubscriptionNotExistError", ResponseCode.SUBSCRIPTION_NOT_EXIST)
SubscriptionNotLatestError = _make("SubscriptionNotLatestError", ResponseCode.SUBSCRIPTION_NOT_LATEST)
SubscriptionGroupNotExistError = _make("SubscriptionGroupNotExistError", ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST)
FilterDataNotExistError = _make("FilterDataNotExistError", ResponseCode.FILTER_DATA_NOT_EXIST)
FilterDataNotLatestError = _make("FilterDataNotLatestError", ResponseCode.FILTER_DATA_NOT_LATEST)
InvalidParameterError = _make("InvalidParameterError", ResponseCode.INVALID_PARAMETER)
TransactionShouldCommitError = _make("TransactionShouldCommitError", ResponseCode.TRANSACTION_SHOULD_COMMIT)
TransactionShouldRollbackError = _make("TransactionShouldRollbackError", ResponseCode.TRANSACTION_SHOULD_ROLLBACK)
TransactionStateUnknownError = _make("TransactionStateUnknownError", ResponseCode.TRANSACTION_STATE_UNKNOW)
TransactionStateGroupWrongError = _make("TransactionStateGroupWrongError", ResponseCode.TRANSACTION_STATE_GROUP_WRONG)
NoBuyerIdError = _make("NoBuyerIdError", ResponseCode.NO_BUYER_ID)
FlowControlError = _make("FlowControlError", ResponseCode.FLOW_CONTROL)
PropertiesSizeExceededError = _make("PropertiesSizeExceededError", ResponseCode.PROPERTIES_SIZE_EXCEEDED)
IllegalOperationError = _make("IllegalOperationError", ResponseCode.ILLEGAL_OPERATION)
GoAwayError = _make("GoAwayError", ResponseCode.GO_AWAY)
BadRequestError = _make("BadRequestError", ResponseCode.BAD_REQUEST)
DiskFullError = _make("DiskFullError", ResponseCode.DISK_FULL)

_BY_CODE: dict[int, type[QuiverError]] = {
    cls.code: cls for cls in list(globals().values())
    if isinstance(cls, type) and issubclass(cls, QuiverError)
    and cls not in (QuiverError, ProtocolError, FieldError, ClientError, RequestTimeoutError)
}


def error_for(code: int, remark: str = "") -> QuiverError:
    """The exception instance the server meant by `code`."""
    cls = _BY_CODE.get(code)
    if cls is None:
        return QuiverError(remark, code)
    return cls(remark)
