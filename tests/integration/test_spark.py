"""The "quiver" PySpark data source against real brokers and a real local Spark (local[2]).

One SparkSession for the module. Expected sets always come from what the
producer was told (SendResult: broker, queue, offset, msg id), so the tests
check planning and executor pulls: counts, no duplicates, no gaps.
"""

import os
import random
import shutil
import threading
import time

import pytest

pyspark = pytest.importorskip("pyspark")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("no Java for local Spark", allow_module_level=True)

from quiver import Admin, Message, Producer  # noqa: E402
from support.spark import local_spark  # noqa: E402
from support.waiting import wait_for  # noqa: E402
from quiver.tools.local import LocalCluster, wait_healthy  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.spark]


@pytest.fixture(scope="module")
def spark():
    yield from local_spark("quiver-tests")


def _cluster(path, brokers: int, *broker_args) -> LocalCluster:
    c = LocalCluster(str(path))
    c.add_namesrv()
    c.wait()
    for _ in range(brokers):
        c.add_broker(None, None, *broker_args)
    c.wait()
    c.wait_registered(brokers)
    return c


@pytest.fixture(scope="module")
def two_brokers(tmp_path_factory):
    c = _cluster(tmp_path_factory.mktemp("spark2b"), 2)
    yield c
    c.stop()


def _send(namesrv: str, msgs: list[Message]):
    with Producer("spark-pg", namesrv=namesrv) as p:
        futs = [p.send_async(m) for m in msgs]
        return [f.result(60) for f in futs]


def _reader(spark, namesrv: str, topic: str, **opts):
    r = spark.read.format("quiver").option("namesrv", namesrv).option("topic", topic)
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()


def _keyed(rows):
    return {(r.broker, r.queue_id, r.queue_offset): r for r in rows}


def test_batch_20k_over_2_brokers_x_4_queues_exact(spark, two_brokers):
    admin = Admin(namesrv=two_brokers.namesrv)
    admin.create_topic("SparkBatch", queues=4)
    admin.shutdown()
    msgs = [Message("SparkBatch", f"body-{i}".encode(), tags="even" if i % 2 == 0 else "odd", keys=[f"k{i}", "x"],
                    properties={"seq": str(i)}) for i in range(20_000)]
    results = _send(two_brokers.namesrv, msgs)
    sent = {(r.broker, r.queue_id, r.queue_offset): (r.msg_id, m.body) for r, m in zip(results, msgs)}
    assert len(sent) == 20_000 and len({k[:2] for k in sent}) == 8

    df = _reader(spark, two_brokers.namesrv, "SparkBatch")
    assert df.rdd.getNumPartitions() == 8   # one per (broker, queue)
    rows = df.select("broker", "queue_id", "queue_offset", "msg_id", "body").collect()
    assert len(rows) == 20_000
    got = {(r.broker, r.queue_id, r.queue_offset): (r.msg_id, bytes(r.body)) for r in rows}
    assert got == sent

    one = _reader(spark, two_brokers.namesrv, "SparkBatch").where("queue_offset = 7").limit(1).collect()[0]
    assert one.tags in ("even", "odd") and one.keys[1] == "x" and one.properties["seq"].isdigit()
    assert one.store_timestamp >= one.born_timestamp

    # minPartitions splits big queue ranges; still exact
    split = _reader(spark, two_brokers.namesrv, "SparkBatch", minPartitions="20")
    assert split.rdd.getNumPartitions() >= 20
    agg = split.selectExpr("count(*) c", "count(distinct broker, queue_id, queue_offset) d").collect()[0]
    assert (agg.c, agg.d) == (20_000, 20_000)

    # tag subscription: broker-side hash filter, exact by string
    assert _reader(spark, two_brokers.namesrv, "SparkBatch", subscription="odd").count() == 10_000


