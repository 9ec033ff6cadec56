"""The console's pages over an in-process cluster (quiver.testing): what they show equals what
Admin returns, input is checked and escaped, actions need CSRF, the rules of the settings and
(where the rules allow) a login."""

import re
import time

import pytest

from quiver.client.access import broker_access
from quiver import Message, Producer, PullConsumer, PushConsumer
from quiver.testing import stub_cluster, wait_until

from quiver_console.app import create_app
from quiver_console.config import Config
from quiver_console.rates import Rates

CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


@pytest.fixture(scope="module")
def cluster():
    with stub_cluster(brokers=2) as c:
        admin = c.admin()
        admin.create_topic("Orders", queues=2)
        with c.client(Producer, "pg") as p:
            for i in range(5):
                p.send(Message("Orders", f"order <b>{i}</b> é".encode(), keys=f"k{i}", tags="paid"))
            p.send(Message("Orders", bytes(range(256)) * 20, keys="binary"))
        with c.client(PullConsumer, "billing", consume_from="first") as consumer:
            consumer.subscribe("Orders")
            got = []
            assert wait_until(lambda: got.extend(consumer.poll(0.1)) or len(got) >= 6)
        yield c


def client(cluster, **settings):
    app = create_app(Config(**settings), cluster.admin())
    app.testing = True
    return app.test_client()


def test_every_page_renders(cluster):
    c = client(cluster)
    for url in ("/cluster", "/topics", "/topics?system=1", "/topics/Orders", "/groups", "/groups?group=billing",
                "/messages", "/messages?topic=Orders&key=k1", "/dlq", "/dlq?group=billing", "/scheduler",
                "/transactions", "/healthz"):
        resp = c.get(url)
        assert resp.status_code == 200, (url, resp.text[-500:])
        assert resp.headers["Content-Security-Policy"].startswith("default-src 'none'")


def test_topic_offsets_equal_admin(cluster):
    admin = cluster.admin()
    page = client(cluster).get("/topics/Orders").text
    for mq in admin.queues("Orders"):
        row = re.search(rf'data-queue="{mq.broker}/{mq.queue_id}">.*?class="n min">(\d+)<.*?class="n max">(\d+)<',
                        page, re.S)
        assert row and (int(row[1]), int(row[2])) == (admin.min_offset(mq), admin.max_offset(mq))


def test_group_lag_equals_admin(cluster):
    rows = cluster.admin().consumer_progress("billing")
    page = client(cluster).get("/groups?group=billing").text
    for r in rows:
        cell = re.search(rf'data-queue="{r["topic"]}/{r["broker"]}/{r["queue_id"]}">.*?class="n lag">(\d+)<', page, re.S)
        assert cell and int(cell[1]) == r["lag"]


def test_message_by_key_is_escaped_with_trace_section(cluster):
    page = client(cluster).get("/messages?topic=Orders&key=k3").text
    assert "order &lt;b&gt;3&lt;/b&gt; é" in page and "<b>3" not in page
    assert "tracing not available" in page or "<h4>Trace</h4>" in page


def test_binary_body_is_hex_and_capped(cluster):
    page = client(cluster, preview_bytes=64).get("/messages?topic=Orders&key=binary").text
    assert "5120 bytes, binary (hex), first part shown" in page
    assert "00 01 02 03" in page and "40 41" not in page


def test_bad_input_is_refused_and_escaped(cluster):
    c = client(cluster)
    resp = c.get("/messages?topic=%3Cscript%3Ealert(1)%3C/script%3E&key=x")
    assert resp.status_code == 400 and "<script>" not in resp.text and "&lt;script&gt;" in resp.text
    assert c.get("/groups?group=../../etc").status_code == 400
    assert c.get("/messages?msg_id=zz").status_code == 400
    assert c.get("/messages?topic=Orders&begin=yesterday").status_code == 400
    assert c.get("/transactions?max=99999999").status_code == 400


def test_read_only_without_allow_actions(cluster):
    c = client(cluster)
    page = c.get("/topics").text
    assert "Create a topic" not in page
    token = CSRF.search(c.get("/cluster").text)
    resp = c.post("/topics", data={"topic": "Nope", "csrf_token": token[1] if token else ""})
    assert resp.status_code == 403 and "read-only" in resp.text
    assert "Nope" not in cluster.admin().topic_list()


