"""bench.broker_probe: service-thread tasks counted and timed in thread CPU, `every` steps by name."""

import gc
import time

from quiver.runtime.service import Service

from bench import broker_probe


class _Service:
    """The two methods the probe wraps, as Service has them."""

    def _guard(self, fn, *args):
        fn(*args)

    def _drain(self):
        pass


def _busy(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_tasks_counted_and_the_slow_ones_told_apart():
    probe = broker_probe.Probe()
    broker_probe.install(_Service, probe)
    try:
        svc = _Service()
        svc._guard(_busy, 0.003)
        svc._guard(_busy, 0.0)
        svc._drain()
        time.sleep(0.005)   # waiting is not CPU: only what ran counts
    finally:
        gc.callbacks.remove(probe.on_gc)
    doc = probe.doc()["tasks"]
    assert doc["_busy"]["count"] == 2 and doc["_busy"]["over_1ms"] == 1 and doc["_busy"]["max_ms"] >= 3.0
    assert doc["socket drain"] == {"count": 1, "over_1ms": 0, "max_ms": doc["socket drain"]["max_ms"]}
    assert doc["socket drain"]["max_ms"] < 1.0
    assert set(probe.doc()["gc_collections"]) <= {f"{w} gen{g}" for w in ("starting", "serving") for g in range(3)}


def test_every_step_named_by_its_name():
    svc = Service.__new__(Service)
    svc._timers, svc._seq = [], iter(range(10))
    svc.failures = None
    svc.every("pop_revive", 0.2, lambda: None)
    tick = svc._timers[0][2]
    assert broker_probe.task_name(tick) == "every pop_revive"
    assert broker_probe.task_name(_busy) == "_busy"