def test_offset_ranges_and_timestamps(spark, two_brokers):
    admin = Admin(namesrv=two_brokers.namesrv)
    admin.create_topic("SparkRange", queues=2)
    admin.shutdown()
    first = _send(two_brokers.namesrv, [Message("SparkRange", f"a{i}".encode()) for i in range(400)])
    time.sleep(0.05)
    mark = int(time.time() * 1000)
    time.sleep(0.05)
    second = _send(two_brokers.namesrv, [Message("SparkRange", f"b{i}".encode()) for i in range(400)])
    time.sleep(0.05)
    mark2 = int(time.time() * 1000)
    time.sleep(0.05)
    _send(two_brokers.namesrv, [Message("SparkRange", f"c{i}".encode()) for i in range(100)])

    starting = '{"SparkRange": {"broker-a": {"0": 10, "1": -2}, "broker-b": {"0": -1, "1": 5}}}'
    ending = '{"SparkRange": {"broker-a": {"0": 30, "1": 3}, "broker-b": {"0": -1, "1": -1}}}'
    rows = _reader(spark, two_brokers.namesrv, "SparkRange", startingOffsets=starting,
                   endingOffsets=ending).select("broker", "queue_id", "queue_offset").collect()
    got = {(r.broker, r.queue_id, r.queue_offset) for r in rows}
    maxes = {}
    for r in first + second:
        maxes[(r.broker, r.queue_id)] = max(maxes.get((r.broker, r.queue_id), -1), r.queue_offset)
    per_queue = {}
    for b, q, o in got:
        per_queue.setdefault((b, q), set()).add(o)
    assert per_queue[("broker-a", 0)] == set(range(10, 30))
    assert per_queue[("broker-a", 1)] == set(range(0, 3))
    assert ("broker-b", 0) not in per_queue                       # latest -> latest: nothing
    assert min(per_queue[("broker-b", 1)]) == 5 and len(per_queue[("broker-b", 1)]) == max(per_queue[("broker-b", 1)]) - 4

    by_ts = _reader(spark, two_brokers.namesrv, "SparkRange", startingTimestamp=str(mark),
                    endingTimestamp=str(mark2)).select("body").collect()
    assert sorted(bytes(r.body) for r in by_ts) == sorted(f"b{i}".encode() for i in range(400))


def test_sql92_pushdown_exact(spark, two_brokers):
    pytest.importorskip("quiver_filter")
    from quiver_filter import sql92
    admin = Admin(namesrv=two_brokers.namesrv)
    admin.create_topic("SparkSql", queues=4)
    admin.shutdown()
    filters = [two_brokers.add_service("filter", "quiver_filter", "--broker", b.addr, "--register-interval-ms",
                                       "1000", data=False) for b in two_brokers.services if b.role == "broker"]
    wait_healthy(filters)
    rng = random.Random(8)
    msgs = []
    for i in range(3000):
        props = {"seq": str(i), "amount": str(rng.randint(0, 1000))}
        if rng.random() < 0.7:
            props["region"] = rng.choice(["eu", "us", "ap"])
        msgs.append(Message("SparkSql", f"s{i}".encode(), tags=rng.choice(["vip", "std"]), properties=props))
    _send(two_brokers.namesrv, msgs)
    expr = "(region = 'eu' AND amount BETWEEN 100 AND 500) OR TAGS = 'vip'"
    sel = sql92.compile(expr)
    want = {m.properties["seq"] for m in msgs if sel.matches({**m.properties, "TAGS": m.tags})}
    deadline = time.monotonic() + 20    # filter servers reach the route with their next registration
    while True:
        admin = Admin(namesrv=two_brokers.namesrv)
        route = admin.topic_route("SparkSql")
        admin.shutdown()
        if len([a for v in route.get("filter_servers", {}).values() for a in v]) >= 2:
            break
        assert time.monotonic() < deadline, route
        time.sleep(0.2)
    rows = _reader(spark, two_brokers.namesrv, "SparkSql", subscription=f"sql:{expr}").select("properties").collect()
    got = [r.properties["seq"] for r in rows]
    assert len(got) == len(set(got)) and set(got) == want


def _stream(spark, namesrv, topic, out, ckpt, trigger, **opts):
    r = spark.readStream.format("quiver").option("namesrv", namesrv).option("topic", topic)
    for k, v in opts.items():
        r = r.option(k, v)
    w = r.load().writeStream.format("parquet").option("path", out).option("checkpointLocation", ckpt)
    return w.trigger(**trigger).start()


def _parquet_rows(spark, out):
    import quiver.spark as qs
    if not os.path.exists(os.path.join(out, "_spark_metadata")):
        return []
    return spark.read.schema(qs.SCHEMA).parquet(out).select("broker", "queue_id", "queue_offset", "body").collect()


# Spark gives a Python worker a fixed 10 s to start and connect back; on a slow moment of a shared
# machine it may not, which fails the micro-batch. Resuming from the checkpoint is this test's point,
# so such a query is restarted (twice at most) and must still end with every message exactly once.
SPARK_WORKER_START = "Python worker failed to connect back"


def _running(q, restart, restarts: list) -> object:
    exc = q.exception()
    if exc is not None and SPARK_WORKER_START in str(exc) and len(restarts) < 2:
        restarts.append(str(exc)[:200])
        return restart()
    assert exc is None, exc
    return q


