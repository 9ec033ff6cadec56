"""PushConsumer in clustering mode: shares queues, survives a kill -9, consume_from, progress."""

import os
import signal
import subprocess
import sys
import threading
import time


from quiver import Admin, ConsumeResult, Message, Producer, PushConsumer
from quiver.tools.cli import main as cli_main
from support.waiting import wait_for as _wait

EXPIRY_MS = 2000  # broker drops a silent client after this (RocketMQ: 120 s)

# One consumer process: appends "queue_id offset body" per consumed message to its file.
_CHILD = r"""
import sys, time, threading
from quiver import PushConsumer, ConsumeResult
namesrv, group, topic, out = sys.argv[1:5]
f = open(out, "a", buffering=1)
lock = threading.Lock()
def fn(msgs):
    with lock:
        for m in msgs:
            f.write(f"{m.queue_id} {m.queue_offset} {m.body.decode()}\n")
    return ConsumeResult.SUCCESS
c = PushConsumer(group, namesrv=namesrv, consume_from="first", heartbeat_interval_ms=500)
c.subscribe(topic, "*")
c.register(fn)
c.start()
print("started", flush=True)
while True:
    time.sleep(1)
"""


def _lines(paths):
    out = []
    for p in paths:
        try:
            with open(p) as f:
                for line in f:
                    parts = line.split()
                    if len(parts) == 3 and line.endswith("\n"):
                        out.append(parts[2])
        except FileNotFoundError:
            pass
    return out


def _owners(admin, group, topic):
    rows = [r for r in admin.consumer_progress(group) if r["topic"] == topic]
    return {r["queue_id"]: r["client_id"] for r in rows}


