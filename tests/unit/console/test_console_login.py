"""Auth-on console pieces in-process: sessions (expiry, shared Admins, caps), the lock-out of
failed logins, and the login flow over quiver.testing (the Admin a user gets is the stub
cluster's; the real CURVE check runs in tests/integration/test_console_auth.py)."""

import re

import pytest
from markupsafe import escape

from quiver.testing import stub_cluster
from quiver.wire.curve import KeyPair

from quiver_console.app import create_app, user_login
from quiver_console.config import Config
from quiver_console.login import Limiter
from quiver_console.sessions import Sessions, SessionsFull

CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


class FakeAdmin:
    def __init__(self):
        self.down = False

    def shutdown(self):
        self.down = True


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_sessions_expire_idle_and_old_and_share_one_admin_per_key():
    clock = Clock()
    s = Sessions(idle_s=10, max_s=30, max_sessions=10, per_key=8, clock=clock)
    a = FakeAdmin()
    t1 = s.open("K", a, "1.2.3.4")
    t2 = s.open("K", s.admin_of("K"), "1.2.3.4")
    assert s.get(t1).admin is a and s.users() == 1 and len(s) == 2
    clock.now += 9
    assert s.get(t1) is not None          # seen: its idle clock restarts
    clock.now += 9
    assert s.get(t1) is not None and s.get(t2) is None    # t2 idle 18 s: gone, the Admin stays for t1
    assert not a.down
    for _ in range(3):
        clock.now += 8
        s.get(t1)
    assert s.get(t1) is None and a.down   # 32 s after login: too old even though active; last session
    assert s.get("made-up") is None and s.get(None) is None
    b = FakeAdmin()
    s.open("L", b, "")
    clock.now += 11
    s.sweep()                              # nobody loads a page: the sweep ends it
    assert b.down and len(s) == 0 and s.users() == 0


def test_sessions_cap_per_key_and_in_all():
    s = Sessions(idle_s=100, max_s=100, max_sessions=3, per_key=2, clock=Clock())
    a = FakeAdmin()
    first = s.open("K", a, "")
    s.open("K", a, "")
    s.open("K", a, "")                     # a third of K: K's oldest ends
    assert s.get(first) is None and len(s) == 2 and not a.down
    s.open("L", FakeAdmin(), "")
    late = FakeAdmin()
    with pytest.raises(SessionsFull):
        s.open("M", late, "")
    assert late.down                       # the new key's Admin is not kept
    s.close_all()
    assert a.down and len(s) == 0


def test_limiter_locks_after_failures_in_the_window():
    clock = Clock()
    lim = Limiter(max_failures=3, window_s=60, lockout_s=30, clock=clock)
    key, ip = ("key", "K"), ("ip", "1.2.3.4")
    for _ in range(2):
        lim.failed(key, ip)
        clock.now += 70                    # spread beyond the window: never 3 in 60 s
    assert lim.locked_for(key, ip) == 0
    lim.failed(key, ip)
    lim.failed(key, ip)
    assert lim.locked_for(key) == 0        # only 2 failures within 60 s
    lim.failed(key, ip)
    assert lim.locked_for(key) == 30 and lim.locked_for(("ip", "1.2.3.4")) == 30
    assert lim.locked_for(("key", "other")) == 0
    lim.succeeded(key)
    assert lim.locked_for(key) == 0 and lim.locked_for(ip) == 30   # an address stays locked
    clock.now += 31
    assert lim.locked_for(ip) == 0


@pytest.fixture(scope="module")
def cluster():
    with stub_cluster() as c:
        c.admin().create_topic("Orders", queues=1)
        yield c


def _app(cluster):
    config = Config(credentials="/unused.key", login_max_failures=3)
    users = user_login(config, lambda creds: cluster.admin(), KeyPair.generate().public_key)
    app = create_app(config, None, users=users)
    app.testing = True
    return app.test_client(), users


def _login(web, pair, nxt="/topics"):
    csrf = CSRF.search(web.get(f"/login?next={nxt}").text)[1]
    return web.post("/login", data={"access_key": pair.public_key, "secret_key": pair.secret_key,
                                    "csrf_token": csrf, "next": nxt})


def test_pages_need_a_login_and_then_read_with_the_user_admin(cluster):
    web, users = _app(cluster)
    resp = web.get("/topics/Orders")
    assert resp.status_code == 303 and resp.headers["Location"] == "/login?next=/topics/Orders"
    assert web.get("/healthz").status_code == 200
    assert web.post("/topics", data={"topic": "X"}).status_code == 403
    pair = KeyPair.generate()
    resp = _login(web, pair, "/topics/Orders")
    assert resp.status_code == 303 and resp.headers["Location"] == "/topics/Orders"
    page = web.get("/topics/Orders")
    assert page.status_code == 200 and "Orders" in page.text and str(escape(pair.public_key[:10])) in page.text
    assert users.sessions.users() == 1


def test_wrong_pair_refused_and_locked_out_and_no_open_redirect(cluster):
    web, users = _app(cluster)
    pair, other = KeyPair.generate(), KeyPair.generate()
    wrong = KeyPair(pair.public_key, other.secret_key)
    assert [_login(web, wrong).status_code for _ in range(4)] == [403, 403, 403, 429]
    assert users.sessions.users() == 0
    web2, _ = _app(cluster)
    for nxt in ("//evil.example/", "/\\evil.example", "https://evil.example/"):
        resp = _login(web2, pair, nxt)
        assert resp.status_code == 303 and resp.headers["Location"] == "/cluster", nxt


def test_key_file_upload_logs_in_and_a_bad_file_is_refused(cluster):
    import io
    import json

    from quiver_console.login import LoginRefused, pair_from_key_file
    pair = KeyPair.generate()
    key_file = json.dumps({"user": "alice", "public_key": pair.public_key, "secret_key": pair.secret_key,
                           "server_key": "ignored"}).encode()
    assert pair_from_key_file(key_file) == (pair.public_key, pair.secret_key)
    for bad in (b"", b"not json", b"[1]", b'{"public_key": 1}', b" " * 5000):
        with pytest.raises(LoginRefused):
            pair_from_key_file(bad)
    web, users = _app(cluster)
    csrf = CSRF.search(web.get("/login").text)[1]
    resp = web.post("/login", data={"csrf_token": csrf, "next": "/topics", "key_file": (io.BytesIO(b"oops"), "a.key")},
                    content_type="multipart/form-data")
    assert resp.status_code == 403 and "not JSON" in resp.text and users.sessions.users() == 0
    resp = web.post("/login", data={"csrf_token": csrf, "next": "/topics", "key_file": (io.BytesIO(key_file), "a.key")},
                    content_type="multipart/form-data")
    assert resp.status_code == 303 and resp.headers["Location"] == "/topics" and users.sessions.users() == 1
    guessed, _ = _app(cluster)   # bad files count against the address like wrong secrets
    csrf = CSRF.search(guessed.get("/login").text)[1]
    for body in (b"oops", b"oops", b"oops", key_file):
        resp = guessed.post("/login", data={"csrf_token": csrf, "key_file": (io.BytesIO(body), "a.key")},
                            content_type="multipart/form-data")
    assert resp.status_code == 429