def test_stream_into_parquet_restart_resumes_exactly(spark, two_brokers, tmp_path):
    admin = Admin(namesrv=two_brokers.namesrv)
    admin.create_topic("SparkStream", queues=2)
    admin.shutdown()
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    sent = _send(two_brokers.namesrv, [Message("SparkStream", f"p{i}".encode()) for i in range(500)])
    def start():
        return _stream(spark, two_brokers.namesrv, "SparkStream", out, ckpt, {"processingTime": "500 milliseconds"},
                       startingOffsets="earliest")
    q, restarts = start(), []
    try:
        producer = threading.Thread(target=lambda: sent.extend(
            _send(two_brokers.namesrv, [Message("SparkStream", f"q{i}".encode()) for i in range(1000)])))
        producer.start()
        producer.join()
        deadline = time.monotonic() + 90
        while len(_parquet_rows(spark, out)) < 1500:
            q = _running(q, start, restarts)
            assert time.monotonic() < deadline, "stream did not catch up"
            time.sleep(1)
    finally:
        q.stop()
    sent.extend(_send(two_brokers.namesrv, [Message("SparkStream", f"r{i}".encode()) for i in range(1000)]))
    # restart from the checkpoint: availableNow, at most 400 offsets per batch
    q = _stream(spark, two_brokers.namesrv, "SparkStream", out, ckpt, {"availableNow": True},
                startingOffsets="earliest", maxOffsetsPerTrigger="400")
    q.awaitTermination(120)
    assert q.exception() is None
    sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    assert sum(sizes) == 1000 and max(sizes) <= 400, sizes
    rows = _parquet_rows(spark, out)
    keys = [(r.broker, r.queue_id, r.queue_offset) for r in rows]
    assert len(keys) == len(set(keys)) == 2500
    assert set(keys) == {(r.broker, r.queue_id, r.queue_offset) for r in sent}


def test_retention_past_checkpoint_fail_or_skip(spark, tmp_path):
    c = _cluster(tmp_path / "ret", 1, "--segment-bytes", "65536", "--file-reserved-hours", "0")
    try:
        admin = Admin(namesrv=c.namesrv)
        admin.create_topic("SparkRet", queues=1)
        body = b"x" * 1024
        _send(c.namesrv, [Message("SparkRet", body) for _ in range(50)])
        out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
        q = _stream(spark, c.namesrv, "SparkRet", out, ckpt, {"availableNow": True}, startingOffsets="earliest")
        q.awaitTermination(60)
        assert len(_parquet_rows(spark, out)) == 50
        _send(c.namesrv, [Message("SparkRet", body) for _ in range(400)])
        broker = next(s for s in c.services if s.role == "broker")
        assert admin.clean_expired(broker.addr) > 0
        from quiver.client.base import MessageQueue
        low = admin.min_offset(MessageQueue("SparkRet", "broker-a", 0))
        assert low > 50, low
        admin.shutdown()

        shutil.copytree(ckpt, ckpt + "-2")
        q = _stream(spark, c.namesrv, "SparkRet", out, ckpt, {"availableNow": True})
        with pytest.raises(Exception) as err:
            q.awaitTermination(60)
        assert "retention" in str(err.value) and "failOnDataLoss" in str(err.value)

        q = _stream(spark, c.namesrv, "SparkRet", out, ckpt + "-2", {"availableNow": True}, failOnDataLoss="false")
        q.awaitTermination(60)
        assert q.exception() is None
        offsets = sorted(r.queue_offset for r in _parquet_rows(spark, out))
        assert offsets == list(range(50)) + list(range(low, 450))
    finally:
        c.stop()


def test_stream_reader_offsets_without_spark_4_0_path_and_new_queues(two_brokers):
    """PySpark 4.0/4.1 call latestOffset() bare: the reader caps from the last planned end itself."""
    from quiver.spark import Options, QuiverStreamReader
    admin = Admin(namesrv=two_brokers.namesrv)
    admin.create_topic("SparkCap", queues=1, brokers=["broker-a"])
    _send(two_brokers.namesrv, [Message("SparkCap", b"c") for _ in range(250)])
    reader = QuiverStreamReader(Options.parse({"namesrv": two_brokers.namesrv, "topic": "SparkCap",
                                               "startingOffsets": "earliest", "maxOffsetsPerTrigger": "100"}))
    try:
        assert reader.initialOffset() == {"SparkCap": {"broker-a": {"0": 0}}}
        ends = [reader.latestOffset()["SparkCap"]["broker-a"]["0"] for _ in range(4)]
        assert ends == [100, 200, 250, 250]
        # a restart: Spark replays the checkpointed offset through partitions(x, x) first
        fresh = QuiverStreamReader(reader.opts)
        assert fresh.partitions({"SparkCap": {"broker-a": {"0": 120}}}, {"SparkCap": {"broker-a": {"0": 120}}}) == []
        assert fresh.latestOffset()["SparkCap"]["broker-a"]["0"] == 220
        fresh.stop()
        # new queues (and brokers) appear in the next latestOffset, starting at their earliest offset
        admin.create_topic("SparkCap", queues=2)
        _send(two_brokers.namesrv, [Message("SparkCap", b"n") for _ in range(40)])
        end = reader.latestOffset()
        assert set(end["SparkCap"]) == {"broker-a", "broker-b"} and set(end["SparkCap"]["broker-b"]) == {"0", "1"}
        parts = reader.partitions({"SparkCap": {"broker-a": {"0": 250}}}, end)
        planned = sum(r.size for p in parts for r in p.ranges)
        assert planned == sum(v for b in end["SparkCap"].values() for v in b.values()) - 250
    finally:
        reader.stop()
        admin.shutdown()


