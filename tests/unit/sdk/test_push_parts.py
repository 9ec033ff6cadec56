"""PushConsumer's parts work from what they are given: the consume service (listener calls, send-back,
orderly relock) and the POP loop run without a consumer; the POP retry delay comes from the delay level
table setting; quiver.client has no import circle."""

import ast
import pathlib
import threading

import pytest

import quiver.client
from quiver.client.base import MessageQueue
from quiver.client.consume_service import ConsumeService
from quiver.client.message import RECONSUME_DEFAULT, ConsumeResult, MessageExt
from quiver.client.options import ConsumerOptions
from quiver.client.pop_push import PopPushLoop, retry_delay_ms
from quiver.client.process_queue import DelayedCalls, ProcessQueue
from quiver.wire import requests as rq
from quiver.wire.receipt_handle import MIN_INVISIBLE_MS
from support.waiting import wait_for

MQ = MessageQueue("T", "a", 0)


def _msg(offset: int, reconsume: int = 0) -> MessageExt:
    return MessageExt("T", b"%d" % offset, None, [], {}, f"id{offset}", None, "a", 0, offset, reconsume, 1, 2,
                      100 + offset)


class _Parts:
    """What a PushConsumer gives its consume service, recorded."""

    def __init__(self, listener, orderly=False, relock=True, **options):
        self.sent, self.commits, self.relocks = [], [], []
        self.timer = DelayedCalls("test-consume")
        self.service = ConsumeService("G", ConsumerOptions(**options), listener, orderly=orderly, broadcast=False,
                                      timer=self.timer, call_broker=lambda addr, req: self.sent.append((addr, req)),
                                      commit=lambda pq, off: self.commits.append(off),
                                      relock=lambda pq: self.relocks.append(pq.mq) or relock)

    def close(self):
        self.service.close()
        self.timer.stop()


@pytest.fixture
def parts():
    made = []

    def make(*args, **kw):
        made.append(_Parts(*args, **kw))
        return made[-1]
    yield make
    for p in made:
        p.close()


def test_consume_service_commits_what_it_consumed_and_sends_failures_back(parts):
    p = parts(lambda msgs: ConsumeResult.SUCCESS if msgs[0].queue_offset != 1 else ConsumeResult.RECONSUME_LATER,
              consume_inline=True)
    pq = ProcessQueue(MQ, "h:1", 0)
    msgs = [_msg(i) for i in range(3)]
    pq.add(msgs, 3)
    p.service.dispatch(pq, msgs)
    assert p.commits == [3]
    assert [(addr, req.offset, req.origin_topic) for addr, req in p.sent] == [("h:1", 101, "T")]
    assert isinstance(p.sent[0][1], rq.ConsumerSendMsgBack) and p.sent[0][1].group == "G"


def test_orderly_queue_with_a_stale_lock_is_locked_again_through_its_callable(parts):
    got = []
    p = parts(lambda msgs: got.extend(msgs) or ConsumeResult.SUCCESS, orderly=True)
    pq = ProcessQueue(MQ, "h:1", 0)
    pq.add([_msg(0)], 1)
    p.service.dispatch(pq, [_msg(0)])   # not locked yet: no listener call, a relock
    wait_for(lambda: p.relocks == [MQ] and pq.locked, 10, "the relock")
    wait_for(lambda: p.commits == [1], 10, "the batch consumed after the relock")
    assert [m.queue_offset for m in got] == [0]


@pytest.mark.parametrize("later, reconsume, want", [
    (RECONSUME_DEFAULT, 0, 3_000), (RECONSUME_DEFAULT, 1, 4_000),
    (RECONSUME_DEFAULT, 9, 4_000), (ConsumeResult.later(delay_level=1), 5, 1_000),
    (ConsumeResult.later(seconds=7), 0, 7_000)])
