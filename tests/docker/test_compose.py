"""compose.yaml on a real Docker engine: build, up, traffic, scale, restart, kill -9, down + up.

One compose project for the whole module, driven in file order: each test builds on the
state the previous ones left (the cluster, the messages acknowledged so far in `ledger`).
The client is the image itself on the compose network (tests/docker/client.py), except in
the dev-profile test, where this process is the host client. The offset-msgId lookup is
checked last so that, under `-x`, its failure does not hide the rest.
"""

import time

import pytest

from quiver.client.access import broker_access
from quiver import Admin, Message, Producer, PullConsumer
from quiver_broker.migrations import head_revision

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(600)]

ONE = {"namesrv": 1, "broker-store": 1, "filter": 1, "scheduler": 1, "txn-checker": 1}
SCALED = {**ONE, "broker-store": 3, "filter": 2}
SCALE_ARGS = ["--scale", "broker-store=3", "--scale", "filter=2"]
SLOTS = {"broker-1", "broker-2", "broker-3"}
DURABLE = "Durable"  # the topic whose every acknowledged message must survive each step


@pytest.fixture(scope="module")
def ledger() -> dict:
    """What the module has seen: the bodies of DURABLE acknowledged so far, drains made, timings."""
    return {"acked": [], "drains": 0, "timings": {}}


@pytest.fixture(scope="module")
def stack(project, ledger):
    """The project up with one replica per service, every container healthy."""
    t0 = time.monotonic()
    project.up()
    project.wait_healthy(ONE)
    ledger["timings"]["up"] = time.monotonic() - t0
    return project


@pytest.fixture(scope="module")
def traffic(stack) -> dict:
    return stack.client("traffic", topic="Orders")


def assert_every_acked_message_is_served(project, ledger) -> None:
    ledger["drains"] += 1
    want = ledger["acked"]
    got = project.client("consume", topic=DURABLE, group=f"check-{ledger['drains']}", want=len(want))["bodies"]
    missing = sorted(set(want) - set(got))
    assert not missing, f"{len(missing)} of {len(want)} acknowledged messages are gone, e.g. {missing[:5]}"


def broker_names(project) -> set[str]:
    return set(project.client("brokers")["brokers"])


def send_acked(project, ledger, count: int, prefix: str) -> dict:
    out = project.client("send", topic=DURABLE, count=count, prefix=prefix)
    assert len(out["acked"]) == count
    ledger["acked"].extend(out["acked"])
    return out


def test_image_is_small(image):
    print(f"\nimage {image['size_bytes'] / 1e6:.0f} MB on {image['base']}, build {image['build_s']:.1f} s")
    assert image["size_bytes"] < 400e6


def test_up_names_the_broker_by_its_slot(stack):
    assert broker_names(stack) == {"broker-1"}  # the first free slot of the volume, not the hostname


def test_send_and_consume(traffic):
    assert traffic["send"]["ok"] and traffic["send"]["sent"] == 200
    assert traffic["consume"] == {"ok": True, "bodies": 200}


