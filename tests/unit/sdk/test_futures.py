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


def test_set_results_completes_each_future_with_its_result_waited_on_or_not():
    import threading
    import pytest
    from concurrent.futures import InvalidStateError
    seen = []
    quiet = [futures.LightFuture() for _ in range(3)]
    called = futures.LightFuture(lambda f: seen.append(f.result()))
    waited = futures.LightFuture()
    got = []
    waiter = threading.Thread(target=lambda: got.append(waited.result(10)))
    waiter.start()
    while waited._cond is None:   # the waiter has built its Condition: the slow path must wake it
        threading.Event().wait(0.001)
    cancelled = futures.LightFuture()
    cancelled.cancel()
    plain = Future()
    fs = [*quiet, called, waited, plain, cancelled]
    with pytest.raises(InvalidStateError):   # as set_result on a cancelled future: after the others
        futures.set_results(fs, list(range(len(fs))))
    waiter.join(10)
    assert [f.result(0) for f in fs[:6]] == [0, 1, 2, 3, 4, 5]
    assert seen == [3] and got == [4] and cancelled.cancelled()


def test_light_futures_work_with_wait_and_callbacks_added_before_and_after():
    import threading
    from concurrent.futures import as_completed, wait
    seen = []
    fs = [futures.LightFuture(), futures.LightFuture(lambda f: seen.append("built")), futures.LightFuture()]
    fs[0].add_done_callback(lambda f: seen.append("added"))   # builds the Condition: lists from here on
    timer = threading.Timer(0.05, lambda: [f.set_result(i) for i, f in enumerate(fs)])
    timer.start()
    done, _ = wait(fs, timeout=10)
    timer.join()
    assert len(done) == 3 and sorted(f.result() for f in as_completed(fs)) == [0, 1, 2]
    fs[2].add_done_callback(lambda f: seen.append("late"))    # finished: called at once
    assert sorted(seen) == ["added", "built", "late"]
    assert futures.LightFuture._waiters == () and futures.LightFuture._done_callbacks == ()
