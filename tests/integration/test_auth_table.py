"""The table over every request code with auth on, at all five services (real processes).

Every service — name server (with the failover controller), broker, filter, scheduler, txn-checker — gives no connection to a
client without a key or with a key the cluster does not know. Then every code each service
serves: a user without the right gets NO_PERMISSION (naming what is missing), the user with
exactly the right gets past the check, and codes for service roles refuse every user key, a
SUPER user's too. A code no service serves on its client socket is only a push to clients or
an HA-socket code.
"""

import pytest

from quiver.errors import ClientError
from quiver.wire import requests as rq
from quiver.wire.access import ACTIONS
from quiver.wire.codes import RequestCode, ResponseCode
from quiver.wire.curve import Credentials, KeyPair
from quiver.wire.transport import Transport

from support.secure import add_user, secure_cluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SERVICES = (("filter", "quiver_filter", "--register-interval-ms", "1000"), ("scheduler", "quiver_scheduler"),
            ("txn-checker", "quiver_txn"))
ROLES = ("namesrv", "broker", "filter", "scheduler", "txn-checker")
# served on no client socket: the broker's pushes to clients and the HA socket's own codes
NOT_ON_A_CLIENT_SOCKET = {RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, RequestCode.CHECK_TRANSACTION_STATE,
                          RequestCode.RESET_CONSUMER_CLIENT_OFFSET, RequestCode.HA_TRANSFER, RequestCode.HA_REPORT,
                          RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT}


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    with secure_cluster(tmp_path_factory.mktemp("table"), SERVICES, topics=["FuzzT"],
                        broker_args=["--auto-create-topics"], controller=True) as (c, admin, admin_creds):
        yield c, admin, admin_creds, {role: next(s.addr for s in c.services if s.role == role) for role in ROLES}


@pytest.mark.parametrize("role", ROLES)
def test_no_key_and_an_unknown_key_get_no_connection(secure, role):
    c, _, admin_creds, addrs = secure
    pair = KeyPair.generate()
    stranger = Credentials("mallory", pair.public_key, pair.secret_key, admin_creds.server_key)
    for creds, says in ((None, "auth on; pass credentials"), (stranger, "refused this client's key")):
        t = Transport("outsider", credentials=creds)
        try:
            with pytest.raises(ClientError, match=says):
                t.call(addrs[role], RequestCode.PING, timeout=2)
        finally:
            t.close()


def _grants_for(schema, ext) -> list[tuple[str, str]]:
    """The (resource, action) pairs that give exactly this request its right."""
    access = schema.ACCESS
    args = schema.decode(ext)
    out = [(res, min(n.actions, key=ACTIONS.index)) for n in access.needs for res in n.resources(args)]
    out += [("topic:*", action) for _, action in access.later]   # the handler's resource is found later
    return out


class Table:
    """One user per code with exactly its right (made once, used at every service)."""

    def __init__(self, admin, admin_creds):
        from support.fuzz_requests import Context, base_table
        self.admin, self.table = admin, base_table(Context())
        self.t_none = Transport("t-nobody", credentials=add_user(admin, "nobody"))
        self.t_admin = Transport("t-admin", credentials=admin_creds)
        self.rightful: dict = {}
        self.rows, self.wrong, self.served = [], [], set()

    def close(self) -> None:
        for t in (self.t_none, self.t_admin, *self.rightful.values()):
            t.close()

    def _right(self, code, schema, ext) -> Transport:
        if code not in self.rightful:
            user = f"u{int(code)}"
            creds = add_user(self.admin, user, *((res, [action]) for res, action in _grants_for(schema, ext)))
            self.rightful[code] = Transport(f"t-{user}", credentials=creds)
        return self.rightful[code]

    def check(self, role: str, addr: str, code: RequestCode) -> None:
        ext, bodies = self.table[int(code)]
        schema = rq.SCHEMAS[code]
        access = schema.ACCESS
        denied = self.t_none.call(addr, code, ext, bodies, timeout=5, ok=tuple(ResponseCode))
        if denied.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
            return
        self.served.add(code)
        if not access.anyone:
            # a code checked once its resource is found (`later`) may first say there is none
            lookup_failed = not access.needs and access.later and "not found" in denied.remark
            if denied.code != ResponseCode.NO_PERMISSION and not lookup_failed:
                self.wrong.append(f"{role} {code.name}: a user without the right got {denied.code} {denied.remark}")
        right = self.t_admin if access.roles or access.super_only else self._right(code, schema, ext)
        got = right.call(addr, code, ext, bodies, timeout=5, ok=tuple(ResponseCode))
        refused = got.code == ResponseCode.NO_PERMISSION
        if access.roles and not refused:
            self.wrong.append(f"{role} {code.name}: a SUPER user's key got past a service-role check ({got.code})")
        if not access.roles and refused:
            self.wrong.append(f"{role} {code.name}: the user with the right was refused: {got.remark}")
        self.rows.append(f"{role:<12} {code.name:<40} without: "
                         f"{'anyone' if access.anyone else ResponseCode(denied.code).name}; "
                         f"with: {'refused (service role)' if access.roles else ResponseCode(got.code).name}")


def test_every_request_code_at_every_service_no_right_and_right(secure):
    c, admin, admin_creds, addrs = secure
    table = Table(admin, admin_creds)
    try:
        for role in ROLES:
            for code in sorted(RequestCode):
                table.check(role, addrs[role], code)
    finally:
        table.close()
    print("\n".join(table.rows))
    assert not table.wrong, "\n".join(table.wrong)
    unserved = set(RequestCode) - table.served
    assert unserved <= NOT_ON_A_CLIENT_SOCKET, sorted(code.name for code in unserved - NOT_ON_A_CLIENT_SOCKET)