def test_quiver_ingest_cli_writes_partitioned_parquet(spark, two_brokers, tmp_path):
    """The ready job, as a user runs it: its own process and Spark, output read back here."""
    import subprocess
    import sys
    namesrv = two_brokers.namesrv
    Admin(namesrv=namesrv).create_topic("IngestCli", queues=2)
    _send(namesrv, [Message("IngestCli", f"row-{i}".encode(), keys=[f"k{i}"]) for i in range(500)])
    out = tmp_path / "lake"
    run = subprocess.run([sys.executable, "-m", "quiver.tools.cli", "--namesrv", namesrv, "ingest", "--topic", "IngestCli",
                          "--to", str(out), "--master", "local[1]"], capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    rows = spark.read.parquet(str(out)).select("topic", "body", "keys").collect()
    assert sorted(bytes(r.body) for r in rows) == sorted(f"row-{i}".encode() for i in range(500))
    assert {r.topic for r in rows} == {"IngestCli"} and all(len(r.keys) == 1 for r in rows)
    assert any(p.name.startswith("topic=") for p in out.iterdir())   # partitioned output


def test_batch_read_with_auth_on(spark, tmp_path):
    """Auth on: the driver plans and the executors pull over CURVE with the key file given as the
    `credentials` option; without it the read fails, saying why."""
    from quiver.wire.curve import init_auth_dir
    auth = str(tmp_path / "auth")
    admin_creds = init_auth_dir(auth)
    c = LocalCluster(str(tmp_path / "c"), auth_dir=auth)
    try:
        c.add_namesrv()
        c.wait()
        c.add_broker(None, None)
        c.wait()
        c.wait_registered(1)
        with Admin(namesrv=c.namesrv, credentials=admin_creds) as admin:
            admin.create_topic("SparkSecure", queues=2)
            reader_key = admin.acl_add_user("spark-reader")
            admin.acl_grant("spark-reader", "topic:SparkSecure", ["SUB"])
        from quiver.wire.curve import write_credentials
        key = str(tmp_path / "reader.key")
        write_credentials(key, reader_key)
        with Producer("spark-pg", namesrv=c.namesrv, credentials=admin_creds) as p:
            sent = [p.send(Message("SparkSecure", f"s{i}".encode())) for i in range(300)]
        rows = _reader(spark, c.namesrv, "SparkSecure", credentials=key).collect()
        assert sorted(r.body for r in rows) == sorted(f"s{i}".encode() for i in range(300))
        assert len({(r.broker, r.queue_id, r.queue_offset) for r in rows}) == len(sent)
        with pytest.raises(Exception, match="auth on|credentials"):
            _reader(spark, c.namesrv, "SparkSecure").collect()
    finally:
        c.stop()


def test_batch_read_of_a_topic_whose_early_segments_are_only_in_the_tiered_store(spark, tmp_path):
    """A broker with a file:// tiered store has dropped its first segments from disk: a batch read
    from offset 0 gets every message, the old ones served from the store, byte for byte."""
    c = _cluster(tmp_path / "tier", 1, "--tiered-store", f"file://{tmp_path}/store", "--segment-bytes", "32768",
                 "--local-retention-bytes", "0", "--clean-interval-ms", "300", "--flush-interval-ms", "100")
    try:
        with Admin(namesrv=c.namesrv) as admin:
            admin.create_topic("SparkTiered", queues=2)
            msgs = [Message("SparkTiered", b"t%d:" % i + bytes([i % 256]) * (i % 9)) for i in range(1500)]
            sent = {(r.queue_id, r.queue_offset): m.body for r, m in zip(_send(c.namesrv, msgs), msgs)}
            wait_for(lambda: all(r["min_offset"] == 0 < r["local_min_offset"]
                                 for r in admin.topic_status("SparkTiered")), 60, "the first segments only remote")
        rows = _reader(spark, c.namesrv, "SparkTiered").select("queue_id", "queue_offset", "body").collect()
        assert {(r.queue_id, r.queue_offset): bytes(r.body) for r in rows} == sent
    finally:
        c.stop()
