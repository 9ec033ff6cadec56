"""Keys and CURVE sockets: who a client is, and how its sockets encrypt and authenticate.

With auth on, every Quiver socket speaks ZeroMQ CURVE: the services' ROUTERs
hold the cluster's server key pair, and every client (an app, the CLI, or a
service calling another) holds its own key pair plus the server's public key.
The server side maps the client's public key to a principal (runtime/gate.py);
nothing a request says about itself is trusted.

A key file is JSON, readable only by its owner::

    {"user": "admin", "public_key": "<z85>", "secret_key": "<z85>", "server_key": "<z85>"}

`quiver auth init DIR` writes the auth dir: `server.key` (the cluster's server
pair), `services/<role>.key` (one per service kind) and `admin.key` (a SUPER
user). Clients take `credentials=` a key file path or a `Credentials`, or the
path in QUIVER_CREDENTIALS; a process that runs a service uses its service key
for every outgoing socket (`use_process_credentials`).
"""

import dataclasses
import json
import os
import stat
import threading

import zmq

from quiver.errors import ClientError

SERVICE_KINDS = ("namesrv", "broker", "filter", "scheduler", "txn-checker")
# the roles a service key carries (a broker is also the replica of its master)
SERVICE_ROLES = {"namesrv": ("namesrv",), "broker": ("broker", "replica"), "filter": ("filter",),
                 "scheduler": ("scheduler",), "txn-checker": ("txn-checker",)}
_Z85_KEY_CHARS = 40


@dataclasses.dataclass(frozen=True)
class Credentials:
    """A client's identity: its name, its CURVE key pair and the cluster's server public key."""
    user: str
    public_key: str
    secret_key: str
    server_key: str

    def __post_init__(self):
        for name in ("public_key", "secret_key", "server_key"):
            if not _is_z85_key(getattr(self, name)):
                raise ClientError(f"credentials of {self.user!r}: {name} is not a 40-character Z85 CURVE key")

    def __repr__(self) -> str:  # never print a secret
        return f"Credentials(user={self.user!r}, public_key={self.public_key!r})"


@dataclasses.dataclass(frozen=True)
class KeyPair:
    public_key: str
    secret_key: str

    @classmethod
    def generate(cls) -> "KeyPair":
        public, secret = zmq.curve_keypair()
        return cls(public.decode("ascii"), secret.decode("ascii"))


def _is_z85_key(value) -> bool:
    return isinstance(value, str) and len(value) == _Z85_KEY_CHARS and value.isascii()


# ---- files ---------------------------------------------------------------------------------------


def write_private(path: str, data: dict) -> None:
    """Write a JSON key file readable only by its owner (created 0600, replaced atomically)."""
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def check_private(path: str, what: str) -> None:
    """Refuse a key file or an auth dir that group or others may read or write: a secret key
    another account could copy is not one to authenticate with (nor a dir it could swap keys in)."""
    if os.name != "posix":
        return
    try:
        st = os.stat(path)
    except OSError:
        return   # the reader says what is wrong with it
    is_dir = stat.S_ISDIR(st.st_mode)
    if st.st_mode & (0o077 if is_dir else 0o066):
        raise ClientError(f"{what} {path} is open to group or others (mode {stat.S_IMODE(st.st_mode):04o}): "
                          f"run chmod {'700' if is_dir else '600'} {path}")


def _read_json(path: str, what: str) -> dict:
    check_private(path, what)
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        raise ClientError(f"{what} {path} does not exist") from None
    except (OSError, ValueError) as exc:
        raise ClientError(f"{what} {path} cannot be read: {exc}") from None
    if not isinstance(data, dict):
        raise ClientError(f"{what} {path} is not a JSON object")
    return data


def write_credentials(path: str, creds: Credentials) -> None:
    write_private(path, {"user": creds.user, "public_key": creds.public_key,
                         "secret_key": creds.secret_key, "server_key": creds.server_key})


def read_credentials(path: str) -> Credentials:
    data = _read_json(path, "key file")
    try:
        return Credentials(str(data["user"]), data["public_key"], data["secret_key"], data["server_key"])
    except KeyError as exc:
        raise ClientError(f"key file {path} has no {exc.args[0]!r}") from None


def load_secret_map(path: str, flag: str, secret: str, limit: int, name_ok=None) -> dict[str, tuple[str, Credentials]]:
    """A gateway's {name: {<secret>: "...", "credentials": "<key file>"}} file (the Kafka gateway's
    SASL users, the proxy's access keys) as {name: (secret, Credentials)}; ValueError saying what
    is wrong. It holds secrets: refused if group or others may read it, like a key file."""
    try:
        check_private(path, flag)
        with open(path) as f:
            data = json.load(f)
    except ClientError as exc:
        raise ValueError(str(exc)) from None
    except (OSError, ValueError) as exc:
        raise ValueError(f"{flag} {path}: {exc}") from None
    if not isinstance(data, dict) or not 0 < len(data) <= limit:
        raise ValueError(f"{flag} {path}: a JSON object of 1..{limit} entries")
    out = {}
    for name, entry in data.items():
        if (name_ok is not None and not name_ok(name)) or not isinstance(entry, dict) \
                or not isinstance(entry.get(secret), str) or not entry[secret] \
                or not isinstance(entry.get("credentials"), str):
            raise ValueError(f"{flag} {path}: entry {name[:40]!r} is not "
                             f'{{"{secret}": "...", "credentials": "<key file>"}}'
                             + (" under a name without spaces or commas" if name_ok is not None else ""))
        out[name] = (entry[secret], read_credentials(entry["credentials"]))
    return out


