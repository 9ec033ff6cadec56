"""The "quiver" source on a Spark standalone cluster: a master and two workers as local processes.

Beyond local[*]: the driver only plans; executors in other processes (on other
hosts in a real deployment, as in compose's spark profile) pull their queue
ranges straight from three brokers. Every message must come back exactly once,
and tasks must have run on both workers.
"""

import os
import shutil
import sys

import pytest

pyspark = pytest.importorskip("pyspark")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("no Java for Spark", allow_module_level=True)

from support.spark_standalone import StandaloneSpark  # noqa: E402
from support.waiting import wait_for  # noqa: E402

from quiver import Admin, Message, Producer  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.spark]

TOPIC = "SparkSpread"
MESSAGES = 3000


def _send(namesrv: str, msgs: list[Message]):
    with Producer("spark-standalone-pg", namesrv=namesrv) as p:
        futs = [p.send_async(m) for m in msgs]
        return [f.result(60) for f in futs]


def _executors(spark) -> int:
    """Executors registered with the driver (the status tracker also lists the driver itself)."""
    return len(spark.sparkContext._jsc.sc().statusTracker().getExecutorInfos()) - 1


def _worker_of(cwd: str, cluster: StandaloneSpark) -> str:
    """A Python worker runs in its executor's dir, <worker work dir>/<app id>/<executor id>."""
    rel = os.path.relpath(cwd, cluster.path)
    assert not rel.startswith(".."), f"task ran outside the standalone workers: {cwd}"
    return rel.split(os.sep)[0]


def test_batch_over_3_brokers_on_master_and_two_workers_exactly_once(make_cluster, tmp_path):
    import quiver.spark as qs
    from pyspark.sql import functions as F

    brokers = make_cluster(brokers=3)
    admin = Admin(namesrv=brokers.namesrv)
    admin.create_topic(TOPIC, queues=4)
    admin.shutdown()
    msgs = [Message(TOPIC, f"spread-{i}".encode(), keys=[f"k{i}"]) for i in range(MESSAGES)]
    sent = {(r.broker, r.queue_id, r.queue_offset): (r.msg_id, m.body)
            for r, m in zip(_send(brokers.namesrv, msgs), msgs)}
    assert len(sent) == MESSAGES and len({k[:2] for k in sent}) == 12    # 3 brokers x 4 queues

    with StandaloneSpark(str(tmp_path / "spark"), workers=2) as cluster:    # workers start beside the driver
        spark = qs.session(cluster.master_url, "quiver-standalone-test", **{
            "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
            "spark.driver.memory": "512m", "spark.executor.memory": "512m", "spark.executor.cores": "1",
            "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2",
            # the executors' Python: this venv, where quiver is installed (session() also sets PYSPARK_PYTHON)
            "spark.pyspark.python": sys.executable})
        try:
            spark.sparkContext.setLogLevel("ERROR")
            cluster.wait_ready()
            wait_for(lambda: _executors(spark) == 2, 60, "an executor on each of the two workers", interval=0.5)
            df = (spark.read.format("quiver").option("namesrv", brokers.namesrv).option("topic", TOPIC)
                  .option("startingOffsets", "earliest").load())
            assert df.rdd.getNumPartitions() == 12                          # one task per (broker, queue)
            ran_in = F.udf(lambda: os.getcwd(), "string")
            rows = df.select("broker", "queue_id", "queue_offset", "msg_id", "body", ran_in().alias("cwd")).collect()

            assert len(rows) == MESSAGES
            got = {(r.broker, r.queue_id, r.queue_offset): (r.msg_id, bytes(r.body)) for r in rows}
            assert got == sent                                              # every message, none twice
            assert len({r.msg_id for r in rows}) == len({bytes(r.body) for r in rows}) == MESSAGES
            workers = {_worker_of(r.cwd, cluster) for r in rows}
            assert workers == {"worker-0", "worker-1"}, workers

            agg = df.selectExpr("count(*) c", "count(distinct msg_id) d").collect()[0]   # counted on the cluster
            assert (agg.c, agg.d) == (MESSAGES, MESSAGES)
            apps = cluster.status()["activeapps"]
            assert [a["name"] for a in apps] == ["quiver-standalone-test"] and apps[0]["cores"] == 2
        finally:
            spark.stop()
