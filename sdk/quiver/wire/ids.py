"""Message ids and host addresses as the record stores them (RocketMQ's MessageDecoder).

Owns the 8-byte host (BORNHOST / STOREHOST: IPv4 + port) and the offset msgId (store host +
CommitLog offset as 32 hex characters), which broker, services and clients all make and read.
Does not own the producer's unique id (UNIQ_KEY: quiver.client.message.UniqueIdMaker).
"""

import socket
import struct


def host_bytes(host: str, port: int) -> bytes:
    """8 bytes: IPv4 + port, as RocketMQ's BORNHOST/STOREHOST."""
    try:
        ip = socket.inet_aton(socket.gethostbyname(host))
    except OSError:
        ip = b"\x7f\x00\x00\x01"
    return ip + struct.pack(">i", port)


def host_str(raw: bytes) -> str:
    return f"{socket.inet_ntoa(raw[:4])}:{struct.unpack('>i', raw[4:8])[0]}"


def offset_msg_id(store_host: bytes, phys_offset: int) -> str:
    return (store_host + struct.pack(">q", phys_offset)).hex().upper()


def parse_offset_msg_id(msg_id: str) -> tuple[str, int]:
    """(broker address, commitlog offset) from an offset msgId."""
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        raise ValueError(f"msg id {msg_id!r} is not hex") from None
    if len(raw) != 16:
        raise ValueError(f"offset msg id must be 32 hex chars, got {len(msg_id)}")
    return host_str(raw[:8]), struct.unpack(">q", raw[8:])[0]
