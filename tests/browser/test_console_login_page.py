"""The console with auth on in a real headless Chromium: a page asked for before logging in
leads to /login, a wrong secret key is refused on the page, the user's access key and secret
key lead back to the page asked for, which shows what her key may read and nothing else.
Actions with users' rights: alice sends to her topic from its page and sees her group, the
broker's refusal is shown when she sends to or deletes what she may not; a SUPER user, logged
in with her key file, creates and deletes a topic (after the confirmation page); an anonymous browser cannot act."""

import json

import pytest

from quiver import Message, Producer

from support.secure import add_user, secure_cluster
from conftest import Watched, wait

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def secure_web(tmp_path_factory):
    with secure_cluster(tmp_path_factory.mktemp("web-auth"), topics=["Orders", "Payments"]) as (c, admin, root):
        alice = add_user(admin, "alice", ("cluster", ["LIST"]), ("topic:Orders", ["PUB", "SUB", "GET"]),
                         ("group:billing", ["GET"]))
        for group in ("billing", "payer"):   # known to the broker, no retry topic: listed all the same
            admin.set_group_config(group, retry_max_times=3)
        with Producer("pg", c.namesrv, credentials=root) as p:
            p.send(Message("Orders", b"an order alice reads", keys="o1"))
            p.send(Message("Payments", b"a payment she may not", keys="p1"))
        console = c.add_console("--request-timeout-ms", "3000", "--allow-actions")
        c.wait()
        yield console.url, alice, root, admin


def test_login_leads_back_and_shows_only_her_topics(browser, secure_web):
    url, alice = secure_web[:2]
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        page = Watched(context.new_page(), url)
        p = page.open("/topics", shot="login-auth")
        assert p.url.split("?")[0].endswith("/login") and p.locator('input[name="secret_key"]').count() == 1
        p.fill('input[name="access_key"]', alice.public_key)
        p.fill('input[name="secret_key"]', "x" * 40)
        p.click('button:has-text("log in")')
        assert p.locator("text=wrong access key or secret key").count() == 1
        page.errors.clear()   # the 403 above was asked for
        p.fill('input[name="access_key"]', alice.public_key)
        p.fill('input[name="secret_key"]', alice.secret_key)
        p.click('button:has-text("log in")')
        p.wait_for_selector("#topics")
        assert p.url.endswith("/topics")
        assert p.locator('tr[data-topic="Orders"]').count() == 1
        assert p.locator('tr[data-topic="Payments"]').count() == 0
        page.shot("topics-auth")
        p = page.open("/messages?topic=Orders&key=o1")
        assert p.locator("pre.body").inner_text() == "an order alice reads"
        p.click('button:has-text("log out")')
        assert p.url.split("?")[0].endswith("/login")
        assert page.errors == []
    finally:
        context.close()


@pytest.fixture
def context(browser):
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        yield ctx
    finally:
        ctx.close()


def _logged_in(context, url: str, creds, upload: bool = False) -> Watched:
    """Log in by typing the keys, or (`upload`) by choosing the user's key file."""
    page = Watched(context.new_page(), url)
    p = page.open("/login")
    if upload:
        key_file = json.dumps({"user": creds.user, "public_key": creds.public_key, "secret_key": creds.secret_key,
                               "server_key": creds.server_key}).encode()
        p.set_input_files('input[name="key_file"]', files=[{"name": "root.key", "mimeType": "application/json",
                                                            "buffer": key_file}])
        p.click('button:has-text("use the key file")')
    else:
        p.fill('input[name="access_key"]', creds.public_key)
        p.fill('input[name="secret_key"]', creds.secret_key)
        p.click('button:has-text("log in")')
    p.wait_for_selector("#brokers")
    return page


def _flash(p) -> str:
    return " ".join(p.locator("p.flash").all_inner_texts())


def test_granted_user_acts_on_her_topic_and_gets_the_brokers_refusal_elsewhere(context, secure_web):
    url, alice, root, admin = secure_web
    page = _logged_in(context, url, alice)
    p = page.open("/groups")
    assert p.locator('tr[data-group="billing"]').count() == 1
    assert p.locator('tr[data-group="payer"]').count() == 0          # no right on it: not listed
    p = page.open("/topics/Orders")
    assert p.locator("figure.chart").count() == 2                     # rates and lag, inline SVG
    p.fill('textarea[name="body"]', "a test order from the console")
    p.fill('input[name="keys"]', "console-1")
    p.fill('input[name="tags"]', "test")
    p.click('#send-form button')
    p.wait_for_selector("p.flash")
    assert "done: a test message sent to Orders: msgId" in _flash(p)
    found = admin.query_by_key("Orders", "console-1")
    assert [(m.body, m.tags) for m in found] == [(b"a test order from the console", "test")]
    csrf = p.locator('input[name="csrf_token"]').first.get_attribute("value")
    refused = p.request.post(f"{page.base}/topics/Payments/send", form={"body": "x", "csrf_token": csrf})
    assert "failed: a test message sent to Payments: NoPermissionError" in refused.text()
    assert not admin.query_by_key("Payments", "x")
    p = page.open("/topics/Orders/delete")
    p.fill('input[name="confirm"]', "Orders")
    p.click("#delete-form button")
    p.wait_for_selector("p.flash")
    assert "failed: topic Orders deleted on every broker: NoPermissionError" in _flash(p)
    assert "Orders" in admin.topic_list()
    assert page.errors == []


def test_super_user_creates_and_deletes_a_topic(context, secure_web):
    url, alice, root, admin = secure_web
    page = _logged_in(context, url, root, upload=True)
    p = page.open("/topics")
    p.fill('input[name="topic"]', "Made")
    p.fill('input[name="queues"]', "2")
    p.click('button:has-text("create on every broker")')
    p.wait_for_selector("p.flash")
    assert "done: topic Made created" in _flash(p) and "Made" in admin.topic_list()
    p = page.open("/topics/Made")
    p.click("#delete-link")
    p.fill('input[name="confirm"]', "Made")
    p.click("#delete-form button")
    p.wait_for_selector("p.flash")
    assert "done: topic Made deleted on every broker" in _flash(p)
    wait(lambda: "Made" not in admin.topic_list(), "Made gone from the topic list")
    assert page.errors == []


def test_anonymous_browser_cannot_act(context, secure_web):
    url, alice, root, admin = secure_web
    page = Watched(context.new_page(), url)
    p = page.open("/login")
    csrf = p.locator('input[name="csrf_token"]').first.get_attribute("value")
    before = len(admin.query_by_key("Orders", "anon"))
    for path, form in (("/topics", {"topic": "Anon"}), ("/topics/Orders/send", {"body": "x", "keys": "anon"}),
                       ("/topics/Orders/delete", {"confirm": "Orders"})):
        refused = p.request.post(url.rstrip("/") + path, form={**form, "csrf_token": csrf})
        assert refused.status == 403 and "log in first" in refused.text(), path
    assert "Anon" not in admin.topic_list() and "Orders" in admin.topic_list()
    assert len(admin.query_by_key("Orders", "anon")) == before
