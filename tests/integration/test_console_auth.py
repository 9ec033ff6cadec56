"""The web console with auth on, real processes (name server, broker, console with the auth dir):
nobody reads a page without logging in as a Quiver user, each user sees only what her own key
may read (half messages and other users' topics stay hidden from a NORMAL user, a SUPER user
sees them), guessed logins are locked out, and idle connections do not make it unreachable.
Each attack is checked next to the same request made by a user allowed to make it."""

import re
import socket
import time

import pytest
import requests
from requests.adapters import HTTPAdapter

from quiver import Message, Producer, TransactionProducer, TransactionState
from quiver.wire.curve import KeyPair

from support.secure import add_user, secure_cluster
from support.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
LOCKOUT_S = 4


@pytest.fixture(scope="module")
def web(tmp_path_factory):
    """(cluster, console url, users): alice may read Orders, bob may read Payments, root is SUPER;
    an open (never ended) half message on Payments, and one message on each topic."""
    with secure_cluster(tmp_path_factory.mktemp("console-auth"), topics=["Orders", "Payments"]) as (c, admin, root):
        alice = add_user(admin, "alice", ("cluster", ["LIST"]), ("topic:Orders", ["SUB", "GET"]))
        bob = add_user(admin, "bob", ("cluster", ["LIST"]), ("topic:Payments", ["PUB", "SUB", "GET"]))
        with Producer("pg", c.namesrv, credentials=root) as p:
            p.send(Message("Orders", b"order body alice may read", keys="o1"))
            p.send(Message("Payments", b"payment body only bob reads", keys="p1"))
        with TransactionProducer("tx", c.namesrv, credentials=bob, checker=lambda m: TransactionState.UNKNOWN) as tp:
            tp.send_in_transaction(Message("Payments", b"uncommitted half body", keys="h1"),
                                   lambda m, a: TransactionState.UNKNOWN)
        console = c.add_console("--request-timeout-ms", "3000", env={  # env: a console without them starts too
            "QUIVER_LOGIN_MAX_FAILURES": "5", "QUIVER_LOGIN_LOCKOUT_S": str(LOCKOUT_S),
            "QUIVER_HTTP_IDLE_TIMEOUT_S": "5"})
        c.wait()
        yield c, console.url.rstrip("/"), {"alice": alice, "bob": bob, "root": root}


class FromAddress(HTTPAdapter):
    """Connections from another loopback address (a second client, as the console counts them)."""

    def __init__(self, source: str):
        self.source = source
        super().__init__()

    def init_poolmanager(self, *args, **kw):
        kw["source_address"] = (self.source, 0)
        super().init_poolmanager(*args, **kw)


def _csrf(s: requests.Session, base: str) -> str:
    return CSRF.search(s.get(f"{base}/login", timeout=10).text)[1]


def _login(base: str, creds, secret: str | None = None, source: str | None = None
           ) -> tuple[requests.Session, requests.Response]:
    s = requests.Session()
    if source:
        s.mount("http://", FromAddress(source))
    resp = s.post(f"{base}/login", timeout=30, allow_redirects=False,
                  data={"access_key": creds.public_key, "secret_key": secret or creds.secret_key,
                        "csrf_token": _csrf(s, base)})
    return s, resp


def _logged_in(base: str, creds, source: str | None = None) -> requests.Session:
    s, resp = _login(base, creds, source=source)
    assert resp.status_code == 303, resp.text[-400:]
    return s


HALF = "RMQ_SYS_TRANS_HALF_TOPIC"


def test_anonymous_visitor_reads_nothing(web):
    c, base, users = web
    for path in ("/messages?topic=Orders&key=o1", "/topics", "/cluster", "/transactions", f"/topics/{HALF}",
                 f"/messages?topic={HALF}&begin=0"):
        resp = requests.get(base + path, timeout=10, allow_redirects=False)
        assert resp.status_code == 303 and resp.headers["Location"].startswith("/login?next="), path
        assert "body" not in resp.text
    assert requests.post(f"{base}/topics", data={"topic": "Sneaky"}, timeout=10).status_code == 403
    # the same read by a user allowed to make it
    page = _logged_in(base, users["alice"]).get(f"{base}/messages?topic=Orders&key=o1", timeout=30)
    assert page.status_code == 200 and "order body alice may read" in page.text


def test_session_cookie_is_httponly_strict_and_logout_ends_it(web):
    c, base, users = web
    s, resp = _login(base, users["alice"])
    cookie = resp.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and users["alice"].secret_key not in cookie
    assert s.get(f"{base}/topics", timeout=30, allow_redirects=False).status_code == 200
    csrf = CSRF.search(s.get(f"{base}/topics", timeout=30).text)[1]
    assert s.post(f"{base}/logout", data={"csrf_token": csrf}, timeout=10, allow_redirects=False).status_code == 303
    assert s.get(f"{base}/topics", timeout=10, allow_redirects=False).status_code == 303


