"""The "quiver" sink against a real broker and a real local Spark (local[2]): batch and streaming writes.

What is sent is read back with the source; the streaming test fails a query in
the middle of a batch (after part of it was sent) and restarts it from its
checkpoint, then checks the promise of the docs: every source message in the
target at least once, exactly once by key.
"""

import os
import shutil
from collections import defaultdict

import pytest

pyspark = pytest.importorskip("pyspark")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("no Java for local Spark", allow_module_level=True)

from quiver import Admin, Message, Producer  # noqa: E402
from support.spark import local_spark  # noqa: E402
from quiver.tools.local import LocalCluster  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.spark]

KEY = "idempotence_key"


@pytest.fixture(scope="module")
def spark():
    yield from local_spark("quiver-sink-tests")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(str(tmp_path_factory.mktemp("sink")))
    c.add_namesrv()
    c.wait()
    c.add_broker(None, None)
    c.wait()
    c.wait_registered(1)
    yield c
    c.stop()


def _topics(namesrv: str, *topics: str) -> None:
    with Admin(namesrv=namesrv) as admin:
        for t in topics:
            admin.create_topic(t, queues=2)


def _read(spark, namesrv: str, topic: str):
    return spark.read.format("quiver").option("namesrv", namesrv).option("topic", topic).load()


def _user_props(props: dict) -> dict:
    return {k: v for k, v in props.items() if k not in ("UNIQ_KEY", "KEYS", "TAGS", "WAIT", KEY)}


def test_batch_write_reads_back_exact(spark, cluster):
    ns = cluster.namesrv
    _topics(ns, "SinkBatch", "SinkEven", "SinkOdd")
    rows = [(f"b-{i}".encode(), [f"k{i}", "x"] if i % 3 else None, "t" if i % 2 else None,
             {"seq": str(i), "UNIQ_KEY": "dropped"} if i % 5 else None) for i in range(300)]
    df = spark.createDataFrame(rows, "body binary, keys array<string>, tags string, properties map<string,string>")
    df.repartition(3).write.format("quiver").option("namesrv", ns).option("topic", "SinkBatch") \
        .option("writeId", "w1").mode("append").save()

    got = _read(spark, ns, "SinkBatch").collect()
    assert sorted((bytes(r.body), tuple(r.keys) or None, r.tags, tuple(sorted(_user_props(r.properties).items())))
                  for r in got) == sorted((b, tuple(k) if k else None, t, tuple(sorted((p or {}).items() - {
                      ("UNIQ_KEY", "dropped")}))) for b, k, t, p in rows)
    keys = [r.properties[KEY] for r in got]
    assert len(set(keys)) == 300 and all(k.startswith("w1:") and len(k.split(":")) == 3 for k in keys)
    assert {int(k.split(":")[1]) for k in keys} == {0, 1, 2}          # <writeId>:<partition>:<row>

    # per-row topics from a string body and a topic column (no topic option)
    spark.range(40).selectExpr("if(id % 2 = 0, 'SinkEven', 'SinkOdd') topic", "concat('s-', id) body") \
        .write.format("quiver").option("namesrv", ns).mode("append").save()
    both = {(r.topic, bytes(r.body)) for r in _read(spark, ns, "SinkEven,SinkOdd").collect()}
    assert both == {("SinkOdd" if i % 2 else "SinkEven", f"s-{i}".encode()) for i in range(40)}


def test_batch_write_refuses_bad_input_saying_why(spark, cluster):
    ns = cluster.namesrv
    w = spark.range(3).selectExpr("id body").write.format("quiver").option("namesrv", ns).option("topic", "T")
    with pytest.raises(Exception, match="column 'body' must be binary or string"):
        w.mode("append").save()
    with pytest.raises(Exception, match='appends to topics: write with .mode\\("append"\\)'):
        spark.range(1).selectExpr("'x' body").write.format("quiver").option("namesrv", ns) \
            .option("topic", "SinkBad").mode("overwrite").save()
    # an empty body without keys is no message (a tombstone needs keys): the task fails, naming the row
    bad = spark.createDataFrame([(b"ok",), (b"",)], "body binary").coalesce(1)
    with pytest.raises(Exception, match="row 1"):
        bad.write.format("quiver").option("namesrv", ns).option("topic", "SinkBad").mode("append").save()


def _pipeline(spark, ns: str, ckpt: str, poison: str | None = None):
    """SinkIn -> upper-cased bodies -> SinkOut, 200 offsets a batch, one send in flight at a time
    (what a failed task stored before the failure is then exact). The row whose property n is
    `poison` gets an empty body (no message: its task fails)."""
    src = (spark.readStream.format("quiver").option("namesrv", ns).option("topic", "SinkIn")
           .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "200").load())
    body = "upper(cast(body as string))"
    if poison is not None:
        body = f"if(properties['n'] = '{poison}', '', {body})"
    out = src.selectExpr(f"{body} body", "keys", "tags", "map('src', msg_id, 'n', properties['n']) properties")
    return (out.writeStream.format("quiver").option("namesrv", ns).option("topic", "SinkOut")
            .option("maxInFlight", "1").option("checkpointLocation", ckpt).trigger(availableNow=True).start())


def _send_in(ns: str, numbers: range) -> list:
    with Producer("sink-pg", namesrv=ns) as p:
        futs = [p.send_async(Message("SinkIn", f"m-{i}".encode(), tags="x", properties={"n": str(i)}))
                for i in numbers]
        return [f.result(60) for f in futs]


def test_stream_failed_mid_batch_restarts_with_the_same_keys(spark, cluster, tmp_path):
    """A task fails after sending 199 of its 200 rows (the 200th has an empty body): the query
    stops there, uncommitted. Restarted from its checkpoint (the poison fixed), Spark runs that
    batch again: the 199 are stored twice, with the same keys."""
    ns = cluster.namesrv
    with Admin(namesrv=ns) as admin:       # one queue: one partition a batch, in offset order
        admin.create_topic("SinkIn", queues=1)
        admin.create_topic("SinkOut", queues=2)
    sent = _send_in(ns, range(400))
    ckpt = str(tmp_path / "ckpt")
    q = _pipeline(spark, ns, ckpt, poison="399")
    with pytest.raises(Exception, match="row 199 \\(topic 'SinkOut'\\)"):
        q.awaitTermination(120)
    assert _read(spark, ns, "SinkOut").count() == 200 + 199    # batch 0, and batch 1 but its last row

    sent += _send_in(ns, range(400, 500))
    q = _pipeline(spark, ns, ckpt)
    assert q.awaitTermination(120) and q.exception() is None
    assert [p["batchId"] for p in q.recentProgress if p["numInputRows"]] == [1, 2]   # batch 1 ran again

    rows = _read(spark, ns, "SinkOut").select("body", "tags", "properties").collect()
    by_key = defaultdict(list)
    for r in rows:
        by_key[r.properties[KEY]].append((bytes(r.body), r.tags, r.properties["src"], r.properties["n"]))
    assert len(rows) == 500 + 199                                     # at least once: 199 twice
    assert {k.rsplit(":", 3)[0] for k in by_key} == {q.id}          # the checkpoint's query id, both runs
    assert len(by_key) == 500                                         # exactly once by key
    assert all(len(set(copies)) == 1 for copies in by_key.values())   # a key's copies are the same message
    assert sorted(c[0][2] for c in by_key.values()) == sorted(r.msg_id for r in sent)
    assert all(c[0][0] == f"M-{c[0][3]}".encode() and c[0][1] == "x" for c in by_key.values())
