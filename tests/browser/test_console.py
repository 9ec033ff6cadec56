"""The web console in a real headless Chromium over a real cluster: every page loads without
console errors, its tables show what Admin returns, a message found by key shows its body and
trace timeline (a traced producer and a traced consumer), a DLQ resend from the page puts the
message back on its topic, an action without the admin token is refused. A screenshot of each
page goes to build/screenshots/; the message page's also refreshes docs/console.png (the README's)."""

import pathlib
import threading

import pytest

from quiver.client.access import broker_access
from quiver import Message, Producer, PullConsumer, PushConsumer

from conftest import TOKEN, copy_screenshot, wait

README_SHOT = pathlib.Path(__file__).resolve().parents[2] / "docs" / "console.png"

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def loaded(web_cluster):
    """Orders (2 queues, 12 messages, consumed by `billing`, both sides traced) and one dead
    letter of `payer`."""
    c, console, admin = web_cluster
    admin.create_topic("Orders", queues=2)
    admin.create_topic("Pay", queues=1)
    admin.set_group_config("payer", retry_max_times=1)
    with Producer("shop", namesrv=c.namesrv, trace=True) as p:
        sent = [p.send(Message("Orders", f"order <i>#{i}</i> → ok".encode(), keys=f"order-{i}", tags="paid"))
                for i in range(12)]
        p.send(Message("Pay", b"poison payment", keys="pay-1"))
    got = []
    with PullConsumer("billing", namesrv=c.namesrv, consume_from="first", trace=True) as pc:
        pc.subscribe("Orders")
        wait(lambda: got.extend(pc.poll(0.2)) or len(got) >= 12, "billing consumed 12")
        pc.commit()
    # trace records travel asynchronously: the page is asserted once Admin has the whole timeline
    wait(lambda: "SubAfter" in [r["type"] for r in admin.trace(sent[7].msg_id)], "order-7's trace")

    def fail(msgs):
        raise RuntimeError("payment refused")
    push = PushConsumer("payer", namesrv=c.namesrv, consume_from="first")
    push.subscribe("Pay")
    push.register(fail)
    with push:
        push.start()
        wait(lambda: admin.dlq_messages("payer"), "the poison message in %DLQ%payer", 60)
    wait(lambda: sum(r["consumer_offset"] or 0 for r in admin.consumer_progress("billing")) >= 12,
         "billing's offsets committed")
    return c, admin


PAGES = [("cluster", "/cluster"), ("topics", "/topics"), ("topic", "/topics/Orders"),
         ("groups", "/groups?group=billing"), ("messages", "/messages?topic=Orders&key=order-3"),
         ("dlq", "/dlq?group=payer"), ("scheduler", "/scheduler"), ("transactions", "/transactions"),
         ("login", "/login")]


def test_every_page_loads_without_errors(page, loaded):
    for name, path in PAGES:
        p = page.open(path, shot=name)
        assert p.locator("h1").count() == 1, name
        assert not p.locator("text=Internal Server Error").count()
    assert page.errors == []


def _cells(p, selector: str) -> list[str]:
    return [t.strip() for t in p.locator(selector).all_inner_texts()]


def test_tables_show_what_admin_returns(page, loaded):
    c, admin = loaded
    queues = admin.queues("Orders")
    p = page.open("/topics")
    row = p.locator('tr[data-topic="Orders"]')
    assert int(row.locator("td.min").inner_text()) == sum(admin.min_offset(q) for q in queues)
    assert int(row.locator("td.max").inner_text()) == sum(admin.max_offset(q) for q in queues) == 12
    assert int(row.locator("td.queues").inner_text()) == len(queues)

    p = page.open("/topics/Orders")
    for q in queues:
        r = p.locator(f'tr[data-queue="{q.broker}/{q.queue_id}"]')
        assert int(r.locator("td.max").inner_text()) == admin.max_offset(q)
        assert int(r.locator("td.min").inner_text()) == admin.min_offset(q)

    p = page.open("/groups?group=billing")
    for r in admin.consumer_progress("billing"):
        tr = p.locator(f'tr[data-queue="{r["topic"]}/{r["broker"]}/{r["queue_id"]}"]')
        assert int(tr.locator("td.lag").inner_text()) == r["lag"]
        assert int(tr.locator("td.consumer-offset").inner_text()) == r["consumer_offset"]

    p = page.open("/cluster")
    for name, addr in broker_access(admin).all_broker_addrs().items():
        tr = p.locator(f'tr[data-broker="{name}"]')
        assert tr.locator(".up").count() == 1
        assert int(tr.locator("td.max-offset").inner_text()) == admin.status(addr)["store"]["max_phys_offset"]
    roles = _cells(p, "#services td:nth-child(2)")
    assert {"namesrv", "broker", "scheduler"} <= set(roles)
    assert page.errors == []


