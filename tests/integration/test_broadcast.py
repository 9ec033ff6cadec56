"""Broadcasting: every consumer gets every message; offsets in a local file survive a restart."""

import json
import threading
import time

from quiver import Admin, ConsumeResult, Message, Producer, PushConsumer
from support.waiting import wait_for as _wait


def test_three_broadcast_consumers_each_get_all_and_a_restart_resumes(cluster, tmp_path):
    Admin(namesrv=cluster.namesrv).create_topic("News", queues=4)
    offset_dir = str(tmp_path / "offsets")
    got = {i: [] for i in range(3)}
    lock = threading.Lock()

    def make(i):
        def fn(msgs):
            with lock:
                got[i].extend(m.body for m in msgs)
            return ConsumeResult.SUCCESS
        c = PushConsumer("bc", namesrv=cluster.namesrv, broadcast=True, consume_from="first",
                         offset_dir=offset_dir, instance_name=f"inst-{i}")
        c.subscribe("News")
        c.register(fn)
        return c.start()

    consumers = [make(i) for i in range(3)]
    with Producer("pg", namesrv=cluster.namesrv) as p:
        for f in [p.send_async(Message("News", f"m{i}".encode())) for i in range(300)]:
            f.result(10)
        _wait(lambda: all(len(g) >= 300 for g in got.values()), 15, "every consumer to get everything")
        assert all(sorted(g) == sorted(f"m{i}".encode() for i in range(300)) for g in got.values())
        assert all(len(c.assignment()) == 4 for c in consumers)

        consumers[2].shutdown()  # offsets written locally on shutdown
        files = list((tmp_path / "offsets").glob("*@inst-2/bc/offsets.json"))
        assert len(files) == 1
        assert sum(r["offset"] for r in json.loads(files[0].read_text())["offsets"]) == 300
        got[2].clear()
        for f in [p.send_async(Message("News", f"n{i}".encode())) for i in range(100)]:
            f.result(10)
        consumers[2] = make(2)  # consume_from="first", yet it resumes where it stopped
        _wait(lambda: all(len(g) >= 400 for g in (got[0], got[1])) and len(got[2]) >= 100, 15, "after restart")
        time.sleep(0.3)
    assert sorted(got[2]) == sorted(f"n{i}".encode() for i in range(100))
    for c in consumers:
        c.shutdown()
