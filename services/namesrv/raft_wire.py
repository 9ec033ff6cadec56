"""The controller's Raft wire, made safe: pysyncobj's TCP transport with bounded frames, every
frame authenticated before it is decoded, and a pickle decoder that builds plain data only.

pysyncobj frames each message as a 4-byte length and zlib(pickle(message)), Fernet-encrypted
when it has a password, and reads a frame whole before looking at it. Here:

- a connection that has not yet shown one authenticated frame may send frames of at most
  PRE_AUTH_MAX bytes (its first frame is a 32-byte nonce), any other at most MAX_FRAME: a
  bigger length prefix drops the connection before its body is read, and the read buffer
  never holds more than one frame plus one recv;
- no frame is decoded without a key (Fernet: HMAC-SHA256 checked before decryption);
- decompression is bounded (MAX_FRAME out), and the unpickler resolves only the few names
  pysyncobj's messages, commands and snapshots use (no callable that runs code);
- pysyncobj's own unpickling of commands and snapshots (`pysyncobj.pickle.loads/load`) goes
  through the same restricted decoder (`install()`), so a key holder's bytes cannot run code
  either.

Also records when each peer was last heard (`heard`): the controller's majority-contact check.
The key itself: raft_key.
"""

import errno
import io
import logging
import pickle
import struct
import time
import zlib

import pysyncobj.pickle as pysyncobj_pickle
from pysyncobj.node import Node, TCPNode
from pysyncobj.tcp_connection import CONNECTION_STATE, TcpConnection
from pysyncobj.transport import TCPTransport

log = logging.getLogger(__name__)

PRE_AUTH_MAX = 4096          # the handshake's frames are ~200 bytes
MAX_FRAME = 8 << 20          # pysyncobj batches entries and snapshot chunks at 64 KiB
_HEADER = struct.Struct("i")  # pysyncobj's length prefix (native int)
MAX_UNKNOWN = 256            # accepted connections that have not yet named their node
HANDSHAKE_S = 3.0            # ... and how long each may take to


class UnsafePickle(pickle.UnpicklingError):
    pass


