"""PullBuffer on its own: one pull per queue, pause at the cache limit and resume at half, a restart
drops what is buffered and supersedes the pull under way."""

from quiver.client.base import MessageQueue
from quiver.client.message import MessageExt
from quiver.client.pull_buffer import PullBuffer, QueueState
from quiver.client.queue_puller import Readable

MQ = MessageQueue("T", "a", 0)


def _msgs(first: int, n: int) -> list[MessageExt]:
    return [MessageExt("T", b"x", None, [], {}, f"id{o}", None, "a", 0, o, 0, 1, 2, o) for o in range(first, first + n)]


def _found(buf: PullBuffer, st: QueueState, gen: int, first: int, n: int) -> bool | None:
    return buf.found(st, gen, Readable(_msgs(first, n), first + n, 0))


def test_one_pull_at_a_time_and_a_pause_at_the_cache_limit_until_half_is_polled():
    buf = PullBuffer(cached_max=4)
    st = buf.queues[MQ] = QueueState(MQ, "h:1", 0)
    claim = buf.claim(st)
    assert claim == (st, 0, 0, False) and buf.claim(st) is None    # its one pull is under way
    assert _found(buf, st, 0, 0, 4) is True and buf.answered(st, 0)
    assert buf.claim(st) is None and st.paused                     # 4 buffered: paused
    with buf.cond:
        out, resume = buf.drain(1)
    assert [m.queue_offset for m in out] == [0] and resume == [] and st.consumed == 1
    with buf.cond:
        out, resume = buf.drain(None)
    assert [m.queue_offset for m in out] == [1, 2, 3] and resume == [st] and st.consumed == 4
    assert buf.claim(st) == (st, 0, 4, False)


def test_a_restart_drops_the_buffer_and_the_answer_of_the_pull_under_way():
    buf = PullBuffer(cached_max=100)
    st = buf.queues[MQ] = QueueState(MQ, "h:1", 0)
    _, gen, _, _ = buf.claim(st)
    assert _found(buf, st, gen, 0, 3) and buf.answered(st, gen)
    _, gen, _, _ = buf.claim(st)
    buf.restart(st, 50)
    assert _found(buf, st, gen, 3, 2) is None and not buf.answered(st, gen)   # superseded
    assert not buf.items and st.buffered == 0 and (st.next, st.consumed) == (50, 50)
    assert buf.moved(st, st.gen, 60, illegal=True) and st.consumed == 60
    assert buf.remove(MQ) is st and buf.claim(st) is None and MQ not in buf.queues