def test_message_found_by_key_shows_body_and_trace(page, loaded):
    p = page.open("/messages")
    p.fill('input[name="topic"]', "Orders")
    p.fill('input[name="key"]', "order-7")
    p.click('button:has-text("search")')
    p.wait_for_selector("#found")
    card = p.locator("article.message")
    assert card.count() == 1
    assert card.locator("pre.body").inner_text() == "order <i>#7</i> → ok"   # shown as text, not markup
    assert card.locator("i").count() == 0
    trace = card.locator("section.trace")
    assert trace.locator("h4").inner_text() == "Trace"
    rows = [[cell.strip() for cell in row.locator("td").all_inner_texts()]
            for row in trace.locator("tbody tr").all()]
    assert [r[0] for r in rows] == ["Pub", "SubBefore", "SubAfter"]          # type, oldest first
    assert [r[3] for r in rows] == ["SEND_OK", "CONSUMING", "SUCCESS"]       # status
    assert [r[6] for r in rows] == ["shop", "billing", "billing"]            # producer / consumer group
    assert all(r[4] == "Orders" and r[7] for r in rows)                      # topic, client id
    assert rows[0][1] <= rows[1][1] <= rows[2][1]                            # time (UTC), same format
    page.shot("message-trace")
    copy_screenshot("message-trace", README_SHOT)   # the README's picture: body preview and trace
    assert page.errors == []


def test_action_is_refused_without_the_token(page, loaded):
    c, admin = loaded
    p = page.open("/dlq?group=payer")
    assert p.locator("button.resend").count() == 0          # no action forms before login
    csrf = page.open("/login").locator('input[name="csrf_token"]').get_attribute("value")
    base = page.base
    refused = p.request.post(f"{base}/topics", form={"topic": "Sneaky", "csrf_token": csrf})
    assert refused.status == 403 and "log in" in refused.text()
    refused = p.request.post(f"{base}/dlq/resend", form={"group": "payer"})    # no CSRF token either
    assert refused.status == 403
    p.fill('input[name="token"]', "not-the-token")
    p.click('button:has-text("log in")')
    assert p.locator("text=wrong token").count() == 1
    assert "Sneaky" not in admin.topic_list()
    page.errors.clear()   # the 403s above were asked for


def test_dlq_resend_from_the_page_puts_it_back(page, loaded):
    c, admin = loaded
    p = page.open("/login")
    p.fill('input[name="token"]', TOKEN)
    p.click('button:has-text("log in")')
    p.wait_for_selector("text=logged in")
    p = page.open("/dlq?group=payer", shot="dlq-logged-in")
    assert "poison payment" in p.locator("pre.body").first.inner_text()
    p.click("button.resend")
    p.wait_for_selector("text=sent back to their topic")
    seen, lock = [], threading.Lock()
    with PullConsumer("auditor", namesrv=c.namesrv, consume_from="first") as pc:
        pc.subscribe("Pay")
        wait(lambda: [seen.append(m.body) for m in pc.poll(0.2)] and False or len(seen) >= 2,
             "the original and the resent message on Pay")
    assert seen == [b"poison payment", b"poison payment"]
    assert page.errors == []
