"""A service's side of auth: CURVE on its socket, the ZAP handler, and authorizing each request.

The ZAP handler (pyzmq's authenticator, on its own thread) accepts a client's
CURVE key only if it is a service key of the auth dir or a user's key in the
current ACL, and names the connection: `s:<kind>` for a service, the public
key itself for a user. ZeroMQ attaches that name to every frame of the
connection as `User-Id`, so each request is authorized by who holds the key,
never by what the request says. A user's key is looked up in the ACL at every
request: a deleted or rotated key stops working at once, even on a connection
made before.
"""

import logging

from zmq.auth.thread import ThreadAuthenticator

from quiver.errors import NoPermissionError
from quiver.runtime.acl import EMPTY, SUPER, Acl, User
from quiver.wire.access import ACTIONS
from quiver.wire.curve import SERVICE_ROLES, AuthDir, secure_server, use_process_credentials

log = logging.getLogger(__name__)

SERVICE_PREFIX = "s:"
ZAP_DOMAIN = "quiver"
UNKNOWN_KEY_WAIT_S = 1.0   # a follower service's wait for the ACL when a key is new to it


class _Gate(ThreadAuthenticator):
    """ZAP: a known key passes, named as above; any other key gets no connection."""

    def __init__(self, security: "Security", context):
        super().__init__(context, log=logging.getLogger("quiver.zap"))
        self._security = security

    def curve_user_id(self, client_public_key: bytes) -> str:
        from zmq.utils import z85
        return self._security.name_of(z85.encode(client_public_key).decode("ascii")) or ""


class _Keys:
    """The credentials provider pyzmq's authenticator calls with a z85 key."""

    def __init__(self, security: "Security"):
        self._security = security

    def callback(self, domain, key: bytes) -> bool:
        name = key.decode("ascii")
        known = self._security.name_of(name) is not None
        if not known and self._security.on_unknown_key is not None:
            try:
                fetched = self._security.on_unknown_key()  # a user added a moment ago: fetch the ACL now
            except Exception:
                log.exception("fetching the ACL for an unknown key failed")
                return False
            # wait (briefly) for that fetch, so a new user's first connection is not refused;
            # at most two fetches a second start, so unknown keys cannot hold this thread long
            if fetched is not None and fetched.wait(UNKNOWN_KEY_WAIT_S):
                known = self._security.name_of(name) is not None
        return known


class Security:
    """Auth for one service: its server key pair, ZAP handler and the ACL it checks against."""

    def __init__(self, auth_dir: str, kind: str, acl: Acl = EMPTY):
        self.dir = AuthDir(auth_dir)
        self.kind = kind
        self.credentials = self.dir.service_credentials(kind)  # for this service's own calls
        self._services = {key: SERVICE_PREFIX + k for key, k in self.dir.service_keys().items()}
        if acl is EMPTY and self.dir.admin is not None:
            # until the brokers' ACL arrives, the auth dir's admin key is the one user (health checks, setup)
            acl = Acl([User(self.dir.admin.user, self.dir.admin.public_key, SUPER)], version="")
        self.acl = acl
        self._gate = None
        self.on_unknown_key = None  # fn(): set by an AclFollower (services that do not store the ACL)
        self.on_denied = None       # fn(then) -> held?: the same follower, for a refused request

    # ---- ZAP --------------------------------------------------------------------------------

    def name_of(self, public_key: str) -> str | None:
        """The name ZAP gives a connection with this key, or None (refused)."""
        svc = self._services.get(public_key)
        if svc is not None:
            return svc
        return public_key if public_key in self.acl.by_key else None

    def start(self, context) -> None:
        if self._gate is None:
            self._gate = _Gate(self, context)
            self._gate.start()
            self._gate.configure_curve_callback(ZAP_DOMAIN, credentials_provider=_Keys(self))

    def stop(self) -> None:
        if self._gate is not None:
            self._gate.stop()
            self._gate = None

    def secure(self, sock) -> None:
        secure_server(sock, self.dir.server, ZAP_DOMAIN)

    def set_acl(self, acl: Acl) -> None:
        """Swap in a new snapshot (one reference assignment: the ZAP thread sees old or new)."""
        self.acl = acl

    # ---- authorization ---------------------------------------------------------------------

    def who(self, user_id: str) -> str:
        if user_id.startswith(SERVICE_PREFIX):
            return f"service {user_id[2:]}"
        user = self.acl.by_key.get(user_id)
        return f"user {user.name!r}" if user is not None else "a key that is no longer a user's (deleted or rotated)"

    def check(self, user_id: str, source: str | None, access, args) -> str | None:
        """None if `user_id` may send a request declared `access` with these args, else why not."""
        if user_id.startswith(SERVICE_PREFIX):
            if not access.roles or access.roles.intersection(SERVICE_ROLES.get(user_id[2:], ())):
                return None  # services act for the cluster; role-only codes only for their roles
            return f"service {user_id[2:]} may not send this (needs {access.describe()})"
        if access.roles:
            return f"only a Quiver service ({access.describe()}) may send this; no user key can"
        acl = self.acl
        user = acl.by_key.get(user_id)
        if user is None:
            return "this key is no longer a user's (deleted or rotated): get a new key file"
        if user.is_super or access.anyone:
            return None
        if access.super_only:
            return f"user {user.name!r} is not a SUPER user"
        for need in access.needs:
            for resource in need.resources(args):
                if not acl.any_allowed(user.name, resource, need.actions, source):
                    return _lacks(user.name, need.actions, resource)
        return None

    def authorize(self, user_id: str, source: str | None, resource: str, actions) -> None:
        """A check the handler makes once it knows the resource (declared `later`)."""
        if user_id.startswith(SERVICE_PREFIX):
            return
        user = self.acl.by_key.get(user_id)
        if user is None:
            raise NoPermissionError("this key is no longer a user's (deleted or rotated): get a new key file")
        if not self.acl.any_allowed(user.name, resource, actions, source):
            raise NoPermissionError(_lacks(user.name, actions, resource))


def _lacks(user: str, actions, resource: str) -> str:
    acts = "|".join(sorted(actions))
    return (f"user {user!r} lacks {acts} on {resource} "
            f"(an admin can grant it: quiver acl grant {user} --resource {resource} "
            f"--actions {min(actions, key=ACTIONS.index)})")


def service_security(config, kind: str) -> Security | None:
    """A service's Security from its `auth_dir` setting (None: auth off). Its service key
    becomes the identity of every socket the process opens to other services."""
    if not config.auth_dir:
        return None
    security = Security(config.auth_dir, kind)
    use_process_credentials(security.credentials)
    return security
