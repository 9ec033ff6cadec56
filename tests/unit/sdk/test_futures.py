"""LightFuture leans on Future's private state names: they must be the ones Future uses."""

from concurrent.futures import Future

from quiver.wire import futures


def test_light_future_states_are_the_ones_future_uses():
    f = Future()
    assert f._state == futures.PENDING
    f.cancel()
    assert f._state == futures.CANCELLED
    f.set_running_or_notify_cancel()
    assert f._state == futures.CANCELLED_AND_NOTIFIED
    g = Future()
    g.set_result(1)
    assert g._state == futures.FINISHED
