"""Brokers sharing one PostgreSQL metadata database (tests/support/postgres.py starts a real server).

Each broker keeps its own topics, groups and consumer offsets in the shared tables (a `broker`
column in every primary key); upgrades racing on an empty database serialise on an advisory
lock; an older Quiver's database is upgraded in place.
"""

import collections
import subprocess
import sys
import time

import pytest
from sqlalchemy import BigInteger, Column, Integer, MetaData, String, Table, create_engine, inspect, text

from quiver import Admin, Message, Producer, PullConsumer
from quiver_broker.metadata import Metadata
from quiver_broker.migrations import head_revision
from support.ha import ha_cluster, wait_for  # noqa: F401  (fixture)
from support.postgres import create_databases, running_postgres

pytestmark = pytest.mark.timeout(240)
TOPIC, GROUP = "Orders", "billing"


@pytest.fixture(scope="module")
def pg_server():
    with running_postgres() as prefix:
        yield prefix


@pytest.fixture
def pg(pg_server, request):
    """An empty database of its own on the module's server."""
    name = f"quiver_{request.node.name[5:45].lower()}"
    create_databases(pg_server, name)
    return pg_server + name


def _query(url: str, sql: str) -> list[tuple]:
    eng = create_engine(url)
    try:
        with eng.connect() as conn:
            return sorted(tuple(r) for r in conn.execute(text(sql)))
    finally:
        eng.dispose()


# one broker's start, as a process of its own: open the metadata (upgrading it) at a given instant
_START = """
import sys, time
from quiver_broker.metadata import Metadata
url, name, at = sys.argv[1], sys.argv[2], float(sys.argv[3])
time.sleep(max(0.0, at - time.time()))
m = Metadata(url, broker=name)
m.put_topic("Orders", 4, 4)
m.set_offset("billing", "Orders", 0, int(name.split("-")[1]))
m.close()
"""