def test_kafka_client_on_the_host_through_the_gateway(stack, traffic):
    """The kafka service: a Kafka client on the host (its published port) sees the topic and produces."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient
    from support.waiting import wait_for
    conf = {"bootstrap.servers": f"127.0.0.1:{stack.kafka_port}"}
    admin = AdminClient(conf)
    wait_for(lambda: "Orders" in admin.list_topics(timeout=5).topics, 120, "the gateway to list Orders")
    acked = []
    p = confluent_kafka.Producer({**conf, "acks": "all"})
    p.produce("Orders", b"from kafka", key=b"k1", on_delivery=lambda err, msg: acked.append(err))
    assert p.flush(30) == 0 and acked == [None]


def test_tag_filter(traffic):
    assert traffic["tags"]["ok"], traffic["tags"]
    assert traffic["tags"]["bodies"] == sorted(f"order-{i}" for i in range(1, 200, 2))


def test_key_query(traffic):
    assert traffic["key"] == {"ok": True, "bodies": ["order-42"]}


def test_sql92_through_the_filter_server(traffic):
    assert traffic["sql92"]["ok"], traffic["sql92"]
    assert traffic["sql92"]["bodies"] == sorted(f"order-{i}" for i in range(100, 110))


def test_delay_level_through_the_scheduler(traffic):
    assert traffic["delay"]["ok"], traffic["delay"]
    assert traffic["delay"]["bodies"] == ["delayed-1"] and traffic["delay"]["after_s"] >= 0.9


def test_transaction_commit_delivered_rollback_never(traffic):
    assert traffic["transaction"] == {"ok": True, "bodies": ["tx-commit"]}


def test_scale_to_three_brokers_and_two_filters(project, stack, ledger):
    t0 = time.monotonic()
    project.up(*SCALE_ARGS)
    project.wait_healthy(SCALED)
    ledger["timings"]["scale"] = time.monotonic() - t0
    assert broker_names(project) == SLOTS
    project.client("create", topic=DURABLE, queues=4)
    out = send_acked(project, ledger, 300, "before-restart")
    assert set(out["per_broker"]) == SLOTS  # the topic is spread over every broker
    assert_every_acked_message_is_served(project, ledger)


def test_docker_restart_of_a_broker_keeps_acked_messages(project, ledger):
    broker = project.containers("broker-store")[0]
    project.docker("restart", "-t", "10", broker["id"])
    project.wait_healthy(SCALED)
    assert broker_names(project) == SLOTS
    assert_every_acked_message_is_served(project, ledger)


def test_kill_9_of_a_broker_keeps_acked_messages(project, ledger):
    send_acked(project, ledger, 300, "before-kill")
    broker = project.containers("broker-store")[1]
    project.docker("kill", "-s", "KILL", broker["id"])   # right after the acks: async flush had no turn
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:  # `restart: unless-stopped` may bring it back by itself
        row = next(r for r in project.containers("broker-store") if r["id"] == broker["id"])
        if row["state"] != "running" or row["started"] != broker["started"]:
            break
        time.sleep(0.2)
    if row["state"] != "running":
        project.docker("start", broker["id"])
    project.wait_healthy(SCALED)
    assert broker_names(project) == SLOTS
    assert_every_acked_message_is_served(project, ledger)


def test_down_then_up_keeps_every_message(project, ledger):
    t0 = time.monotonic()
    project.compose("down", "--timeout", "10")          # containers and network go; volumes stay
    assert project.containers() == []
    project.up(*SCALE_ARGS)
    project.wait_healthy(SCALED)
    ledger["timings"]["down+up"] = time.monotonic() - t0
    assert broker_names(project) == SLOTS               # new containers, the same three slots
    assert_every_acked_message_is_served(project, ledger)
    orders = set(project.client("consume", topic="Orders", group="after-down-up", want=203)["bodies"])
    # the traffic test's, and the Kafka client's through the gateway
    assert orders == {f"order-{i}" for i in range(200)} | {"delayed-1", "tx-commit", "from kafka"}


def test_scale_down_then_up_serves_the_old_data(project, ledger):
    project.up("--scale", "broker-store=1", "--scale", "filter=2")
    project.wait_healthy({**SCALED, "broker-store": 1})
    assert len(broker_names(project)) == 1
    project.up(*SCALE_ARGS)
    project.wait_healthy(SCALED)
    assert broker_names(project) == SLOTS
    assert_every_acked_message_is_served(project, ledger)


def test_dev_profile_serves_a_client_on_the_host(project):
    """`--profile dev up -d broker-dev`: a broker that advertises 127.0.0.1 with its port published."""
    project.compose("--profile", "dev", "up", "-d", "--no-build", "broker-dev")
    project.wait_healthy({**SCALED, "broker-dev": 1})
    namesrv = f"127.0.0.1:{project.namesrv_port}"
    try:
        with Admin(namesrv=namesrv) as admin:
            admin.create_topic("DevTopic", queues=2, brokers=["broker-dev"])
            assert broker_access(admin).all_broker_addrs()["broker-dev"] == f"127.0.0.1:{project.dev_broker_port}"
        with Producer("dev-host", namesrv=namesrv) as p:
            sent = [p.send(Message("DevTopic", f"dev-{i}".encode())).msg_id for i in range(10)]
        got, deadline = set(), time.monotonic() + 20
        with PullConsumer("dev-host", namesrv=namesrv, consume_from="first") as c:
            c.subscribe("DevTopic")
            while len(got) < 10 and time.monotonic() < deadline:
                got.update(m.body.decode() for m in c.poll(0.3))
        assert len(sent) == 10 and got == {f"dev-{i}" for i in range(10)}
    finally:
        project.compose("--profile", "dev", "rm", "-s", "-f", "broker-dev")


PG_URL = "postgresql+psycopg://quiver:quiver@postgres/quiver"  # the README's postgres line
PG_UP = ["--profile", "postgres", "up", "-d", "--no-build", "--scale", "broker-store=3"]
PG_SCALED = {**ONE, "broker-store": 3, "postgres": 1}


def psql(project, sql: str) -> list[tuple[str, ...]]:
    """Rows of `sql` in the postgres container's quiver database, as text."""
    pg = project.containers("postgres")[0]["id"]
    out = project.docker("exec", pg, "psql", "-U", "quiver", "-d", "quiver", "-AtF", "\t", "-c", sql).stdout
    return sorted(tuple(line.split("\t")) for line in out.splitlines() if line)


