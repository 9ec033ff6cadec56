"""Status codes of the v2 protocol (definition.proto's Code) for every outcome, in one place.

`Refused(code, message)` is how a check at the door or a domain step says "answer the client
this" (a message saying what to fix); `status_of(exc)` turns a Refused, a QuiverError from the
brokers (its ResponseCode mapped as RocketMQ's proxy maps the remoting codes) or anything else
(INTERNAL_SERVER_ERROR, logged once by the caller) into a Status.
"""

from rocketmq.grpc_protocol.definition_pb2 import Code, Status

from quiver.errors import QuiverError, RequestTimeoutError
from quiver.wire.codes import ResponseCode as R

OK = Status(code=Code.OK, message="OK")

_FROM_QUIVER = {
    R.SYSTEM_BUSY: Code.TOO_MANY_REQUESTS, R.FLOW_CONTROL: Code.TOO_MANY_REQUESTS,
    R.FLUSH_DISK_TIMEOUT: Code.MASTER_PERSISTENCE_TIMEOUT, R.FLUSH_SLAVE_TIMEOUT: Code.SLAVE_PERSISTENCE_TIMEOUT,
    R.SLAVE_NOT_AVAILABLE: Code.HA_NOT_AVAILABLE, R.SERVICE_NOT_AVAILABLE: Code.INTERNAL_SERVER_ERROR,
    R.MESSAGE_ILLEGAL: Code.BAD_REQUEST, R.INVALID_PARAMETER: Code.BAD_REQUEST, R.BAD_REQUEST: Code.BAD_REQUEST,
    R.NO_PERMISSION: Code.FORBIDDEN, R.TOPIC_NOT_EXIST: Code.TOPIC_NOT_FOUND,
    R.SUBSCRIPTION_GROUP_NOT_EXIST: Code.CONSUMER_GROUP_NOT_FOUND, R.QUERY_NOT_FOUND: Code.NOT_FOUND,
    R.SUBSCRIPTION_PARSE_FAILED: Code.ILLEGAL_FILTER_EXPRESSION,
    R.PROPERTIES_SIZE_EXCEEDED: Code.MESSAGE_PROPERTIES_TOO_LARGE,
    R.RECEIPT_HANDLE_EXPIRED: Code.INVALID_RECEIPT_HANDLE, R.DISK_FULL: Code.INTERNAL_SERVER_ERROR,
    R.REQUEST_CODE_NOT_SUPPORTED: Code.NOT_IMPLEMENTED, R.VERSION_NOT_SUPPORTED: Code.VERSION_UNSUPPORTED,
}


class Refused(Exception):
    """Answer the client `code` with `message` (what to fix)."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def status(code: int, message: str) -> Status:
    return Status(code=code, message=message)


def status_of(exc: Exception) -> Status:
    if isinstance(exc, Refused):
        return Status(code=exc.code, message=exc.message)
    if isinstance(exc, QuiverError):
        code = Code.PROXY_TIMEOUT if isinstance(exc, RequestTimeoutError) else \
            _FROM_QUIVER.get(exc.code, Code.INTERNAL_SERVER_ERROR)
        return Status(code=code, message=exc.remark or str(exc))
    return Status(code=Code.INTERNAL_SERVER_ERROR, message=f"proxy error: {type(exc).__name__}")
