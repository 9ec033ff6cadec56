"""Access declarations, the ACL's decisions, key files and the service-side check (no sockets)."""

import os
import stat

import pytest

from quiver.errors import ClientError, NoPermissionError
from quiver.runtime.acl import SUPER, Acl, Rule, User, check_rule
from quiver.runtime.security import Security
from quiver.wire import requests as rq
from quiver.wire.access import Access, topic_resource
from quiver.wire.codes import RequestCode
from quiver.wire.curve import Credentials, KeyPair, credentials_from, init_auth_dir, read_credentials
from quiver.wire.schema import request


def test_every_request_code_declares_what_it_needs():
    missing = [c.name for c in RequestCode if c not in rq.SCHEMAS or not isinstance(rq.SCHEMAS[c].ACCESS, Access)]
    assert missing == []


def test_a_code_without_a_declaration_cannot_be_registered():
    with pytest.raises(TypeError, match="needs an Access declaration"):
        request(RequestCode.PING, None)
    with pytest.raises(TypeError):
        request(RequestCode.PING)  # noqa  (the declaration is a required argument)
    with pytest.raises(TypeError, match="must declare"):
        Access()


@pytest.mark.parametrize("code", [RequestCode.REGISTER_BROKER, RequestCode.UNREGISTER_BROKER, RequestCode.HA_TRANSFER,
                                  RequestCode.HA_REPORT, RequestCode.HA_SYNC_METADATA, RequestCode.REGISTER_FILTER_SERVER,
                                  RequestCode.SCHEDULE_REPUT, RequestCode.TRANSACTION_CHECK])
def test_cluster_internal_codes_are_for_service_roles_only(code):
    assert rq.SCHEMAS[code].ACCESS.roles


def test_retry_and_dead_letter_topics_belong_to_their_group():
    assert topic_resource("%RETRY%cg") == "group:cg"
    assert topic_resource("%DLQ%cg") == "group:cg"
    assert topic_resource("Orders") == "topic:Orders"


def _acl():
    users = [User("root", "k" * 40, SUPER), User("bob", "b" * 40), User("eve", "e" * 40)]
    rules = [Rule("bob", "topic:orders-*", frozenset({"PUB"})),
             Rule("bob", "topic:orders-secret", frozenset({"PUB"}), deny=True),
             Rule("bob", "group:*", frozenset({"ALL"})),
             Rule("eve", "topic:Orders", frozenset({"SUB"}), source="10.0.0.0/8")]
    return Acl(users, rules)


def test_acl_decisions():
    acl = _acl()
    assert acl.allowed("bob", "topic:orders-eu", "PUB")
    assert not acl.allowed("bob", "topic:orders-eu", "SUB")          # unmatched action: denied
    assert not acl.allowed("bob", "topic:orders-secret", "PUB")      # deny wins over the prefix allow
    assert acl.allowed("bob", "group:anything", "DELETE")            # ALL
    assert not acl.allowed("bob", "topic:Payments", "PUB")           # nothing matches: denied
    assert acl.allowed("root", "topic:SCHEDULE_TOPIC_XXXX", "SUB")   # SUPER
    assert not acl.allowed("bob", "topic:RMQ_SYS_TRANS_HALF_TOPIC", "SUB")
    assert acl.allowed("eve", "topic:Orders", "SUB", "10.1.2.3")
    assert not acl.allowed("eve", "topic:Orders", "SUB", "192.168.1.1")
    assert not acl.allowed("eve", "topic:Orders", "SUB", None)
    assert not acl.allowed("nobody", "topic:Orders", "SUB")


def test_system_topics_stay_closed_even_under_a_star_rule():
    acl = Acl([User("w", "w" * 40)], [Rule("w", "topic:*", frozenset({"ALL"}))])
    assert acl.allowed("w", "topic:Orders", "SUB")
    assert not acl.allowed("w", "topic:SCHEDULE_TOPIC_XXXX", "SUB")
    assert not acl.allowed("w", "topic:rmq_sys_wheel_timer", "PUB")


def test_snapshot_round_trip():
    acl = _acl()
    again = Acl.from_snapshot(acl.snapshot())
    assert again.snapshot()["rules"] == acl.snapshot()["rules"]
    assert again.users == acl.users


@pytest.mark.parametrize("rule, problem", [
    (Rule("bob", "topics:x", frozenset({"PUB"})), "resource"),
    (Rule("bob", "topic:", frozenset({"PUB"})), "resource"),
    (Rule("b o b", "topic:x", frozenset({"PUB"})), "user name"),
    (Rule("bob", "topic:x", frozenset({"FLY"})), "actions"),
    (Rule("bob", "topic:x", frozenset()), "actions"),
    (Rule("bob", "topic:x", frozenset({"PUB"}), source="10.0.0.0/33"), "CIDR"),
])
def test_bad_rules_are_refused_with_what_to_fix(rule, problem):
    assert problem in check_rule(rule)


def test_auth_dir_files_are_private_and_never_overwritten(tmp_path):
    d = str(tmp_path / "auth")
    admin = init_auth_dir(d)
    for path in ("server.key", "admin.key", "services/broker.key"):
        mode = stat.S_IMODE(os.stat(os.path.join(d, path)).st_mode)
        assert mode == 0o600, (path, oct(mode))
    assert read_credentials(os.path.join(d, "admin.key")) == admin
    assert "secret" not in repr(admin) and admin.secret_key not in repr(admin)
    with pytest.raises(ClientError, match="already holds a server key"):
        init_auth_dir(d)


def test_credentials_from_a_path_an_object_or_the_environment(tmp_path, monkeypatch):
    d = str(tmp_path / "auth")
    admin = init_auth_dir(d)
    assert credentials_from(admin) is admin
    assert credentials_from(os.path.join(d, "admin.key")) == admin
    monkeypatch.setenv("QUIVER_CREDENTIALS", os.path.join(d, "admin.key"))
    assert credentials_from(None) == admin
    monkeypatch.setenv("QUIVER_CREDENTIALS", str(tmp_path / "nope.key"))
    with pytest.raises(ClientError, match="does not exist"):
        credentials_from(None)
    with pytest.raises(ClientError, match="Z85"):
        Credentials("x", "short", "short", "short")


def test_security_check(tmp_path):
    d = str(tmp_path / "auth")
    init_auth_dir(d)
    sec = Security(d, "broker")
    bob = KeyPair.generate().public_key
    sec.set_acl(Acl([User("bob", bob)], [Rule("bob", "topic:Orders", frozenset({"PUB"}))]))
    send = rq.SendMessage(topic="Orders", metas=([0], [""]))
    register = rq.SCHEMAS[RequestCode.REGISTER_BROKER].ACCESS
    assert sec.check(bob, "127.0.0.1", rq.SendMessage.ACCESS, send) is None
    denied = sec.check(bob, "127.0.0.1", rq.SendMessage.ACCESS, rq.SendMessage(topic="Pay", metas=([0], [""])))
    assert "lacks PUB on topic:Pay" in denied and "quiver acl grant bob" in denied
    assert "only a Quiver service" in sec.check(bob, None, register, None)
    assert sec.check("s:broker", None, register, None) is None
    assert "may not send this" in sec.check("s:filter", None, register, None)
    assert "no longer a user's" in sec.check(KeyPair.generate().public_key, None, rq.SendMessage.ACCESS, send)
    with pytest.raises(NoPermissionError, match="lacks SUB on topic:Orders"):
        sec.authorize(bob, None, "topic:Orders", ("SUB",))
    sec.authorize("s:scheduler", None, "topic:Orders", ("SUB",))  # services act for the cluster
