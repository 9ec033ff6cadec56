"""v2 protobuf messages <-> Quiver messages, with every field checked at the door.

`inbound(pm, limits)` turns a SendMessage entry into a Quiver `Message` plus its v2 message
type (Refused with the code the RocketMQ 5 clients expect when a field is wrong);
`outbound(m, invisible_ms)` turns a popped `MessageExt` into the v2 Message a client decodes.
Mapping: tag -> TAGS, keys -> KEYS, message group -> __SHARDINGKEY (POP's FIFO groups),
delivery timestamp -> deliver_at (Quiver's timer), message id <- UNIQ_KEY. Owns no queue
choice nor type policy (routes.py) and no sending (sending.py).
"""

import time
import zlib
from dataclasses import dataclass

from rocketmq.grpc_protocol.definition_pb2 import Code, DigestType, Encoding, MessageType
from rocketmq.grpc_protocol.definition_pb2 import Message as PbMessage

from quiver.client.message import RESERVED_PROPERTIES, SHARDING_KEY, TIMER_DELIVER_MS, Message, MessageExt
from quiver.wire.names import shown, topic_problem

from .statuses import Refused

MAX_TAG_CHARS = 128
MAX_KEY_CHARS = 128
MAX_KEYS = 32
MAX_GROUP_CHARS = 64            # RocketMQ 5's message group limit
MAX_PROPERTIES_BYTES = 16 * 1024
MAX_DELAY_MS = 40 * 24 * 3600 * 1000   # RocketMQ 5's default timer horizon (40 days)
_HIDDEN = RESERVED_PROPERTIES | {SHARDING_KEY, TIMER_DELIVER_MS, "__transactionId__", "__CRC32#"}


@dataclass(frozen=True)
class Inbound:
    msg: Message
    kind: int            # MessageType.NORMAL / FIFO / DELAY / TRANSACTION
    group: str | None    # FIFO message group: the orderly queue's key
    client_id: str       # the message id the client generated (echoed in traces only)


def millis(value, code: int, what: str) -> int:
    """A Timestamp or Duration in ms; Refused(code) when it is outside protobuf's valid range."""
    try:
        return value.ToMilliseconds()
    except ValueError:
        raise Refused(code, f"{what} is out of range") from None


def _check_text(value: str, what: str, limit: int, code: int) -> None:
    if not value.strip() or len(value) > limit or not value.isprintable():
        raise Refused(code, f"{what} {shown(value)} must be 1..{limit} printable characters, not blank")


def _body(pm: PbMessage, max_bytes: int) -> bytes:
    body = pm.body
    enc = pm.system_properties.body_encoding
    if enc == Encoding.GZIP:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            body = d.decompress(body, max_bytes + 1)
        except zlib.error:
            raise Refused(Code.MESSAGE_CORRUPTED, "body_encoding GZIP but the body is not gzip data") from None
    elif enc not in (Encoding.IDENTITY, Encoding.ENCODING_UNSPECIFIED):
        raise Refused(Code.BAD_REQUEST, f"body_encoding {enc} is not supported: send IDENTITY or GZIP")
    if not body:
        raise Refused(Code.MESSAGE_BODY_EMPTY, "the message body is empty")
    if len(body) > max_bytes:
        raise Refused(Code.MESSAGE_BODY_TOO_LARGE, f"the message body is over {max_bytes} bytes")
    return body


def _properties(pm: PbMessage) -> dict[str, str]:
    props, size = {}, 0
    for k, v in pm.user_properties.items():
        if not k or k in _HIDDEN or not (k + v).isprintable():
            raise Refused(Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
                          f"property {shown(k)} is empty, reserved or holds a control character")
        size += len(k.encode()) + len(v.encode()) + 2
        props[k] = v
    if size > MAX_PROPERTIES_BYTES:
        raise Refused(Code.MESSAGE_PROPERTIES_TOO_LARGE, f"user properties are over {MAX_PROPERTIES_BYTES} bytes")
    return props


