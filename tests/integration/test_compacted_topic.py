"""A compacted topic on a real broker: 100 keys x 50 versions plus tombstones, `quiver topic
compact`, then a consumer from offset 0 sees exactly the latest value of each live key, no
tombstoned key once the delete retention passed, and ascending offsets with gaps."""

import time

import pytest

from quiver import Admin, Message, Producer, PullConsumer
from quiver.errors import MessageIllegalError
from quiver.tools.cli import main as cli_main
from quiver.wire.schema import TOPIC_COMPACT

TOPIC = "Prices"
KEYS, VERSIONS, DEAD = 100, 50, range(0, 100, 10)   # every 10th key gets a tombstone


def by_key(queues, msg, key):
    return queues[sum(key.encode()) % len(queues)]


def read_all(namesrv, group, latest, timeout=60):
    """Every message a fresh group reads from the start, once the latest values are all seen."""
    got = []
    with PullConsumer(group, namesrv=namesrv, consume_from="first") as c:
        c.subscribe(TOPIC, "*")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and {m.keys[0]: m.body for m in got} != latest:
            got.extend(c.poll(timeout=1.0))
        while more := c.poll(timeout=0.5):   # then the rest, until a poll finds nothing new
            got.extend(more)
    return got


def test_compacted_topic_keeps_latest_values(make_cluster, capsys):
    # the flush thread never runs here, as when a loaded machine starves it: `topic compact` must
    # still cover every sealed segment (a pass covers flushed records only; it syncs them first)
    c = make_cluster(broker_args=("--segment-bytes", str(64 * 1024), "--delete-retention-ms", "1000",
                                  "--compaction-interval-ms", "3600000", "--file-reserved-hours", "0",
                                  "--flush-interval-ms", "3600000"))
    broker = next(s for s in c.services if s.role == "broker")
    admin = Admin(namesrv=c.namesrv)
    admin.create_topic(TOPIC, queues=2, compact=True)
    admin.create_topic("Plain", queues=1)
    latest: dict[str, bytes] = {}
    with Producer("compact-pg", namesrv=c.namesrv, send_timeout=30) as p:   # 5k sends in flight
        futs = []
        for v in range(VERSIONS):
            for k in range(KEYS):
                body = f"k{k}-v{v}-".encode() + b"x" * 40
                futs.append(p.send_async(Message(TOPIC, body, keys=[f"k{k}"]), selector=by_key, arg=f"k{k}"))
                latest[f"k{k}"] = body
        for k in DEAD:
            futs.append(p.send_async(Message(TOPIC, b"", keys=[f"k{k}"]), selector=by_key, arg=f"k{k}"))
            del latest[f"k{k}"]
        for f in futs:
            f.result(30)
        dead_at = time.monotonic()   # every tombstone is stored by now
        with pytest.raises(MessageIllegalError, match="tombstone"):   # only a compacted topic takes one
            p.send(Message("Plain", b"", keys=["k"]))
        # roll the tombstones out of the active segment: a pass never touches it
        for f in [p.send_async(Message(TOPIC, b"f" * 1000, keys=["filler"]), selector=by_key, arg="filler")
                  for _ in range(160)]:
            f.result(30)
        latest["filler"] = b"f" * 1000
    # retention waits for compaction: every segment still holds values a compacted queue needs
    assert admin.clean_expired(broker.addr) == 0
    time.sleep(max(0.0, dead_at + 1.2 - time.monotonic()))   # the tombstones' delete retention ends
    assert cli_main(["--namesrv", c.namesrv, "topic", "compact", TOPIC, "-o", "json"]) == 0
    assert '"kept"' in capsys.readouterr().out
    assert all(r["compacted_to"] > r["min_offset"] for r in admin.topic_status(TOPIC))   # topic status shows it
    total = KEYS * VERSIONS + len(DEAD) + 160
    got = read_all(c.namesrv, "compact-cg", latest)
    assert {m.keys[0]: m.body for m in got} == latest
    per_queue: dict[int, list[int]] = {}
    for m in got:
        per_queue.setdefault(m.queue_id, []).append(m.queue_offset)
    assert len(got) < total // 10   # compacted: far fewer than were sent
    for offs in per_queue.values():
        assert offs == sorted(set(offs)) and offs[-1] - offs[0] + 1 > len(offs)   # ascending, with gaps
    assert not any(m.keys and m.body == b"" for m in got)
    # retention may now drop the compacted segments: the latest values stay
    assert admin.clean_expired(broker.addr) > 0
    again = read_all(c.namesrv, "compact-cg2", latest)
    assert sorted((m.queue_id, m.queue_offset) for m in again) == sorted((m.queue_id, m.queue_offset) for m in got)
    admin.purge_topic(TOPIC)   # drops the messages, keeps the topic compacted
    assert all(q["sysflag"] & TOPIC_COMPACT for q in admin.topic_route(TOPIC)["queues"])
