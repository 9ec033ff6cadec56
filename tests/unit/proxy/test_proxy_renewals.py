"""Renewals: PushConsumer deliveries kept invisible until acked, acked by their latest handle."""

import threading

from quiver.errors import QuiverError
from quiver.wire.codes import ResponseCode
from quiver.wire.receipt_handle import ReceiptHandle

from quiver_proxy.renewals import RENEW_AHEAD_MS, Renewals

T0 = 1_700_000_000_000


def handle(offset: int, pop_ts: int = T0, invisible_ms: int = 30_000) -> ReceiptHandle:
    return ReceiptHandle("b0", "Orders", 0, offset, pop_ts, invisible_ms, 0)


class Broker:
    """What the broker does with a change of invisible time: a new pop time, the old handle stale."""

    def __init__(self):
        self.in_flight: dict[int, ReceiptHandle] = {}
        self.calls = 0

    def deliver(self, offset: int) -> ReceiptHandle:
        h = self.in_flight[offset] = handle(offset)
        return h

    def change(self, group: str, h: ReceiptHandle, invisible_ms: int) -> ReceiptHandle:
        self.calls += 1
        if self.in_flight.get(h.offset) != h:
            raise QuiverError(ResponseCode.RECEIPT_HANDLE_EXPIRED, "stale handle")
        fresh = ReceiptHandle(h.broker, h.topic, h.queue_id, h.offset, h.pop_ts + 1000 * self.calls, invisible_ms, 0)
        self.in_flight[h.offset] = fresh
        return fresh


def test_renews_only_what_is_due_and_the_latest_handle_is_acked():
    b = Broker()
    r = Renewals(b.change, 30_000, 3_600_000)
    early, late = b.deliver(1), handle(2, pop_ts=T0 + 25_000)
    b.in_flight[2] = late
    r.track("c1", "g", [early, late], now_ms=T0)
    assert r.renew_due(now_ms=T0 + 30_000 - RENEW_AHEAD_MS - 1) == 0
    assert r.renew_due(now_ms=T0 + 30_000 - RENEW_AHEAD_MS) == 1     # only the first is due
    latest = r.take(early.encode())
    assert latest != early.encode() and ReceiptHandle.parse(latest) == b.in_flight[1]
    assert r.take(early.encode()) == early.encode()                   # ended: nothing more renewed
    assert len(r) == 1 and r.renewed == 1


def test_a_delivery_gone_at_the_broker_ends_and_the_others_go_on():
    b = Broker()
    r = Renewals(b.change, 30_000, 3_600_000)
    hs = [b.deliver(i) for i in range(3)]
    r.track("c1", "g", hs, now_ms=T0)
    del b.in_flight[1]                         # acked through another proxy
    assert r.renew_due(now_ms=T0 + 29_000) == 2
    assert len(r) == 2 and r.take(hs[1].encode()) == hs[1].encode()


def test_a_failing_change_does_not_stop_the_round():
    calls = []

    def change(group, h, ms):
        calls.append(h.offset)
        if h.offset == 0:
            raise RuntimeError("boom")
        return handle(h.offset, pop_ts=h.pop_ts + 1, invisible_ms=ms)
    r = Renewals(change, 30_000, 3_600_000)
    r.track("c1", "g", [handle(0), handle(1)], now_ms=T0)
    assert r.renew_due(now_ms=T0 + 29_000) == 1 and calls == [0, 1] and len(r) == 1


def test_renewal_stops_after_the_max_time_and_for_a_terminated_client():
    b = Broker()
    r = Renewals(b.change, 30_000, 60_000)
    r.track("c1", "g", [b.deliver(1)], now_ms=T0)
    r.track("c2", "g", [b.deliver(2)], now_ms=T0)
    assert r.drop_client("c2") == 1 and len(r) == 1
    assert r.renew_due(now_ms=T0 + 60_000) == 0 and len(r) == 0     # past --renew-max-ms: let it come back


def test_take_waits_for_a_renewal_under_way():
    started, release = threading.Event(), threading.Event()
    h0 = handle(1)

    def slow_change(group, h, ms):
        started.set()
        release.wait(5)
        return handle(1, pop_ts=h.pop_ts + 5, invisible_ms=ms)
    r = Renewals(slow_change, 30_000, 3_600_000)
    r.track("c1", "g", [h0], now_ms=T0)
    t = threading.Thread(target=r.renew_due, args=(T0 + 29_000,))
    t.start()
    assert started.wait(5)
    taken = []
    taker = threading.Thread(target=lambda: taken.append(r.take(h0.encode())))
    taker.start()
    taker.join(0.2)
    assert taker.is_alive()          # the renewal's handle, not the one it replaces, is what gets acked
    release.set()
    t.join(5)
    taker.join(5)
    assert ReceiptHandle.parse(taken[0]).pop_ts == T0 + 5
