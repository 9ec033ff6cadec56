"""Admin's ACL verbs: users and rules, written to every master broker of the cluster.

Brokers store the ACL (one copy each on SQLite, one shared copy on a shared
PostgreSQL); the other services follow the brokers. A change goes to every
master, like mqadmin's `-c cluster`; `acl_list` shows each broker's version so
a broker that missed a change (it was down) is visible, and `acl_sync`
copies one broker's ACL to the others. Only a SUPER user may call these.
"""

import dataclasses
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from quiver.client.base import ClientBase
from quiver.errors import ClientError, QuiverError
from quiver.wire import requests as rq
from quiver.wire.curve import Credentials, KeyPair


@dataclasses.dataclass
class AclChange:
    """What one change did on each master: broker name -> "ok" or the error's text."""
    results: dict[str, str]

    @property
    def ok(self) -> bool:
        return all(v == "ok" for v in self.results.values())


if TYPE_CHECKING:  # type checkers see the ClientBase these commands run on
    _Base = ClientBase
else:
    _Base = object


class AclCommands(_Base):
    """Needs ClientBase (call_broker, all_broker_addrs, credentials)."""

    def _masters(self) -> dict[str, str]:
        masters = self._all_broker_addrs()
        if not masters:
            raise ClientError("no broker is registered with the name servers: nowhere to store the ACL")
        return masters

    def _to_masters(self, req: rq.Schema) -> AclChange:
        results: dict[str, str] = {}
        first_error: QuiverError | None = None
        for name, addr in sorted(self._masters().items()):
            try:
                self._call_broker(addr, req)
                results[name] = "ok"
            except QuiverError as exc:
                results[name] = str(exc)
                first_error = first_error or exc
        if first_error is not None and not any(v == "ok" for v in results.values()):
            raise first_error
        return AclChange(results)

    def acl_add_user(self, name: str, super_user: bool = False) -> Credentials:
        """Add a user with a new key pair (or give an existing user a new one: its old key stops
        working at once). Returns the user's Credentials: save them with
        `quiver.wire.curve.write_credentials(path, creds)` and hand the file to the user."""
        creds = self.credentials
        if creds is None:
            raise ClientError("auth is off for this client: pass credentials= a SUPER user's key file")
        pair = KeyPair.generate()
        self._to_masters(rq.AclUpdateUser(name=name, public_key=pair.public_key,
                                          type="SUPER" if super_user else "NORMAL"))
        return Credentials(name, pair.public_key, pair.secret_key, creds.server_key)

    def acl_delete_user(self, name: str) -> AclChange:
        """Remove a user (its key stops working) on every master."""
        return self._to_masters(rq.AclDeleteUser(name=name))

    def acl_grant(self, user: str, resource: str, actions: str | Iterable[str], deny: bool = False,
                  source: str | None = None) -> AclChange:
        """Allow (or with deny=True, deny) `actions` ("PUB", "SUB", ... or "ALL") on `resource`
        ("cluster", "topic:NAME", "group:NAME", a trailing '*' for a prefix), from `source` (CIDR)."""
        names = [actions] if isinstance(actions, str) else list(actions)
        return self._to_masters(rq.AclGrant(user=user, resource=resource, actions=[a.upper() for a in names],
                                            deny=deny, source=source))

    def acl_revoke(self, user: str, resource: str, actions: str | Iterable[str] | None = None, deny: bool = False,
                   source: str | None = None) -> AclChange:
        """Remove `user`'s rules on `resource` of this decision (`deny`) and `source` on every
        master, or only `actions` ("PUB", "SUB", ...) of them (None: all)."""
        names = [actions] if isinstance(actions, str) else actions
        return self._to_masters(rq.AclRevoke(user=user, resource=resource,
                                             actions=[a.upper() for a in names] if names else None,
                                             deny=deny, source=source))

    def acl_list(self) -> dict[str, dict[str, Any]]:
        """Each master's ACL: broker name -> {"version", "users": [[name, key, type]],
        "rules": [[user, resource, actions, decision, source]]} (or {"error": text})."""
        out: dict[str, dict[str, Any]] = {}
        for name, addr in sorted(self._masters().items()):
            try:
                out[name] = self._call_broker(addr, rq.AclSnapshot()).ext
            except QuiverError as exc:
                out[name] = {"error": str(exc)}
        return out
