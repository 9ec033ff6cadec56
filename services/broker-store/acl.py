"""The broker's ACL: users and rules in the metadata database, one snapshot in memory.

Rows are cluster-wide (no broker column): brokers that share one PostgreSQL
share one ACL, and `Admin` writes every change to each master of the cluster
(on SQLite each keeps its copy). Each change is stored first, then a new `Acl`
snapshot replaces the one the ZAP handler and every request check read — a
change is visible at the next request. Slaves take the master's snapshot with
the metadata sync. Other services (name servers, filters, scheduler, txn-checker)
fetch the snapshot with ACL_SNAPSHOT and its content version.

With an auth dir and no user at all, the broker adds the auth dir's admin key
as the SUPER user `admin` (once: a deleted admin stays deleted).
"""

import hashlib
import logging

import orjson
from sqlalchemy import Column, Integer, MetaData, String, Table, delete, insert, select, update

from quiver.errors import InvalidParameterError, QuiverError, ServiceNotAvailableError
from quiver.runtime.acl import SUPER, Acl, Rule, User, check_rule, user_problem
from quiver.wire.codes import RequestCode, ResponseCode
from quiver.wire.replies import AclSnapshotReply, AclVersionReply

log = logging.getLogger(__name__)

_meta = MetaData()
users_t = Table("acl_users", _meta,
                Column("name", String(64), primary_key=True),
                Column("public_key", String(40), nullable=False, unique=True),
                Column("type", String(8), nullable=False))
rules_t = Table("acl_rules", _meta,
                Column("id", Integer, primary_key=True, autoincrement=True),
                Column("user", String(64), nullable=False, index=True),
                Column("resource", String(262), nullable=False),
                Column("actions", String(64), nullable=False),   # comma-separated
                Column("decision", String(5), nullable=False),   # ALLOW | DENY
                Column("source", String(64), nullable=False, default=""))


def version_of(acl: Acl) -> str:
    """A content version: equal snapshots (on any broker) have equal versions."""
    data = acl.snapshot()
    data.pop("version", None)
    canon = orjson.dumps({"users": sorted(data["users"]), "rules": sorted(map(str, data["rules"]))})
    return hashlib.sha256(canon).hexdigest()[:32]