def inbound(pm: PbMessage, max_body_bytes: int) -> Inbound:
    topic = pm.topic.name
    problem = topic_problem(topic)
    if problem:
        raise Refused(Code.ILLEGAL_TOPIC, problem)
    sp = pm.system_properties
    tag = sp.tag if sp.HasField("tag") else None
    if tag is not None:
        _check_text(tag, "tag", MAX_TAG_CHARS, Code.ILLEGAL_MESSAGE_TAG)
        if "|" in tag:
            raise Refused(Code.ILLEGAL_MESSAGE_TAG, f"tag {shown(tag)} may not contain '|'")
    if len(sp.keys) > MAX_KEYS:
        raise Refused(Code.ILLEGAL_MESSAGE_KEY, f"at most {MAX_KEYS} keys")
    for k in sp.keys:
        _check_text(k, "key", MAX_KEY_CHARS, Code.ILLEGAL_MESSAGE_KEY)
        if " " in k:
            raise Refused(Code.ILLEGAL_MESSAGE_KEY, f"key {shown(k)} may not contain a space")
    group = sp.message_group if sp.HasField("message_group") else None
    if group is not None:
        _check_text(group, "message group", MAX_GROUP_CHARS, Code.ILLEGAL_MESSAGE_GROUP)
    props = _properties(pm)
    deliver_at = None
    if sp.HasField("delivery_timestamp"):
        deliver_at = millis(sp.delivery_timestamp, Code.ILLEGAL_DELIVERY_TIME, "delivery timestamp")
        if deliver_at - int(time.time() * 1000) > MAX_DELAY_MS:
            raise Refused(Code.ILLEGAL_DELIVERY_TIME, f"delivery timestamp {deliver_at} is more than 40 days ahead")
    kind = _kind(sp.message_type, group, deliver_at)
    if group is not None:
        props[SHARDING_KEY] = group
    msg = Message(topic, _body(pm, max_body_bytes), tags=tag, keys=list(sp.keys) or None, properties=props,
                  deliver_at=deliver_at)
    return Inbound(msg, kind, group, sp.message_id)


def _kind(declared: int, group: str | None, deliver_at: int | None) -> int:
    """The message's type from its properties; Refused when the declared type says otherwise."""
    if group is not None and deliver_at is not None:
        raise Refused(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "a message has a message group or a delivery "
                                                                "timestamp, not both")
    implied = MessageType.FIFO if group is not None else MessageType.DELAY if deliver_at is not None else None
    if declared == MessageType.TRANSACTION and implied is None:
        return MessageType.TRANSACTION
    actual = implied or MessageType.NORMAL
    if declared not in (MessageType.MESSAGE_TYPE_UNSPECIFIED, actual):
        raise Refused(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                      f"message type {MessageType.Name(declared)} does not match its properties "
                      f"({MessageType.Name(actual)}: message group -> FIFO, delivery timestamp -> DELAY)")
    return actual


def outbound(m: MessageExt, invisible_ms: int) -> PbMessage:
    pm = PbMessage(body=m.body)
    pm.topic.name = m.topic
    for k, v in m.properties.items():
        if k not in _HIDDEN:
            pm.user_properties[k] = v
    sp = pm.system_properties
    if m.tags:
        sp.tag = m.tags
    sp.keys.extend(m.keys)
    sp.message_id = m.msg_id
    sp.body_digest.type = DigestType.CRC32
    sp.body_digest.checksum = f"{zlib.crc32(m.body) & 0xFFFFFFFF:08X}"
    sp.body_encoding = Encoding.IDENTITY
    group = m.properties.get(SHARDING_KEY)
    due = m.properties.get(TIMER_DELIVER_MS)
    if group:
        sp.message_group = group
        sp.message_type = MessageType.FIFO
    elif due and due.isdigit():
        sp.delivery_timestamp.FromMilliseconds(int(due))
        sp.message_type = MessageType.DELAY
    else:
        sp.message_type = MessageType.NORMAL
    sp.born_timestamp.FromMilliseconds(m.born_timestamp)
    sp.store_timestamp.FromMilliseconds(m.store_timestamp)
    sp.born_host = ""
    sp.store_host = m.broker
    sp.queue_id = m.queue_id
    sp.queue_offset = m.queue_offset
    sp.receipt_handle = m.receipt_handle or ""
    sp.invisible_duration.FromMilliseconds(invisible_ms)
    sp.delivery_attempt = m.reconsume_times + 1
    return pm
