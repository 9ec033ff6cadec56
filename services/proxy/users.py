"""Who a v2 request acts as: AK/SK signatures checked, each access key served with its Quiver user's key.

RocketMQ 5 clients sign every call: header `authorization` =
`MQv2-HMAC-SHA1 Credential=<access key>, SignedHeaders=x-mq-date-time, Signature=<hex>`,
the HMAC-SHA1 of the `x-mq-date-time` header under the secret key. With --access-keys,
a JSON file (mode 0600)

    {"<access key>": {"secret": "<secret key>", "credentials": "<a Quiver user's key file>"}}

the proxy checks the signature and serves the request with a `Backend` (SDK clients) holding
that user's CURVE key, built on first use, so the cluster's ACL decides as it does for the
user's own SDK (a refusal comes back FORBIDDEN). Without it: auth off, or auth on with
--serve-unverified, every request gets the proxy's own backend; auth on otherwise, every
request is UNAUTHORIZED. Like RocketMQ's, the signature covers the date header only; its date
must be within --signature-window-s (15 minutes, as AWS SigV4) of the proxy's clock, read as UTC
or as the proxy's local time (the 5.x clients send their local time labelled Z), so a captured
header stops working after the window.
"""

import hmac
import re
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from hashlib import sha1

from rocketmq.grpc_protocol.definition_pb2 import Code

from quiver.client.base import ClientBase
from quiver.client.producer import Producer
from quiver.wire.curve import Credentials, load_secret_map

from .receiving import Receiving
from .routes import Routes
from .statuses import Refused
from .transactions import TxProducer

_AUTH = re.compile(r"MQv2-HMAC-SHA1 Credential=([^,\s]{1,256}), SignedHeaders=x-mq-date-time, "
                   r"Signature=([0-9a-fA-F]{40})\Z")
MAX_ACCESS_KEYS = 10_000


@dataclass
class Backend:
    """One Quiver identity's SDK clients; `access_key` "" for the proxy's own."""
    client: ClientBase
    producer: Producer
    tx: TxProducer
    routes: Routes
    receiving: Receiving
    access_key: str = ""

    @classmethod
    def start(cls, config, credentials, forward, access_key: str = "") -> "Backend":
        timeout = config.request_timeout_ms / 1000
        client = ClientBase(config.namesrv, timeout, credentials=credentials)
        producer = Producer("proxy", config.namesrv, send_timeout=timeout,
                            max_message_bytes=config.max_body_bytes, credentials=credentials)
        tx = TxProducer(config.transaction_group, config.namesrv, forward, send_timeout=timeout, auto_batch=False,
                        max_message_bytes=config.max_body_bytes, credentials=credentials)
        for c in (client, producer, tx):
            c.start()
        return cls(client, producer, tx, Routes(client, config.message_types()), Receiving(client, config),
                   access_key)

    def shutdown(self) -> None:
        for c in (self.tx, self.producer, self.client):
            c.shutdown()


def load_access_keys(path: str) -> dict[str, tuple[bytes, Credentials]]:
    """--access-keys: {access key: (secret, the user's Credentials)}; ValueError saying what is wrong."""
    def ok(ak: str) -> bool:
        return bool(_AUTH.fullmatch(f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, "
                                    f"Signature={'0' * 40}"))
    keys = load_secret_map(path, "--access-keys", "secret", MAX_ACCESS_KEYS, ok)
    return {ak: (sk.encode(), creds) for ak, (sk, creds) in keys.items()}


def signed_access_key(metadata, keys: dict, window_s: int = 900, now: float | None = None) -> str:
    """The access key whose secret signed this call, its date within `window_s` of now;
    Refused(UNAUTHORIZED) otherwise."""
    headers = {k: v for k, v in metadata if k in ("authorization", "x-mq-date-time")}
    m = _AUTH.fullmatch(headers.get("authorization", ""))
    date = headers.get("x-mq-date-time", "")
    if m is None or not date or len(date) > 64:
        raise Refused(Code.UNAUTHORIZED, "auth is on: sign requests with an access key (ClientConfiguration's "
                                         "Credentials(ak, sk))")
    entry = keys.get(m.group(1))
    want = hmac.new(entry[0], date.encode(), sha1).hexdigest() if entry else ""
    if entry is None or not hmac.compare_digest(want, m.group(2).lower()):
        raise Refused(Code.UNAUTHORIZED, "unknown access key or wrong signature")
    skew = date_skew_s(date, time.time() if now is None else now)
    if skew is None or skew > window_s:
        raise Refused(Code.UNAUTHORIZED, f"x-mq-date-time {date!r} is not within {window_s} s of the proxy's clock "
                                         "(UTC or its local time): sign each call with the current time "
                                         "(yyyyMMddTHHmmssZ) and keep the client's clock right")
    return m.group(1)


def date_skew_s(date: str, now: float) -> float | None:
    """Seconds between a signature's date and `now`, read as UTC or as local time (the nearer);
    None when it is not yyyyMMddTHHmmssZ."""
    try:
        stamp = datetime.strptime(date, "%Y%m%dT%H%M%SZ")
    except ValueError:
        return None
    as_utc = stamp.replace(tzinfo=timezone.utc).timestamp()
    as_local = stamp.timestamp()     # naive: the proxy's local time
    return min(abs(now - as_utc), abs(now - as_local))


class Backends:
    """The backend each request acts through (see the module docstring)."""

    def __init__(self, config, forward):
        self.config = config
        self.forward = forward
        self.keys = load_access_keys(config.access_keys) if config.access_keys else {}
        self.own = Backend.start(config, config.key_file, forward)
        self._users: dict[str, Backend] = {}
        self._lock = threading.Lock()

    def for_call(self, metadata) -> Backend:
        if self.keys:
            ak = signed_access_key(metadata, self.keys, self.config.signature_window_s)
            with self._lock:
                b = self._users.get(ak)
                if b is None:
                    b = self._users[ak] = Backend.start(self.config, self.keys[ak][1], self.forward, ak)
                return b
        if self.config.closed:
            raise Refused(Code.UNAUTHORIZED, "auth is on and this proxy has no --access-keys: it serves no "
                                             "RocketMQ 5 client (or start it with --serve-unverified)")
        return self.own

    def every(self) -> list[Backend]:
        with self._lock:
            return [self.own, *self._users.values()]

    def shutdown(self) -> None:
        for b in self.every():
            b.shutdown()