def test_brokers_upgrading_one_empty_database_at_once(pg, tmp_path):
    """Six broker processes start at the same instant: one creates the schema under the advisory
    lock, the others wait for it and find the head there."""
    at = time.time() + 3  # every process has imported by then
    procs = []
    try:
        for i in range(6):
            with open(tmp_path / f"broker-{i}.log", "wb") as log:
                procs.append(subprocess.Popen([sys.executable, "-c", _START, pg, f"broker-{i}", str(at)],
                                              stdout=log, stderr=subprocess.STDOUT))
        codes = [p.wait(60) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
    logs = {i: (tmp_path / f"broker-{i}.log").read_text()[-1500:] for i, code in enumerate(codes) if code}
    assert not logs, logs
    assert _query(pg, "SELECT version_num FROM alembic_version") == [(head_revision(),)]
    assert _query(pg, "SELECT broker, \"offset\" FROM consumer_offsets") == [(f"broker-{i}", i) for i in range(6)]


def test_an_older_quivers_database_is_upgraded_in_place(pg):
    legacy = MetaData()  # what create_all made before migrations
    Table("topics", legacy, Column("name", String(255), primary_key=True),
          Column("read_queues", Integer, nullable=False), Column("write_queues", Integer, nullable=False),
          Column("perm", Integer, nullable=False), Column("sysflag", Integer, nullable=False),
          Column("order_topic", Integer, nullable=False))
    Table("subscription_groups", legacy, Column("name", String(255), primary_key=True),
          Column("retry_max_times", Integer, nullable=False), Column("consume_enable", Integer, nullable=False))
    Table("consumer_offsets", legacy, Column("grp", String(255), primary_key=True),
          Column("topic", String(255), primary_key=True), Column("queue_id", Integer, primary_key=True),
          Column("offset", BigInteger, nullable=False), Column("updated_ms", BigInteger, nullable=False))
    eng = create_engine(pg)
    legacy.create_all(eng)
    with eng.begin() as conn:
        conn.execute(text("INSERT INTO topics VALUES ('Orders', 4, 4, 6, 0, 0)"))
        conn.execute(text("INSERT INTO consumer_offsets VALUES ('billing', 'Orders', 2, 9, 1)"))
    meta = Metadata(pg, broker="broker-1")
    assert meta.topics[TOPIC]["read"] == 4 and meta.offsets == {(GROUP, TOPIC, 2): 9}
    meta.close()
    other = Metadata(pg, broker="broker-2")   # the next broker on the database starts empty
    assert other.topics == {} and other.offsets == {}
    other.put_topic(TOPIC, 8, 8)             # the key that collided before (topics_pkey)
    other.close()
    pk = inspect(eng).get_pk_constraint("topics")
    assert pk["name"] == "topics_pkey" and pk["constrained_columns"] == ["broker", "name"]
    assert inspect(eng).get_pk_constraint("consumer_offsets")["constrained_columns"] == [
        "broker", "grp", "topic", "queue_id"]
    eng.dispose()
    assert _query(pg, "SELECT broker, name, read_queues FROM topics") == [("broker-1", TOPIC, 4),
                                                                          ("broker-2", TOPIC, 8)]


def _consume_all(namesrv: str, want: int, timeout_s: float = 30) -> list:
    got, deadline = [], time.monotonic() + timeout_s
    with PullConsumer(GROUP, namesrv=namesrv, consume_from="first") as c:
        c.subscribe(TOPIC)
        while len(got) < want and time.monotonic() < deadline:
            got += c.poll(0.5)
        c.commit()
    return got


def _wait_offsets(url: str, want: dict, timeout_s: float = 20) -> list[tuple]:
    """Until the stored offsets of GROUP are `want` ((broker, queue) -> offset); the rows then."""
    deadline = time.monotonic() + timeout_s
    while True:
        rows = _query(url, f"SELECT broker, queue_id, \"offset\" FROM consumer_offsets WHERE grp = '{GROUP}'")
        if {(b, q): o for b, q, o in rows} == want or time.monotonic() > deadline:
            return rows
        time.sleep(0.2)


def test_three_brokers_share_one_database(make_cluster, pg):
    """3 broker processes, own data dirs, one PostgreSQL: the same topic on each, sends, consumes and
    commits, a restart of one; every broker's topics and offsets stay its own."""
    c = make_cluster(brokers=3, broker_args=("--metadata-url", pg, "--offset-persist-interval-ms", "200"))
    brokers = {s.name: s for s in c.services if s.role == "broker"}
    assert set(brokers) == {"broker-a", "broker-b", "broker-c"}   # they raced on the empty database
    with Admin(namesrv=c.namesrv) as admin:
        admin.create_topic(TOPIC, queues=4)                       # on all three: once collided
    assert _query(pg, f"SELECT broker FROM topics WHERE name = '{TOPIC}'") == [(b,) for b in sorted(brokers)]

    with Producer("shop", namesrv=c.namesrv) as p:
        sent = [p.send(Message(TOPIC, f"o-{i}".encode())) for i in range(120)]
    per_queue = collections.Counter((r.broker, r.queue_id) for r in sent)
    assert {b for b, _ in per_queue} == set(brokers) and len(per_queue) == 12
    got = _consume_all(c.namesrv, 120)
    assert sorted(m.body for m in got) == sorted(f"o-{i}".encode() for i in range(120))
    want = dict(per_queue)                  # queues 0..3 on three brokers: twelve separate offsets
    rows = _wait_offsets(pg, want)
    assert {(b, q): o for b, q, o in rows} == want

    c.restart(brokers["broker-b"])          # its topics and offsets come back from the shared database
    c.wait_registered(3)
    with Admin(namesrv=c.namesrv) as admin:
        route = admin.topic_route(TOPIC)
        assert sorted(b["broker_name"] for b in route["brokers"]) == sorted(brokers)
        progress = admin.consumer_progress(GROUP)
        assert len(progress) == 12 and all(r["lag"] == 0 for r in progress), progress
    assert {(b, q): o for b, q, o in _wait_offsets(pg, want)} == want
    with Producer("shop", namesrv=c.namesrv) as p:
        more = [p.send(Message(TOPIC, f"after-{i}".encode())) for i in range(30)]
    assert {r.broker for r in more} == set(brokers)
    got = _consume_all(c.namesrv, 30)       # the group resumes where it committed on every broker
    assert sorted(m.body for m in got) == sorted(f"after-{i}".encode() for i in range(30))
    want.update(collections.Counter((r.broker, r.queue_id) for r in more) + collections.Counter(per_queue))
    assert {(b, q): o for b, q, o in _wait_offsets(pg, want)} == want
    assert _query(pg, "SELECT count(*) FROM topics") == [(3,)]


def test_a_slave_on_the_shared_database_keeps_its_own_rows(ha_cluster, pg):
    """A slave mirrors its master's topics and offsets under `<name>@<id>`: it never writes the
    master's rows (same broker name, one database)."""
    url = ("--metadata-url", pg, "--offset-persist-interval-ms", "200")
    c, master, slave = ha_cluster("ASYNC_MASTER", master_args=url, slave_args=url)
    with Admin(namesrv=c.namesrv) as admin:
        admin.create_topic(TOPIC, queues=2)
    with Producer("shop", namesrv=c.namesrv) as p:
        sent = [p.send(Message(TOPIC, f"o-{i}".encode())) for i in range(20)]
    assert len(_consume_all(c.namesrv, 20)) == 20
    want = dict(collections.Counter(("bk", r.queue_id) for r in sent))
    mirrored = {**want, **{("bk@1", q): o for (_, q), o in want.items()}}
    wait_for(lambda: {(b, q): o for b, q, o in _wait_offsets(pg, mirrored, 1)} == mirrored, 20,
             "the slave to store the master's offsets under its own key")
    assert _query(pg, f"SELECT broker FROM topics WHERE name = '{TOPIC}'") == [("bk",), ("bk@1",)]