def test_three_consumers_share_8_queues_then_survive_a_kill_9(make_cluster, tmp_path):
    cluster = make_cluster(broker_args=("--client-expiry-ms", str(EXPIRY_MS)))
    admin = Admin(namesrv=cluster.namesrv)
    admin.create_topic("Shared", queues=8)
    outs = [str(tmp_path / f"c{i}.txt") for i in range(3)]
    procs = [subprocess.Popen([sys.executable, "-c", _CHILD, cluster.namesrv, "grp", "Shared", out],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
             for out in outs]
    try:
        def settled():
            owners = _owners(admin, "grp", "Shared")
            return len(owners) == 8 and None not in owners.values() and len(set(owners.values())) == 3 and owners
        owners = _wait(settled, 20, "3 consumers to own the 8 queues")
        with Producer("pg", namesrv=cluster.namesrv) as p:
            for f in [p.send_async(Message("Shared", f"a{i}".encode())) for i in range(2000)]:
                f.result(10)
            _wait(lambda: len(_lines(outs)) >= 2000, 20, "phase 1 consumption")
            time.sleep(0.3)
            got = _lines(outs)
            assert len(got) == 2000 and len(set(got)) == 2000  # exactly once while nobody joins or leaves

            # phase 2: kill -9 the owner of queue 0 while messages keep coming
            victim_cid = owners[0]
            sent = []

            def produce():
                for i in range(3000):
                    p.send_async(Message("Shared", f"b{i}".encode())).result(10)
                    sent.append(i)
                    if i % 100 == 0:
                        time.sleep(0.02)
            t = threading.Thread(target=produce)
            t.start()
            _wait(lambda: len(sent) > 800, 20, "production under way")
            pid = int(victim_cid.split("@")[1].split("#")[0])
            victim = next(pr for pr in procs if pr.pid == pid)
            os.kill(victim.pid, signal.SIGKILL)
            killed_at = time.monotonic()
            moved = _wait(lambda: (o := _owners(admin, "grp", "Shared")) and len(o) == 8
                          and victim_cid not in o.values() and None not in o.values() and o, 30, "takeover")
            takeover_s = time.monotonic() - killed_at
            t.join(60)
        expected = {f"a{i}" for i in range(2000)} | {f"b{i}" for i in range(3000)}
        _wait(lambda: expected <= set(_lines(outs)), 30, "every message after the kill")
        got = _lines(outs)
        dups = len(got) - len(set(got))
        print(f"takeover {takeover_s:.2f} s after kill -9 (expiry {EXPIRY_MS} ms), duplicates {dups}")
        assert set(got) == expected
        assert takeover_s < EXPIRY_MS / 1000 + 2 + 2.5  # expiry + its scan period + 2 s
        assert len(set(moved.values())) == 2
        assert dups < 1000  # only the victim's uncommitted window
    finally:
        for pr in procs:
            if pr.poll() is None:
                pr.kill()
            pr.wait(10)
        admin.shutdown()


def _collector():
    got, lock = [], threading.Lock()

    def fn(msgs):
        with lock:
            got.extend(msgs)
        return ConsumeResult.SUCCESS
    return got, fn


def test_consume_from_timestamp_first_last_and_reset_by_time(cluster):
    admin = Admin(namesrv=cluster.namesrv)
    admin.create_topic("Times", queues=2)
    with Producer("pg", namesrv=cluster.namesrv) as p:
        for i in range(40):
            p.send(Message("Times", f"old{i}".encode()))
        time.sleep(0.05)
        mark = int(time.time() * 1000)
        time.sleep(0.05)
        for i in range(20):
            p.send(Message("Times", f"new{i}".encode()))
    got, fn = _collector()
    with PushConsumer("by-time", namesrv=cluster.namesrv, consume_from=mark) as c:
        c.subscribe("Times")
        c.register(fn)
        c.start()
        _wait(lambda: len(got) >= 20, 10, "messages after the timestamp")
        time.sleep(0.3)
    assert sorted(m.body for m in got) == sorted(f"new{i}".encode() for i in range(20))

    got2, fn2 = _collector()  # "last": a new group starts at the end
    c = PushConsumer("from-last", namesrv=cluster.namesrv, consume_from="last")
    c.subscribe("Times")
    c.register(fn2)
    with c:
        _wait(lambda: len(c.assignment()) == 2, 10, "assignment")
        time.sleep(0.3)
        assert got2 == []

    # the group is stopped: move its offsets back to the start, it then re-reads everything
    admin.reset_offset("by-time", "Times", 0)
    got3, fn3 = _collector()
    c = PushConsumer("by-time", namesrv=cluster.namesrv, consume_from="last")
    c.subscribe("Times")
    c.register(fn3)
    with c:
        _wait(lambda: len(got3) >= 60, 10, "re-read after reset")
    assert len(got3) == 60
    admin.shutdown()


def test_progress_shows_owner_last_time_and_subscription_conflict(cluster, capsys):
    admin = Admin(namesrv=cluster.namesrv)
    admin.create_topic("Prog", queues=2)
    with Producer("pg", namesrv=cluster.namesrv) as p:
        for i in range(10):
            p.send(Message("Prog", str(i).encode(), tags="A"))
    got, fn = _collector()
    a = PushConsumer("prog", namesrv=cluster.namesrv, consume_from="first")
    a.subscribe("Prog", "A")
    a.register(fn)
    b = PushConsumer("prog", namesrv=cluster.namesrv, consume_from="first")
    b.subscribe("Prog", "B")
    b.register(fn)
    with a, b:
        _wait(lambda: len(got) >= 5, 10, "some consumption")
        a._persist_offsets(sync=True)
        b._persist_offsets(sync=True)
        conflicts = _wait(lambda: admin.subscription_conflicts("prog"), 5, "conflict")
        assert set(conflicts["Prog"]) == {"TAG:A", "TAG:B"}
        rows = _wait(lambda: [r for r in admin.consumer_progress("prog", ["Prog"])
                              if r["client_id"] and r["last_consume_time"]], 5, "owners and times")
        assert {r["client_id"] for r in rows} <= {a.client_id, b.client_id}
        assert cli_main(["--namesrv", cluster.namesrv, "consumer", "progress", "prog"]) == 0
        out = capsys.readouterr().out
        assert "WARNING" in out and "Prog" in out and a.client_id in out + b.client_id
    admin.shutdown()


def test_slow_listener_runs_in_parallel_within_one_queue(cluster):
    """A fast listener gets one task per pulled batch; a slow one is spread over the threads."""
    Admin(namesrv=cluster.namesrv).create_topic("Slow", queues=1)
    with Producer("pg", namesrv=cluster.namesrv) as p:
        for i in range(200):
            p.send_async(Message("Slow", str(i).encode()))
        p.send(Message("Slow", b"last"))
    lock, state, seen = threading.Lock(), {"now": 0, "max": 0}, set()

    def slow(msgs):
        with lock:
            state["now"] += 1
            state["max"] = max(state["max"], state["now"])
        time.sleep(0.01)
        with lock:
            state["now"] -= 1
            seen.update(m.body for m in msgs)
        return ConsumeResult.SUCCESS
    c = PushConsumer("slow-group", namesrv=cluster.namesrv, consume_from="first", threads=8)
    c.subscribe("Slow")
    c.register(slow)
    c.start()
    try:
        _wait(lambda: len(seen) == 201, 30, "every message consumed")
    finally:
        c.shutdown()
    assert state["max"] >= 3, f"at most {state['max']} listener calls ran at once"