def test_action_needs_csrf_and_login_when_a_token_is_set(cluster):
    c = client(cluster, allow_actions=True, admin_token="s3cret")
    assert c.post("/topics", data={"topic": "Made"}).status_code == 403            # no CSRF token
    csrf = CSRF.search(c.get("/login").text)[1]
    resp = c.post("/topics", data={"topic": "Made", "csrf_token": csrf})
    assert resp.status_code == 403 and "log in" in resp.text                      # not logged in
    assert c.post("/login", data={"token": "wrong", "csrf_token": csrf}).status_code == 403
    assert c.post("/login", data={"token": "s3cret", "csrf_token": csrf}).status_code == 303
    csrf = CSRF.search(c.get("/topics").text)[1]                                   # a new session
    resp = c.post("/topics", data={"topic": "Made", "queues": "2", "csrf_token": csrf}, follow_redirects=True)
    assert resp.status_code == 200 and "done: topic Made created" in resp.text
    assert "Made" in cluster.admin().topic_list()


def test_auth_on_without_token_is_read_only():
    cfg = Config(credentials="/nonexistent.key")
    assert cfg.auth_on and not cfg.actions_enabled
    assert Config(credentials="/k", admin_token="t").actions_enabled
    assert not Config(allow_actions=False).actions_enabled
    assert Config(allow_actions=True, admin_token="t").actions_enabled


def test_no_anonymous_actions_auth_off_needs_a_token():
    with pytest.raises(ValueError, match="--allow-actions with auth off needs --admin-token"):
        Config(allow_actions=True)
    assert Config(allow_actions=True, credentials="/k").actions_enabled   # auth on: users log in


def _login(web, token: str = "s3cret") -> str:
    """Log `web` in with the admin token; the new session's CSRF token."""
    csrf = CSRF.search(web.get("/login").text)[1]
    assert web.post("/login", data={"token": token, "csrf_token": csrf}).status_code == 303
    return CSRF.search(web.get("/topics").text)[1]


def test_groups_page_lists_what_consumer_list_does(cluster):
    admin = cluster.admin()
    listed = admin.group_list()
    assert "billing" in listed and "%RETRY%billing" not in admin.topic_list()   # no retry topic: still listed
    page = client(cluster).get("/groups").text
    shown = re.findall(r'<tr data-group="([^"]+)">', page)
    assert shown == sorted(listed)
    row = re.search(r'data-group="billing">.*?class="n online">(\d+)<.*?class="n lag">(\d+)<', page, re.S)
    stats = admin.consumer_stats("billing")
    assert row and (int(row[1]), int(row[2])) == (len(stats["clients"]), sum(r["lag"] or 0 for r in stats["rows"]))


def test_console_and_cli_write_times_alike():
    from quiver.tools.cli_common import ms_text, parse_when
    from quiver_console.app import fmt_ts
    for ms in (1, 1700000000123, 1764374400999):
        assert fmt_ts(ms) == ms_text(ms) and fmt_ts(ms).endswith("+00:00")
        assert parse_when(fmt_ts(ms).replace(" ", "T")) == ms
    assert parse_when("2023-11-14T22:13:20") == 1700000000000   # no offset: UTC, as the console reads it


def _fail(msgs):
    raise RuntimeError("poison")


def test_dlq_page_lists_dead_letters_and_flashes_a_failed_resend(cluster):
    """The resend itself runs tests/browser (Admin.resend_dlq opens a real Producer, which the
    in-process network does not carry): here its failure is shown, not raised."""
    admin = cluster.admin()
    admin.create_topic("Pay", queues=1)
    admin.set_group_config("payer", retry_max_times=0)
    with cluster.client(Producer, "pg2") as p:
        p.send(Message("Pay", b"poison", keys="p1"))
    c = cluster.client(PushConsumer, "payer", consume_from="first")
    c.subscribe("Pay")
    c.register(_fail)
    with c:
        assert wait_until(lambda: admin.dlq_messages("payer"), timeout=15)
    web = client(cluster, allow_actions=True, admin_token="s3cret")
    _login(web)
    page = web.get("/dlq?group=payer").text
    assert "poison" in page and "resend to Pay" in page
    csrf = CSRF.search(page)[1]
    msg_id = admin.dlq_messages("payer")[0].msg_id
    resp = web.post("/dlq/resend", data={"group": "payer", "msg_id": msg_id, "csrf_token": csrf},
                    follow_redirects=True)
    assert resp.status_code == 200 and "DLQ of payer" in resp.text, re.findall(r"<p class=\"flash[^<]*", resp.text)


def test_down_broker_still_renders(cluster):
    admin = cluster.admin()
    addr = broker_access(admin).all_broker_addrs()["broker-b"]
    cluster.network.disconnect(addr)
    try:
        c = client(cluster, request_timeout_ms=200)
        for url in ("/cluster", "/topics", "/topics/Orders", "/groups?group=billing", "/transactions"):
            resp = c.get(url)
            assert resp.status_code == 200 and 'class="error"' in resp.text, url
        listed = c.get("/groups").text   # the other broker's groups are still listed
        assert 'data-group="billing"' in listed and "broker-b: " in listed
    finally:
        cluster.network.reconnect(addr)


