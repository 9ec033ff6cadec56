"""Group commit's window: the puts of one service-loop turn ask the flush thread once, after the turn."""

from quiver.wire.codes import ResponseCode
from quiver_broker.group_commit import GroupCommit


class _Store:
    def __init__(self):
        self.flushed_offset = 0
        self.asked: list[int] = []

    def request_flush(self, offset: int) -> None:
        self.asked.append(offset)


class _Req:
    answered = False

    def __init__(self):
        self.codes: list[int] = []

    def reply(self, code, remark="", ext=None):
        self.codes.append(code)
        self.answered = True


def _commit(defer):
    store = _Store()
    return store, GroupCommit(store, True, 5000, notify=lambda topic, queue_id: None, defer=defer)


def test_one_flush_request_per_turn_after_its_puts():
    turn: list = []
    store, gc = _commit(turn.append)
    reqs = [_Req() for _ in range(3)]
    for n, req in enumerate(reqs):
        gc.wait(req, {}, [("T", n, 100 * (n + 1))])
    assert store.asked == [] and len(turn) == 1   # nothing asked while the turn still puts
    turn.pop()()
    assert store.asked == [300]                   # once, covering the turn's last put
    gc.wait(_Req(), {}, [("T", 0, 400)])          # the next turn asks again
    assert len(turn) == 1
    turn.pop()()
    assert store.asked == [300, 400]
    store.flushed_offset = 400
    gc.on_flushed(400)
    assert [r.codes for r in reqs] == [[ResponseCode.SUCCESS]] * 3


def test_turn_whose_puts_a_finished_flush_covered_asks_nothing():
    turn: list = []
    store, gc = _commit(turn.append)
    req = _Req()
    gc.wait(req, {}, [("T", 0, 100)])
    store.flushed_offset = 200    # the flush thread got past both first (the next wait catches up)
    gc.wait(_Req(), {}, [("T", 0, 200)])
    turn.pop()()
    assert store.asked == [] and req.codes == [ResponseCode.SUCCESS] and len(gc) == 0


def test_without_defer_every_wait_asks_at_once():
    store, gc = _commit(None)
    gc.wait(_Req(), {}, [("T", 0, 100)])
    gc.wait(_Req(), {}, [("T", 1, 200)])
    assert store.asked == [100, 200]