def _latin1(text, encoding="latin1"):
    """Protocol 2 pickles bytes as _codecs.encode(str, 'latin1'); only that encoding is allowed."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1", "iso-8859-1", "iso8859-1"):
        raise UnsafePickle("bytes in a Raft message must be latin-1 text")
    return text.encode("latin1")


def _empty_bytes(*args):
    """Protocol 2 pickles b"" as bytes(); bytes(n) would allocate n bytes, so no arguments."""
    if args:
        raise UnsafePickle("bytes() with arguments in a Raft message")
    return b""


# protocol 2 names builtins `__builtin__`
_ALLOWED = {("builtins", "bytes"): _empty_bytes, ("__builtin__", "bytes"): _empty_bytes,
            ("builtins", "set"): set, ("builtins", "frozenset"): frozenset,
            ("__builtin__", "set"): set, ("__builtin__", "frozenset"): frozenset,
            ("_codecs", "encode"): _latin1, ("codecs", "encode"): _latin1,
            ("pysyncobj.node", "Node"): Node, ("pysyncobj.node", "TCPNode"): TCPNode}


class _Restricted(pickle.Unpickler):
    def find_class(self, module, name):
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise UnsafePickle(f"{module}.{name} is not allowed in a Raft message") from None


def safe_loads(data) -> object:
    """pickle.loads that builds only containers, numbers, text, bytes and pysyncobj nodes."""
    return _Restricted(io.BytesIO(bytes(data)), encoding="latin1").load()


def safe_load(file) -> object:
    return _Restricted(file, encoding="latin1").load()


def install() -> None:
    """pysyncobj decodes commands (log entries from the leader) and snapshots (its dump file, and
    snapshots a leader streams) with pysyncobj.pickle: route those through the restricted decoder."""
    pysyncobj_pickle.loads = safe_loads
    pysyncobj_pickle.load = safe_load


def _inflate(data: bytes) -> bytes:
    d = zlib.decompressobj()
    out = d.decompress(data, MAX_FRAME)
    if d.unconsumed_tail:
        raise ValueError(f"a Raft frame inflates past {MAX_FRAME} bytes")
    return out


_drops = {"count": 0, "logged_at": 0.0}
DROP_LOG_S = 10.0


def _note_drop(why: str) -> None:
    """One log line per DROP_LOG_S however many connections a peer makes us drop."""
    _drops["count"] += 1
    now = time.monotonic()
    if now - _drops["logged_at"] >= DROP_LOG_S:
        log.warning("Raft port: dropped %d connection(s) in the last %.0f s; the last: %s", _drops["count"],
                    DROP_LOG_S, why)
        _drops["count"], _drops["logged_at"] = 0, now


class SafeConnection(TcpConnection):
    """pysyncobj's TcpConnection with its read path replaced (its buffer and socket are private:
    these methods carry the mangled names its other methods call)."""

    authenticated = False

    def _buffer(self) -> bytearray:
        buf = self._TcpConnection__readBuffer
        if not isinstance(buf, bytearray):  # connect()/disconnect() reset it to bytes()
            buf = self._TcpConnection__readBuffer = bytearray(buf)
            self.authenticated = False
        return buf

    def _limit(self) -> int:
        return MAX_FRAME if self.authenticated else PRE_AUTH_MAX

    def _refuse(self, why: str) -> None:
        _note_drop(why)
        self.disconnect()

    def _frame_len(self, buf: bytearray) -> int | None:
        """The next frame's body length, None if its header is not in yet; -1 if refused."""
        if len(buf) < 4:
            return None
        n = _HEADER.unpack_from(buf)[0]
        if n <= 0 or n > self._limit():
            self._refuse(f"frame of {n} bytes (limit {self._limit()}"
                         f"{'' if self.authenticated else ' before authentication'})")
            return -1
        return n

    def _TcpConnection__processRead(self):
        buf = self._buffer()
        n = self._frame_len(buf)
        if n == -1:
            return False
        if n is not None and len(buf) >= 4 + n:
            return False  # a whole frame is in: decode it before reading more (bounded buffer)
        want = (4 - len(buf)) if n is None else (4 + n - len(buf))
        sock = self._TcpConnection__socket
        try:
            incoming = sock.recv(max(1, min(want, self._TcpConnection__recvBufferSize)))
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.EWOULDBLOCK):
                self.disconnect()
            return False
        if not incoming:
            self.disconnect()
            return False
        buf += incoming
        return self._frame_len(buf) != -1

    def _TcpConnection__processParseMessage(self):
        if self.state == CONNECTION_STATE.DISCONNECTED:
            return None
        buf = self._buffer()
        n = self._frame_len(buf)
        if n is None or n == -1 or len(buf) < 4 + n:
            return None
        data = bytes(buf[4:4 + n])
        del buf[:4 + n]
        try:
            message = self._decode(data)
        except Exception as exc:  # anything a peer sends must not stop the Raft thread
            self._refuse(f"undecodable frame ({type(exc).__name__}: {exc})")
            return None
        return message  # more may wait in the kernel: the (level-triggered) poll reads it next

    def _decode(self, data: bytes):
        if self.encryptor is None:
            raise UnsafePickle("no Raft key: refusing to decode")
        stamp = self.encryptor.extract_timestamp(data)  # checks the HMAC: only key holders get further
        if stamp < self.recvLastTimestamp:
            raise ValueError("frame older than the previous one")
        self.recvLastTimestamp = stamp
        self.authenticated = True
        message = safe_loads(_inflate(self.encryptor.decrypt(data)))
        if self.recvRandKey:
            rand_key, message = message
            if rand_key != self.recvRandKey:
                raise ValueError("frame of another connection (nonce differs)")
        return message


class SafeTransport(TCPTransport):
    """TCPTransport whose connections are SafeConnections, and which notes when each node was
    last heard (time.monotonic(); read from other threads, so its keys never change)."""

    def __init__(self, syncObj, selfNode, otherNodes, heard: dict | None = None):
        self.heard = heard if heard is not None else {n.id: 0.0 for n in otherNodes}
        super().__init__(syncObj, selfNode, otherNodes)

    def addNode(self, node):
        super().addNode(node)
        conn = self._connections.get(node)
        if conn is not None and type(conn) is TcpConnection:
            conn.__class__ = SafeConnection

    def _onNewIncomingConnection(self, conn):
        conn.__class__ = SafeConnection  # TcpServer made it; nothing was read yet
        if len(self._unknownConnections) >= MAX_UNKNOWN:
            _note_drop(f"{MAX_UNKNOWN} connections not yet identified")
            conn.disconnect()
            return
        conn.accepted_at = time.monotonic()
        super()._onNewIncomingConnection(conn)

    def _onTick(self):
        super()._onTick()
        # a peer has HANDSHAKE_S to say who it is; an idle stranger does not hold a slot longer
        now = time.monotonic()
        for conn in [c for c in self._unknownConnections if now - getattr(c, "accepted_at", now) > HANDSHAKE_S]:
            conn.disconnect()
            self._unknownConnections.discard(conn)

    def _onIncomingMessageReceived(self, conn, message):
        # pysyncobj's admin commands (lists: status, add, remove, ...) are not served here
        if isinstance(message, list):
            conn.disconnect()
            self._unknownConnections.discard(conn)
            return
        super()._onIncomingMessageReceived(conn, message)

    def _onMessageReceived(self, node, message):
        if node.id in self.heard:
            self.heard[node.id] = time.monotonic()
        super()._onMessageReceived(node, message)

