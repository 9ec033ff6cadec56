"""The console with auth on in a real headless Chromium: a page asked for before logging in
leads to /login, a wrong secret key is refused on the page, the user's access key and secret
key lead back to the page asked for, which shows what her key may read and nothing else."""

import pytest

from quiver import Message, Producer

from support.secure import add_user, secure_cluster
from conftest import Watched

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def secure_web(tmp_path_factory):
    with secure_cluster(tmp_path_factory.mktemp("web-auth"), topics=["Orders", "Payments"]) as (c, admin, root):
        alice = add_user(admin, "alice", ("cluster", ["LIST"]), ("topic:Orders", ["SUB", "GET"]))
        with Producer("pg", c.namesrv, credentials=root) as p:
            p.send(Message("Orders", b"an order alice reads", keys="o1"))
            p.send(Message("Payments", b"a payment she may not", keys="p1"))
        console = c.add_console("--request-timeout-ms", "3000")
        c.wait()
        yield console.url, alice


def test_login_leads_back_and_shows_only_her_topics(browser, secure_web):
    url, alice = secure_web
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
