"""Live offset reset over real processes, RocketMQ's OffsetResetIT: a running PushConsumer and
PullConsumer are reset to the start and consume everything again; a stopped group's reset is
reported as such (CLI) and its next start resumes from the reset point."""

import collections
import threading
import time

from quiver import Admin, ConsumeResult, Message, Producer, PullConsumer, PushConsumer
from quiver.tools.cli import main as cli_main
from support.waiting import wait_for

TOPIC = "ResetLive"


def _send(namesrv, bodies):
    with Producer("reset-pg", namesrv=namesrv) as p:
        for f in [p.send_async(Message(TOPIC, b)) for b in bodies]:
            f.result(10)


class _Pushed:
    """A PushConsumer's deliveries, in order."""

    def __init__(self, namesrv, group, **kw):
        self.got, self.lock = [], threading.Lock()
        self.c = PushConsumer(group, namesrv=namesrv, consume_from="first", **kw)
        self.c.subscribe(TOPIC)
        self.c.register(self._listen)

    def _listen(self, msgs):
        with self.lock:
            self.got.extend(m.body.decode() for m in msgs)
        return ConsumeResult.SUCCESS

    def since(self, n: int) -> list[str]:
        with self.lock:
            return self.got[n:]


class _Polled:
    """A PullConsumer polled on its own thread until stopped."""

    def __init__(self, namesrv, group, **kw):
        self.got, self.stop = [], threading.Event()
        self.c = PullConsumer(group, namesrv=namesrv, consume_from="first", **kw)
        self.c.subscribe(TOPIC)
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self.stop.is_set():
            self.got.extend(m.body.decode() for m in self.c.poll(0.2))

    def since(self, n: int) -> list[str]:
        return self.got[n:]


def _group_offsets(admin, group):
    return sum(admin.consumer_offset(group, mq) or 0 for mq in admin.queues(TOPIC))


def test_live_reset_of_a_running_push_and_pull_consumer_consumes_everything_again(cluster, capsys):
    admin = Admin(namesrv=cluster.namesrv)
    admin.create_topic(TOPIC, queues=4)
    before_first = int(time.time() * 1000) - 1
    bodies = [f"m{i}" for i in range(200)]
    _send(cluster.namesrv, [b.encode() for b in bodies])
    push = _Pushed(cluster.namesrv, "reset-push", commit_interval_ms=200)
    pull = _Polled(cluster.namesrv, "reset-pull", commit_interval_ms=200)
    with push.c, pull.c:
        pull.thread.start()
        wait_for(lambda: len(push.got) >= 200 and len(pull.got) >= 200, 30, "200 messages consumed by both")
        wait_for(lambda: _group_offsets(admin, "reset-push") == _group_offsets(admin, "reset-pull") == 200, 10,
                 "both groups' offsets committed at the end")
        assert sorted(push.got) == sorted(pull.got) == sorted(bodies)
        n_push, n_pull = len(push.got), len(pull.got)

        done = admin.reset_offset("reset-push", TOPIC, before_first)
        assert done.online and done.members == 1 and set(done.offsets.values()) == {0}
        assert cli_main(["--namesrv", cluster.namesrv, "consumer", "reset", "reset-pull", "--topic", TOPIC,
                         "--timestamp", str(before_first)]) == 0
        assert "group reset-pull is online: 1 member(s) told" in capsys.readouterr().out

        wait_for(lambda: len(push.since(n_push)) >= 200 and len(pull.since(n_pull)) >= 200, 30,
                 "everything consumed again after the reset")
        _send(cluster.namesrv, [f"after{i}".encode() for i in range(20)])   # and both go on
        wait_for(lambda: len(push.since(n_push)) >= 220 and len(pull.since(n_pull)) >= 220, 30,
                 "messages sent after the reset")
        wait_for(lambda: _group_offsets(admin, "reset-push") == _group_offsets(admin, "reset-pull") == 220, 10,
                 "offsets committed at the new end")
        time.sleep(0.5)
        pull.stop.set()
        pull.thread.join(5)
    want = collections.Counter(bodies + [f"after{i}" for i in range(20)])
    assert collections.Counter(push.since(n_push)) == want    # nothing skipped, nothing twice
    assert collections.Counter(pull.since(n_pull)) == want
    assert push.c.stats()["offset_resets"] == pull.c.stats()["offset_resets"] == 4
    admin.shutdown()


def test_reset_of_a_stopped_consumer_group_is_reported_and_its_next_start_resumes_there(cluster, capsys):
    admin = Admin(namesrv=cluster.namesrv)
    admin.create_topic(TOPIC, queues=2)
    _send(cluster.namesrv, [f"old{i}".encode() for i in range(20)])
    time.sleep(0.01)
    cut = int(time.time() * 1000)
    time.sleep(0.01)
    _send(cluster.namesrv, [f"new{i}".encode() for i in range(30)])
    first = _Pushed(cluster.namesrv, "reset-stopped")
    with first.c:
        wait_for(lambda: len(first.got) >= 50, 20, "the first run consumed everything")
    assert _group_offsets(admin, "reset-stopped") == 50

    assert cli_main(["--namesrv", cluster.namesrv, "consumer", "reset", "reset-stopped", "--topic", TOPIC,
                     "--timestamp", str(cut)]) == 0
    out = capsys.readouterr().out
    assert "group reset-stopped is not online: offsets stored; it resumes from them at its next start" in out
    assert _group_offsets(admin, "reset-stopped") == 20

    second = _Pushed(cluster.namesrv, "reset-stopped")   # consume_from does not matter: an offset is stored
    with second.c:
        wait_for(lambda: len(second.got) >= 30, 20, "the second run resumed at the reset point")
        time.sleep(0.5)
    assert sorted(second.got) == sorted(f"new{i}" for i in range(30))
    admin.shutdown()