def test_rates_come_from_successive_samples():
    now = [0.0]
    r = Rates(clock=lambda: now[0])
    assert r.sample("t", 100) is None
    now[0] = 0.1
    assert r.sample("t", 150) is None          # too close: the first sample stays
    now[0] = 2.0
    assert r.sample("t", 300) == 100.0
    now[0] = 3.0
    assert r.sample("t", 10) is None           # went back (a reset)


def test_send_a_test_message_and_delete_a_topic_after_confirming(cluster):
    admin = cluster.admin()
    admin.create_topic("Scratch", queues=1)
    web = client(cluster, allow_actions=True, admin_token="s3cret")
    page = web.get("/topics/Scratch").text
    assert "Send a test message" not in page and "delete-link" not in page      # not logged in: no forms
    csrf = CSRF.search(web.get("/login").text)[1]
    assert web.post("/topics/Scratch/delete", data={"confirm": "Scratch", "csrf_token": csrf}).status_code == 403
    csrf = _login(web)
    resp = web.post("/topics/Scratch/send", data={"body": "hello <b>", "keys": "t1 t2", "tags": "test",
                                                  "csrf_token": csrf}, follow_redirects=True)
    assert resp.status_code == 200 and "done: a test message sent to Scratch: msgId" in resp.text, resp.text[-800:]
    found = admin.query_by_key("Scratch", "t2")
    assert [(m.body, m.tags) for m in found] == [(b"hello <b>", "test")]
    assert web.post("/topics/Scratch/send", data={"body": "", "csrf_token": csrf}).status_code == 400
    confirm = web.get("/topics/Scratch/delete").text
    assert 'name="confirm"' in confirm
    resp = web.post("/topics/Scratch/delete", data={"confirm": "Scratc", "csrf_token": csrf})
    assert resp.status_code == 400 and "to confirm" in resp.text                    # the name mistyped
    assert "Scratch" in admin.topic_list()
    resp = web.post("/topics/Scratch/delete", data={"confirm": "Scratch", "csrf_token": csrf}, follow_redirects=True)
    assert "done: topic Scratch deleted" in resp.text
    assert wait_until(lambda: "Scratch" not in admin.topic_list(), timeout=10)


def test_topic_page_charts_its_history_as_inline_svg(cluster):
    web = client(cluster)
    first = web.get("/topics/Orders").text
    assert "not enough samples yet" in first and "<script" not in first
    for _ in range(2):
        time.sleep(0.6)   # Rates measures over at least 0.5 s
        page = web.get("/topics/Orders?refresh=10").text
    assert page.count("<svg") == 2 and 'class="line"' in page and "<script" not in page
    csp = web.get("/topics/Orders").headers["Content-Security-Policy"]
    assert csp.startswith("default-src 'none'") and "script-src" not in csp   # the charts need no script
    assert '<meta http-equiv="refresh" content="10">' in page
    assert web.get("/topics/Orders?refresh=1").status_code == 400
    for _ in range(2):
        page = web.get("/groups?group=billing&refresh=30").text
    assert page.count("<svg") == 1 and 'data-chart="total lag"' in page and 'content="30"' in page


def test_groups_page_shows_producers_online(cluster):
    """Producers that heartbeat (transactional ones: their brokers ask them about open transactions)."""
    from quiver import TransactionProducer, TransactionState
    web = client(cluster)
    with cluster.client(TransactionProducer, "live-pg", checker=lambda m: TransactionState.COMMIT) as p:
        p._send_heartbeats()   # now, not in 30 s
        assert wait_until(lambda: 'data-producer-group="live-pg"' in web.get("/groups").text, timeout=15)
        cell = re.search(r'data-producer-group="live-pg">.*?class="clients">([^<]+)<', web.get("/groups").text, re.S)
        assert cell and p.client_id in cell[1]


def test_send_and_delete_inputs_are_checked():
    from quiver_console import inputs
    assert inputs.body({"body": "é"}) == "é".encode()
    assert inputs.keys({"keys": " a  b "}) == ["a", "b"]
    for bad in ({"body": ""}, {"body": "x" * (inputs.MAX_BODY_BYTES + 1)}):
        with pytest.raises(inputs.InputError, match="body"):
            inputs.body(bad)
    with pytest.raises(inputs.InputError, match="at most 16 keys"):
        inputs.keys({"keys": " ".join(f"k{i}" for i in range(17))})
    with pytest.raises(inputs.InputError, match="no control characters"):
        inputs.keys({"keys": "a\x01b"})
    inputs.confirmed({"confirm": " Orders "}, "Orders")
    with pytest.raises(inputs.InputError, match="type the topic's name, Orders"):
        inputs.confirmed({"confirm": "orders"}, "Orders")