class AclStore:
    def __init__(self, engine, on_change=None):
        self.engine = engine
        self.on_change = on_change  # fn(Acl): the service's Security.set_acl
        # the tables come with the metadata database's migrations (migrations/versions/0003_acl.py)
        self.acl = self._load()

    def _load(self) -> Acl:
        with self.engine.connect() as conn:
            users = [User(r.name, r.public_key, r.type) for r in conn.execute(select(users_t))]
            rules = [Rule(r.user, r.resource, frozenset(a for a in r.actions.split(",") if a), r.decision == "DENY",
                          r.source or None) for r in conn.execute(select(rules_t))]
        return self._publish(Acl(users, rules))

    def _publish(self, acl: Acl) -> Acl:
        acl = Acl(acl.users.values(), [r for rs in acl.rules.values() for r in rs], version_of(acl))
        self.acl = acl
        if self.on_change is not None:
            self.on_change(acl)
        return acl

    def _write(self, what: str, fn) -> None:
        try:
            with self.engine.begin() as conn:
                fn(conn)
        except QuiverError:
            raise
        except Exception as exc:  # the database cannot store it: nothing changed in memory
            log.warning("ACL: storing %s failed: %s", what, exc)
            raise ServiceNotAvailableError(f"the metadata database cannot store {what} now: {exc}") from None
        self._load()

    # ---- changes ------------------------------------------------------------------------------

    def seed_admin(self, public_key: str) -> None:
        if not self.acl.users:
            self.put_user("admin", public_key, SUPER)
            log.info("ACL: no users yet; added the auth dir's admin key as SUPER user 'admin'")

    def put_user(self, name: str, public_key: str, type_: str) -> None:
        problem = user_problem(name)
        if problem:
            raise InvalidParameterError(problem)
        holder = self.acl.by_key.get(public_key)
        if holder is not None and holder.name != name:
            raise InvalidParameterError(f"that public key is already user {holder.name!r}'s")

        def write(conn):
            if name in self.acl.users:
                conn.execute(update(users_t).where(users_t.c.name == name).values(public_key=public_key, type=type_))
            else:
                conn.execute(insert(users_t).values(name=name, public_key=public_key, type=type_))
        self._write(f"user {name!r}", write)

    def delete_user(self, name: str) -> bool:
        if name not in self.acl.users:
            return False

        def write(conn):
            conn.execute(delete(rules_t).where(rules_t.c.user == name))
            conn.execute(delete(users_t).where(users_t.c.name == name))
        self._write(f"the deletion of user {name!r}", write)
        return True

    def grant(self, rule: Rule) -> None:
        problem = check_rule(rule)
        if problem:
            raise InvalidParameterError(problem)
        if rule.user not in self.acl.users:
            raise InvalidParameterError(f"no user {rule.user!r}: add it first (quiver acl user add {rule.user})")
        same = self._same(rule)
        actions = set(rule.actions)
        for old in same:
            actions |= old.actions

        def write(conn):
            self._delete_same(conn, rule)
            conn.execute(insert(rules_t).values(user=rule.user, resource=rule.resource,
                                                actions=",".join(sorted(actions)),
                                                decision="DENY" if rule.deny else "ALLOW", source=rule.source or ""))
        self._write(f"a rule of {rule.user!r} on {rule.resource}", write)

    def revoke(self, user: str, resource: str, actions, deny: bool, source: str | None) -> int:
        """Remove the rules of (user, resource, decision, source), or only `actions` of them;
        the number of rules changed."""
        probe = Rule(user, resource, frozenset(actions or ()), deny, source or None)
        same = self._same(probe)
        if not same:
            return 0
        left = set()
        if actions:
            for old in same:
                left |= old.actions
            left -= set(actions)

        def write(conn):
            self._delete_same(conn, probe)
            if left:
                conn.execute(insert(rules_t).values(user=user, resource=resource, actions=",".join(sorted(left)),
                                                    decision="DENY" if deny else "ALLOW", source=source or ""))
        self._write(f"a rule of {user!r} on {resource}", write)
        return len(same)

    def _same(self, rule: Rule) -> list:
        return [r for r in self.acl.rules.get(rule.user, ())
                if r.resource == rule.resource and r.deny == rule.deny and (r.source or None) == (rule.source or None)]

    @staticmethod
    def _delete_same(conn, rule: Rule) -> None:
        conn.execute(delete(rules_t).where(rules_t.c.user == rule.user, rules_t.c.resource == rule.resource,
                                           rules_t.c.decision == ("DENY" if rule.deny else "ALLOW"),
                                           rules_t.c.source == (rule.source or "")))

    def replace(self, snapshot: dict) -> None:
        """A slave takes its master's ACL whole."""
        acl = Acl.from_snapshot(snapshot)
        if version_of(acl) == self.acl.version:
            return

        def write(conn):
            conn.execute(delete(rules_t))
            conn.execute(delete(users_t))
            for u in acl.users.values():
                conn.execute(insert(users_t).values(name=u.name, public_key=u.public_key, type=u.type))
            for rs in acl.rules.values():
                for r in rs:
                    conn.execute(insert(rules_t).values(user=r.user, resource=r.resource,
                                                        actions=",".join(sorted(r.actions)),
                                                        decision="DENY" if r.deny else "ALLOW", source=r.source or ""))
        self._write("the master's ACL", write)


class AclRequests:
    """ACL_UPDATE_USER, ACL_DELETE_USER, ACL_GRANT, ACL_REVOKE, ACL_SNAPSHOT."""

    def __init__(self, store: AclStore):
        self.store = store

    def handlers(self) -> dict:
        return {RequestCode.ACL_UPDATE_USER: self.update_user, RequestCode.ACL_DELETE_USER: self.delete_user,
                RequestCode.ACL_GRANT: self.grant, RequestCode.ACL_REVOKE: self.revoke,
                RequestCode.ACL_SNAPSHOT: self.snapshot}

    def update_user(self, req) -> None:
        a = req.args
        self.store.put_user(a.name, a.public_key, a.type)
        req.reply(ResponseCode.SUCCESS, "", AclVersionReply(version=self.store.acl.version))

    def delete_user(self, req) -> None:
        if not self.store.delete_user(req.args.name):
            req.reply(ResponseCode.QUERY_NOT_FOUND, f"no user {req.args.name!r}")
            return
        req.reply(ResponseCode.SUCCESS, "", AclVersionReply(version=self.store.acl.version))

    def grant(self, req) -> None:
        a = req.args
        self.store.grant(Rule(a.user, a.resource, frozenset(a.actions), a.deny, a.source))
        req.reply(ResponseCode.SUCCESS, "", AclVersionReply(version=self.store.acl.version))

    def revoke(self, req) -> None:
        a = req.args
        n = self.store.revoke(a.user, a.resource, a.actions, a.deny, a.source)
        if not n:
            req.reply(ResponseCode.QUERY_NOT_FOUND, f"user {a.user!r} has no such rule on {a.resource}")
            return
        req.reply(ResponseCode.SUCCESS, "", AclVersionReply(version=self.store.acl.version))

    def snapshot(self, req) -> None:
        acl = self.store.acl
        if req.args.known == acl.version:
            req.reply(ResponseCode.SUCCESS, "", AclSnapshotReply(version=acl.version, unchanged=True))
            return
        req.reply(ResponseCode.SUCCESS, "", AclSnapshotReply(**acl.snapshot()))