def test_normal_user_sees_only_her_topics_and_no_half_message(web):
    c, base, users = web
    alice = _logged_in(base, users["alice"])
    listed = alice.get(f"{base}/topics?system=1", timeout=60).text
    assert 'data-topic="Orders"' in listed
    assert 'data-topic="Payments"' not in listed and f'data-topic="{HALF}"' not in listed
    assert "not listed: your key may not read them" in listed
    for path in (f"/messages?topic={HALF}&begin=0", "/messages?topic=Payments&key=p1",
                 "/messages?topic=Payments&begin=0"):
        page = alice.get(base + path, timeout=60)
        assert page.status_code == 200
        assert "half body" not in page.text and "payment body" not in page.text, path
        assert "NoPermissionError" in page.text, path
    # the same reads by the users allowed to make them
    bob = _logged_in(base, users["bob"])
    assert "payment body only bob reads" in bob.get(f"{base}/messages?topic=Payments&key=p1", timeout=60).text
    assert "half body" not in bob.get(f"{base}/messages?topic={HALF}&begin=0", timeout=60).text  # NORMAL: no
    root = _logged_in(base, users["root"])
    assert "uncommitted half body" in root.get(f"{base}/messages?topic={HALF}&begin=0", timeout=60).text
    listed = root.get(f"{base}/topics?system=1", timeout=60).text
    assert 'data-topic="Payments"' in listed and f'data-topic="{HALF}"' in listed


def test_idle_connections_do_not_starve_the_console(web):
    """150 idle connections from one address: the console keeps 100 of them (the rest closed at
    once), answers another client at once, and closes the idle ones after 5 s."""
    c, base, users = web
    host, port = base.removeprefix("http://").rsplit(":", 1)
    idle = []
    try:
        for _ in range(150):
            idle.append(socket.create_connection((host, int(port)), timeout=5))
        time.sleep(0.5)   # let the server take them all
        assert sum(_closed(sk) for sk in idle) >= 45   # beyond 100 from one address: closed at once
        other = requests.Session()
        other.mount("http://", FromAddress("127.0.0.2"))
        t0 = time.monotonic()
        resp = other.get(f"{base}/login", timeout=15)
        assert resp.status_code == 200 and time.monotonic() - t0 < 15
        s = _logged_in(base, users["alice"], source="127.0.0.2")     # a logged-in read answers too
        assert s.get(f"{base}/topics", timeout=30).status_code == 200
        # --http-idle-timeout-s 5: the server closes them
        wait_for(lambda: all(_closed(sk) for sk in idle), 60, "the idle connections closed by the console")
    finally:
        for sk in idle:
            sk.close()


def _closed(sock) -> bool:
    """The server closed this connection (EOF or reset)."""
    sock.settimeout(0.05)
    try:
        return sock.recv(1) == b""
    except socket.timeout:
        return False
    except OSError:
        return True


def test_guessed_logins_are_locked_out(web):
    """Last in the module: it locks this address out for LOCKOUT_S."""
    c, base, users = web
    alice = users["alice"]
    wrong = KeyPair.generate().secret_key
    s = requests.Session()
    csrf = _csrf(s, base)
    codes = []
    t0 = time.monotonic()
    for _ in range(200):
        codes.append(s.post(f"{base}/login", timeout=30, allow_redirects=False,
                            data={"access_key": alice.public_key, "secret_key": wrong, "csrf_token": csrf}).status_code)
    elapsed = time.monotonic() - t0
    assert set(codes) <= {403, 429}
    # 5 failures lock for LOCKOUT_S; once it passes, one more failure locks again
    assert codes[:5] == [403] * 5 and codes[5] == 429
    assert codes.count(403) <= 5 + elapsed / LOCKOUT_S + 1, (codes.count(403), elapsed)
    locked = s.post(f"{base}/login", timeout=30, allow_redirects=False,
                    data={"access_key": alice.public_key, "secret_key": alice.secret_key, "csrf_token": csrf})
    assert locked.status_code == 429 and int(locked.headers["Retry-After"]) >= 1   # even the right secret
    # the same login once the lock-out is over
    time.sleep(LOCKOUT_S + 0.5)
    s2, resp = _login(base, alice)
    assert resp.status_code == 303
    assert "order body" in s2.get(f"{base}/messages?topic=Orders&key=o1", timeout=30).text
