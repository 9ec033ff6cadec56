"""Quiver's exceptions: one class per response code, built from one table.

`error_for(code, remark)` gives the class the server meant, so a client raises
exactly what the broker answered. `ProtocolError` is the only error the wire
decoder raises; `ClientError` covers local faults (timeouts, no route). Each class below is
exported from `quiver` too (`from quiver import TopicNotExistError`).
"""

from quiver.wire.codes import ResponseCode


class QuiverError(Exception):
    """A failure that carries a response code and a remark saying what to fix."""

    code: ResponseCode | int = ResponseCode.SYSTEM_ERROR  # an int only for a code this SDK does not know
    from_server = False  # True when built from a reply's code (error_for), False when raised here

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


def _as_code(code: int) -> ResponseCode | int:
    try:
        return ResponseCode(code)
    except ValueError:
        return code


class BrokerSystemError(QuiverError):
    """The service failed while handling the request (its log says why)."""

    code = ResponseCode.SYSTEM_ERROR


SystemError_ = BrokerSystemError  # the older name


class SystemBusyError(QuiverError):
    """The broker is overloaded (a queue of puts or pulls is full): retry after a pause."""

    code = ResponseCode.SYSTEM_BUSY


class RequestCodeNotSupportedError(QuiverError):
    """The service does not handle this request code (wrong service or an older version)."""

    code = ResponseCode.REQUEST_CODE_NOT_SUPPORTED


class FlushDiskTimeoutError(QuiverError):
    """SYNC flush: the message is stored but the fsync did not finish in time."""

    code = ResponseCode.FLUSH_DISK_TIMEOUT


class SlaveNotAvailableError(QuiverError):
    """SYNC_MASTER: no slave connected and in sync; the message is stored on the master only."""

    code = ResponseCode.SLAVE_NOT_AVAILABLE


class FlushSlaveTimeoutError(QuiverError):
    """SYNC_MASTER: the slave did not confirm in time; the message is stored on the master."""

    code = ResponseCode.FLUSH_SLAVE_TIMEOUT


class MessageIllegalError(QuiverError):
    """The message is refused as sent (bad topic, body too large, bad properties)."""

    code = ResponseCode.MESSAGE_ILLEGAL


class ServiceNotAvailableError(QuiverError):
    """The service cannot take the request now (disk full, slave role, shutting down): retry elsewhere or later."""

    code = ResponseCode.SERVICE_NOT_AVAILABLE


class VersionNotSupportedError(QuiverError):
    """The peer speaks a protocol version this service does not."""

    code = ResponseCode.VERSION_NOT_SUPPORTED


class NoPermissionError(QuiverError):
    """Auth refused the request: the remark names the missing action and resource."""

    code = ResponseCode.NO_PERMISSION


class TopicNotExistError(QuiverError):
    """The topic does not exist on this broker (create it, or enable auto-create)."""

    code = ResponseCode.TOPIC_NOT_EXIST


class TopicExistAlreadyError(QuiverError):
    """The topic exists already."""

    code = ResponseCode.TOPIC_EXIST_ALREADY


class PullNotFoundError(QuiverError):
    """No new message at this offset (yet)."""

    code = ResponseCode.PULL_NOT_FOUND


class PullRetryImmediatelyError(QuiverError):
    """Pull again at once (the broker had nothing ready to serve this time)."""

    code = ResponseCode.PULL_RETRY_IMMEDIATELY


class PullOffsetMovedError(QuiverError):
    """The requested offset is outside the queue: start from the offset the reply gives."""

    code = ResponseCode.PULL_OFFSET_MOVED


class QueryNotFoundError(QuiverError):
    """No message matches the query (key, msgId or offset)."""

    code = ResponseCode.QUERY_NOT_FOUND


class SubscriptionParseError(QuiverError):
    """The subscription expression does not parse (the remark says where)."""

    code = ResponseCode.SUBSCRIPTION_PARSE_FAILED


class SubscriptionNotExistError(QuiverError):
    """The consumer's subscription is unknown to the broker."""

    code = ResponseCode.SUBSCRIPTION_NOT_EXIST


class SubscriptionNotLatestError(QuiverError):
    """The consumer's subscription is older than the one the broker holds."""

    code = ResponseCode.SUBSCRIPTION_NOT_LATEST


class SubscriptionGroupNotExistError(QuiverError):
    """The consumer group does not exist (and auto-create is off)."""

    code = ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST


class FilterDataNotExistError(QuiverError):
    """The filter server has no data for this subscription."""

    code = ResponseCode.FILTER_DATA_NOT_EXIST


class FilterDataNotLatestError(QuiverError):
    """The filter server's data for this subscription is stale."""

    code = ResponseCode.FILTER_DATA_NOT_LATEST


class InvalidParameterError(QuiverError):
    """A request field is missing, of the wrong type or out of range (the remark names it)."""

    code = ResponseCode.INVALID_PARAMETER


class TransactionShouldCommitError(QuiverError):
    """The transaction is to be committed."""

    code = ResponseCode.TRANSACTION_SHOULD_COMMIT


class TransactionShouldRollbackError(QuiverError):
    """The transaction is to be rolled back."""

    code = ResponseCode.TRANSACTION_SHOULD_ROLLBACK


class TransactionStateUnknownError(QuiverError):
    """The transaction's state is unknown yet."""

    code = ResponseCode.TRANSACTION_STATE_UNKNOW


class TransactionStateGroupWrongError(QuiverError):
    """The transaction belongs to another producer group."""

    code = ResponseCode.TRANSACTION_STATE_GROUP_WRONG


class NoBuyerIdError(QuiverError):
    """No buyer id (a RocketMQ code kept for parity)."""

    code = ResponseCode.NO_BUYER_ID


class FlowControlError(QuiverError):
    """Flow control: too many requests in flight; retry after a pause."""

    code = ResponseCode.FLOW_CONTROL


class PropertiesSizeExceededError(QuiverError):
    """The message's properties are larger than the limit."""

    code = ResponseCode.PROPERTIES_SIZE_EXCEEDED


class IllegalOperationError(QuiverError):
    """The request is not allowed in this state (the remark says why)."""

    code = ResponseCode.ILLEGAL_OPERATION


class GoAwayError(QuiverError):
    """The service is shutting down: reconnect elsewhere."""

    code = ResponseCode.GO_AWAY


class BadRequestError(QuiverError):
    """The frames are not a valid Quiver request."""

    code = ResponseCode.BAD_REQUEST


class DiskFullError(QuiverError):
    """The broker's disk is past its limit: writes resume when space returns."""

    code = ResponseCode.DISK_FULL


class ReceiptHandleExpiredError(QuiverError):
    """A POP receipt handle that no longer owns its message: acked already, redelivered after its
    invisible time, or replaced by a change of invisible duration (use the newest handle)."""

    code = ResponseCode.RECEIPT_HANDLE_EXPIRED


_BY_CODE: dict[int, type[QuiverError]] = {
    cls.code: cls for cls in list(globals().values())
    if isinstance(cls, type) and issubclass(cls, QuiverError)
    and cls not in (QuiverError, ProtocolError, FieldError, ClientError, RequestTimeoutError)
}


def error_for(code: int, remark: str = "") -> QuiverError:
    """The exception instance the server meant by `code`."""
    cls = _BY_CODE.get(code)
    exc = QuiverError(remark, code) if cls is None else cls(remark)
    exc.from_server = True
    return exc