def stored_offsets(project, group: str, want_total: int, timeout_s: float = 20) -> dict:
    """(broker, queue) -> offset of `group` in PostgreSQL, once they add up to `want_total`
    (brokers persist offsets every 5 s and when they stop)."""
    deadline = time.monotonic() + timeout_s
    while True:
        rows = psql(project, f"SELECT broker, queue_id, \"offset\" FROM consumer_offsets WHERE grp = '{group}'")
        got = {(b, int(q)): int(o) for b, q, o in rows}
        if sum(got.values()) == want_total or time.monotonic() > deadline:
            return got
        time.sleep(0.5)


def test_postgres_profile_three_brokers_share_one_database(postgres_project):
    """Issue 16 item 3: `--profile postgres` with 3 brokers; every broker keeps its own rows in the
    one database, and `down` + `up` finds them again."""
    project = postgres_project
    project.env["QUIVER_METADATA_URL"] = PG_URL
    t0 = time.monotonic()
    project.compose(*PG_UP)   # the brokers start next to postgres and wait for it
    project.wait_healthy(PG_SCALED, timeout_s=180)
    up_s = time.monotonic() - t0
    assert broker_names(project) == SLOTS
    brokers = project.containers("broker-store")
    no_sqlite = project.docker("exec", brokers[0]["id"], "sh", "-c",
                               "ls /data/broker/*/metadata.db 2>/dev/null | wc -l")
    assert no_sqlite.stdout.strip() == "0", "brokers use SQLite: compose.yaml does not pass QUIVER_METADATA_URL"

    assert project.client("create", topic="Shared", queues=4)["brokers"] == sorted(SLOTS)
    sent = project.client("send", topic="Shared", count=300, prefix="pg")
    assert len(sent["acked"]) == 300 and set(sent["per_broker"]) == SLOTS
    got = project.client("consume", topic="Shared", group="pg-group", want=300)["bodies"]
    assert got == sorted(sent["acked"])
    assert psql(project, "SELECT broker FROM topics WHERE name = 'Shared'") == [(b,) for b in sorted(SLOTS)]
    offsets = stored_offsets(project, "pg-group", 300)
    assert {b for b, _ in offsets} == SLOTS and len(offsets) == 12, offsets  # queue 0..3 of each broker
    assert {b: sum(o for (bb, _), o in offsets.items() if bb == b) for b in SLOTS} == sent["per_broker"]
    assert psql(project, "SELECT version_num FROM alembic_version") == [(head_revision(),)]

    t0 = time.monotonic()
    project.compose("--profile", "postgres", "down", "--timeout", "10")   # volumes stay
    assert project.containers() == []
    project.compose(*PG_UP)
    project.wait_healthy(PG_SCALED, timeout_s=180)
    again_s = time.monotonic() - t0
    assert broker_names(project) == SLOTS
    assert psql(project, "SELECT broker FROM topics WHERE name = 'Shared'") == [(b,) for b in sorted(SLOTS)]
    assert stored_offsets(project, "pg-group", 300) == offsets
    more = project.client("send", topic="Shared", count=30, prefix="after")
    assert set(more["per_broker"]) == SLOTS
    got = project.client("consume", topic="Shared", group="pg-group", want=30, timeout_s=30)["bodies"]
    assert got == sorted(more["acked"])   # resumed at the stored offsets of all three brokers
    print(f"\npostgres profile: up {up_s:.1f} s, down + up {again_s:.1f} s")


def test_view_message_by_offset_msg_id(traffic, ledger):
    """Issue 16 item 1: the id carries the broker's own IPv4:port, the route its hostname."""
    print(f"\ntimings: { {k: round(v, 1) for k, v in ledger['timings'].items()} }")
    assert traffic["msgid"]["ok"], traffic["msgid"].get("error")
    assert traffic["msgid"]["body"] == "order-0"
