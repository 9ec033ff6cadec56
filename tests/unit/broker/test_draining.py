"""The drain on SIGTERM (draining.py): writes and pulls refused, held pulls answered, sends in
flight waited for, then the resignation, then the stop; a second SIGTERM stops at once."""

from quiver.wire.codes import RequestCode, ResponseCode
from quiver_broker.draining import Drain


class FakeService:
    def __init__(self):
        self.handlers = {RequestCode.SEND_MESSAGE: "send", RequestCode.PULL_MESSAGE: "pull", RequestCode.PING: "ping"}
        self.timers, self.stopped = [], 0

    def call_later(self, delay, fn):
        self.timers.append(fn)

    def call_soon_threadsafe(self, fn):
        fn()

    def stop(self):
        self.stopped += 1

    def run_timers(self):
        timers, self.timers = self.timers, []
        for fn in timers:
            fn()


class Req:
    def reply(self, code, remark=""):
        self.code, self.remark = code, remark


def test_drain_refuses_new_work_waits_for_sends_in_flight_then_resigns_and_stops():
    svc, in_flight, held, resigned = FakeService(), [2], [], []
    d = Drain(svc, [RequestCode.SEND_MESSAGE], lambda: in_flight[0], lambda: held.append(1),
              lambda done: resigned.append(done), deadline_s=60)
    d.begin()
    assert held == [1] and svc.handlers[RequestCode.PING] == "ping"
    for code in (RequestCode.SEND_MESSAGE, RequestCode.PULL_MESSAGE):
        req = Req()
        svc.handlers[code](req)
        assert req.code == ResponseCode.SERVICE_NOT_AVAILABLE and "shutting down" in req.remark
    svc.run_timers()
    assert not resigned and not svc.stopped   # two sends still waiting for their flush
    in_flight[0] = 0
    svc.run_timers()
    assert len(resigned) == 1 and not svc.stopped
    resigned[0]()   # the controller answered
    assert svc.stopped == 1
    svc.run_timers()   # the resignation's own deadline passes later: no second stop
    assert svc.stopped == 1


def test_a_drain_past_its_deadline_stops_and_a_second_sigterm_stops_at_once():
    svc = FakeService()
    d = Drain(svc, [], lambda: 5, lambda: None, None, deadline_s=0.0)
    d.begin()
    assert svc.stopped == 1
    d.begin()
    assert svc.stopped == 2