def test_pop_retry_delay_comes_from_the_delay_level_table_setting(later, reconsume, want):
    levels = ConsumerOptions(delay_levels_ms=[1_000, 2_000, 3_000, 4_000]).delay_levels_ms
    assert retry_delay_ms(later, reconsume, levels) == max(want, MIN_INVISIBLE_MS)


def test_default_table_is_rocketmqs():
    levels = ConsumerOptions().delay_levels_ms
    assert retry_delay_ms(RECONSUME_DEFAULT, 0, levels) == 10_000    # level 3
    assert retry_delay_ms(RECONSUME_DEFAULT, 15, levels) == 7_200_000
    assert retry_delay_ms(RECONSUME_DEFAULT, 99, levels) == 7_200_000
    with pytest.raises(ValueError, match="delay_levels_ms"):
        ConsumerOptions(delay_levels_ms=[])
    with pytest.raises(ValueError, match="delay_levels_ms"):
        ConsumerOptions(delay_levels_ms=["1s"])


class _Popper:
    group = "G"

    def __init__(self, msgs):
        self.msgs, self.acked, self.changed = list(msgs), [], []
        self.received = threading.Event()

    def receive(self, subs, n, invisible_ms, wait_s):
        out, self.msgs = self.msgs[:n], self.msgs[n:]
        if not out:
            self.received.wait(0.05)
        return out

    def ack(self, m):
        self.acked.append(m.queue_offset)

    def change_invisible(self, m, ms):
        self.changed.append((m.queue_offset, ms))


def test_pop_loop_acks_successes_and_delays_failures_by_the_setting(parts):
    p = parts(lambda msgs: ConsumeResult.SUCCESS if msgs[0].queue_offset % 2 else ConsumeResult.RECONSUME_LATER)
    opts = ConsumerOptions(delay_levels_ms=[1_000, 2_000, 3_000, 4_000, 5_000], consume_threads=2)
    popper = _Popper([_msg(0, reconsume=1), _msg(1), _msg(2)])
    loop = PopPushLoop(popper, p.service, lambda: {"T": None}, opts, 0.1)
    loop.start()
    try:
        wait_for(lambda: len(popper.acked) + len(popper.changed) == 3, 10, "three messages handled")
    finally:
        loop.stop()
    assert popper.acked == [1] and sorted(popper.changed) == [(0, 4_000), (2, 3_000)]


def _imports(path: pathlib.Path, names: set[str]) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        found = []
        if isinstance(node, ast.Import):
            found = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        out.update(n.split(".")[2] for n in found if n.startswith("quiver.client.") and n.split(".")[2] in names)
    return out - {path.stem}


def test_quiver_client_has_no_import_circle():
    # every import statement counts, those inside functions and under TYPE_CHECKING too
    root = pathlib.Path(quiver.client.__file__).parent
    names = {p.stem for p in root.glob("*.py")}
    graph = {p.stem: _imports(p, names) for p in root.glob("*.py")}
    done: set[str] = set()

    def visit(mod, path):
        assert mod not in path, "import circle: " + " -> ".join(path[path.index(mod):] + [mod])
        if mod in done:
            return
        for dep in sorted(graph[mod]):
            visit(dep, path + [mod])
        done.add(mod)
    for mod in sorted(graph):
        visit(mod, [])


def test_queue_locks_renew_marks_each_queue_and_resumes_the_ones_locked_again():
    from quiver.client.queue_locks import QueueLocks

    class _Reply:
        ext = rq.LockBatchReply(locked=[("T", 0)]).ext()
    sent = []
    locks = QueueLocks("G", "me", lambda addr, req: sent.append((addr, req)) or _Reply())
    held, lost = ProcessQueue(MQ, "h:1", 0), ProcessQueue(MessageQueue("T", "a", 1), "h:1", 0)
    lost.locked = True
    resumed = []
    locks.renew([held, lost], resumed.append)
    assert [(a, r.queues) for a, r in sent] == [("h:1", [("T", 0), ("T", 1)])]   # one request per broker
    assert held.locked and not lost.locked and resumed == [held]
