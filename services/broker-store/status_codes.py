"""The store's status enums mapped to response codes, in one place.

store.py returns a GetStatus or PutStatus for every expected outcome; the
request paths (pulling, sending, transaction, schedule) turn them into reply
codes here and nowhere else, by enum, never by name.
"""

from quiver.wire.codes import ResponseCode
from quiver.errors import error_for

from .store import GetStatus, PutResult, PutStatus

# A pull's outcome -> (code, remark); the remark may name {offset}, {min} and {max}.
# PULL_NOT_FOUND is "nothing new yet": a pull that may wait is held instead of answered.
PULL_CODES: dict[GetStatus, tuple[ResponseCode, str]] = {
    GetStatus.FOUND: (ResponseCode.SUCCESS, ""),
    GetStatus.NO_MATCHED_MESSAGE: (ResponseCode.PULL_RETRY_IMMEDIATELY, "no message matched the subscription"),
    GetStatus.OFFSET_TOO_SMALL: (ResponseCode.PULL_OFFSET_MOVED, "offset {offset} is below the queue's min {min}"),
    GetStatus.OFFSET_OVERFLOW_BADLY: (ResponseCode.PULL_OFFSET_MOVED, "offset {offset} is beyond the queue's max {max}"),
    GetStatus.NO_MESSAGE_IN_QUEUE: (ResponseCode.PULL_OFFSET_MOVED, "the queue is empty; start from 0"),
    GetStatus.OFFSET_OVERFLOW_ONE: (ResponseCode.PULL_NOT_FOUND, "no new message"),
}

# A put's outcome -> code; anything but SUCCESS is raised as that code's QuiverError.
# DISK_FULL and WRITE_FAILED answer what RocketMQ answers for a full disk, SERVICE_NOT_AVAILABLE,
# which its producers (and ours, producer.RETRYABLE) retry on another broker; the remark says why.
PUT_CODES: dict[PutStatus, ResponseCode] = {
    PutStatus.PUT_OK: ResponseCode.SUCCESS,
    PutStatus.DISK_FULL: ResponseCode.SERVICE_NOT_AVAILABLE,
    PutStatus.WRITE_FAILED: ResponseCode.SERVICE_NOT_AVAILABLE,
}


def pull_code(status: GetStatus, offset: int, min_offset: int, max_offset: int) -> tuple[ResponseCode, str]:
    """(code, remark) of a pull at `offset` that ended with `status`."""
    if status is GetStatus.NO_MESSAGE_IN_QUEUE and offset == 0:
        status = GetStatus.OFFSET_OVERFLOW_ONE  # an empty queue read from its start: nothing new yet
    code, remark = PULL_CODES[status]
    return code, remark.format(offset=offset, min=min_offset, max=max_offset)


def check_stored(res: PutResult, what: str) -> None:
    """Raise the QuiverError of a put that was refused; `what` names it ("writes", "re-put") before the
    store's remark ("disk 93 % full on /data/broker-a; writes resume below 85 %")."""
    code = PUT_CODES[res.status]
    if code != ResponseCode.SUCCESS:
        raise error_for(code, f"{what} refused: {res.remark}")