def credentials_from(value) -> Credentials | None:
    """`credentials=` as given to a client: a path, Credentials, or None: then the process's service
    key (inside a service, which must never act as a user), else QUIVER_CREDENTIALS if set."""
    if value is None:
        value = process_credentials() or os.environ.get("QUIVER_CREDENTIALS") or None
        if value is None:
            return None
    if isinstance(value, Credentials):
        return value
    if isinstance(value, (str, os.PathLike)):
        return read_credentials(os.fspath(value))
    raise ClientError(f"credentials must be a key file path or a Credentials, got {type(value).__name__}")


class AuthDir:
    """What a service reads from `--auth-dir`: the server pair and the service keys."""

    def __init__(self, path: str):
        self.path = path
        check_private(path, "auth dir")
        check_private(os.path.join(path, "services"), "auth dir")
        server = _read_json(os.path.join(path, "server.key"), "server key file")
        try:
            self.server = KeyPair(server["public_key"], server["secret_key"])
        except KeyError as exc:
            raise ClientError(f"server key file in {path} has no {exc.args[0]!r}") from None
        if not (_is_z85_key(self.server.public_key) and _is_z85_key(self.server.secret_key)):
            raise ClientError(f"server key file in {path} does not hold Z85 CURVE keys")
        self.services: dict[str, Credentials] = {}
        for kind in SERVICE_KINDS:
            p = os.path.join(path, "services", f"{kind}.key")
            if os.path.exists(p):
                self.services[kind] = read_credentials(p)
        admin = os.path.join(path, "admin.key")
        self.admin = read_credentials(admin) if os.path.exists(admin) else None

    def service_credentials(self, kind: str) -> Credentials:
        creds = self.services.get(kind)
        if creds is None:
            raise ClientError(f"auth dir {self.path} has no services/{kind}.key (run: quiver auth init {self.path})")
        return creds

    def service_keys(self) -> dict[str, str]:
        """public key -> service kind, for the ZAP handler."""
        return {c.public_key: kind for kind, c in self.services.items()}


def init_auth_dir(path: str, admin_user: str = "admin") -> Credentials:
    """Create an auth dir (refuses to overwrite one): server pair, service keys, a SUPER admin key."""
    if os.path.exists(os.path.join(path, "server.key")):
        raise ClientError(f"{path} already holds a server key; remove it first to start over")
    os.makedirs(os.path.join(path, "services"), mode=0o700, exist_ok=True)
    os.chmod(path, 0o700)   # makedirs gives only the last level its mode
    server = KeyPair.generate()
    write_private(os.path.join(path, "server.key"), {"public_key": server.public_key,
                                                     "secret_key": server.secret_key})
    for kind in SERVICE_KINDS:
        pair = KeyPair.generate()
        write_credentials(os.path.join(path, "services", f"{kind}.key"),
                          Credentials(f"service:{kind}", pair.public_key, pair.secret_key, server.public_key))
    pair = KeyPair.generate()
    admin = Credentials(admin_user, pair.public_key, pair.secret_key, server.public_key)
    write_credentials(os.path.join(path, "admin.key"), admin)
    return admin


# ---- sockets -------------------------------------------------------------------------------------

_process = {"creds": None}
_process_lock = threading.Lock()


def use_process_credentials(creds: Credentials | None) -> None:
    """The identity of every outgoing socket this process makes without explicit credentials
    (a service's own key)."""
    with _process_lock:
        _process["creds"] = creds


def process_credentials() -> Credentials | None:
    return _process["creds"]


def secure_client(sock: zmq.Socket, creds: Credentials | None) -> None:
    """Before connect: make `sock` a CURVE client with `creds` (None: plain, auth off)."""
    if creds is None:
        return
    sock.curve_secretkey = creds.secret_key.encode("ascii")
    sock.curve_publickey = creds.public_key.encode("ascii")
    sock.curve_serverkey = creds.server_key.encode("ascii")


def secure_server(sock: zmq.Socket, server: KeyPair, domain: str) -> None:
    """Before bind: make `sock` a CURVE server whose peers the ZAP handler authenticates."""
    sock.zap_domain = domain.encode()
    sock.curve_server = True
    sock.curve_secretkey = server.secret_key.encode("ascii")
    sock.curve_publickey = server.public_key.encode("ascii")
