"""A broker whose service thread is timed: what runs there between requests, in thread CPU time.

    python -m bench.hops --probe-broker        # the hops run's broker, probed; its report adds the table

`python -m bench.broker_probe <quiver_broker arguments>` runs the broker with Service._guard
(every timer, `every` step and cross-thread call) and Service._drain (a pass over the socket)
wrapped: per task name its count, how many took 1 ms of CPU or more and the longest; the
cyclic GC's collections per generation, before and after start-up objects are frozen, and
each one of 0.5 ms or more while serving (generation, CPU ms). Thread CPU time, not
wall time: on a loaded machine a task preempted for 50 ms did not hold the GIL for them. The
figures go to the JSON file named by $QUIVER_PROBE_OUT when the broker exits.
`probing(out)` makes quiver.tools.local start brokers this way (bench.hops uses it).
"""

import collections
import contextlib
import gc
import json
import os
import runpy
import sys
import time

SLOW_S = 0.001
GC_SLOW_S = 0.0005


class Probe:
    def __init__(self):
        self.count = collections.Counter()
        self.slow = collections.Counter()
        self.worst: dict[str, float] = collections.defaultdict(float)
        self.gc: list[tuple[int, float]] = []       # serving: (generation, CPU ms) of the slow ones
        self.gc_count: collections.Counter = collections.Counter()
        self._gc_t0 = 0.0

    def timed(self, name: str, fn, *args):
        t0 = time.thread_time()
        try:
            return fn(*args)
        finally:
            d = time.thread_time() - t0
            self.count[name] += 1
            self.worst[name] = max(self.worst[name], d)
            if d >= SLOW_S:
                self.slow[name] += 1

    def on_gc(self, phase: str, info: dict) -> None:
        """Collections once serving (start-up objects frozen) are counted apart from start-up's."""
        if phase == "start":
            self._gc_t0 = time.thread_time()
            return
        d, when = time.thread_time() - self._gc_t0, "serving" if gc.get_freeze_count() else "starting"
        self.gc_count[f"{when} gen{info['generation']}"] += 1
        if d >= GC_SLOW_S and when == "serving":
            self.gc.append((info["generation"], round(d * 1e3, 2)))

    def doc(self) -> dict:
        return {"tasks": {k: {"count": n, "over_1ms": self.slow[k], "max_ms": round(self.worst[k] * 1e3, 3)}
                          for k, n in self.count.most_common()},
                "gc_over_0_5ms": self.gc, "gc_collections": dict(self.gc_count)}


def task_name(fn) -> str:
    """A callable's name; an `every` step by the name it was given."""
    name = getattr(fn, "__qualname__", type(fn).__name__)
    if name.endswith("every.<locals>.tick") and fn.__closure__:
        given = sorted(c.cell_contents for c in fn.__closure__ if isinstance(c.cell_contents, str))
        return "every " + ",".join(given)
    return name


def install(service_cls, probe: Probe) -> None:
    guard, drain = service_cls._guard, service_cls._drain
    service_cls._guard = lambda self, fn, *args: probe.timed(task_name(fn), guard, self, fn, *args)
    service_cls._drain = lambda self: probe.timed("socket drain", drain, self)
    gc.callbacks.append(probe.on_gc)


@contextlib.contextmanager
def probing(out: str):
    """Brokers started by quiver.tools.local meanwhile run as `bench.broker_probe`, writing to `out`."""
    from quiver.tools import local
    start = local.ServiceProcess.start

    def probed(svc):
        if svc.module == "quiver_broker":
            root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
            path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
            svc.module, svc.env = "bench.broker_probe", {**svc.env, "QUIVER_PROBE_OUT": out, "PYTHONPATH": path}
        return start(svc)

    local.ServiceProcess.start = probed
    try:
        yield
    finally:
        local.ServiceProcess.start = start


def main(argv: list[str]) -> None:
    from quiver.runtime.service import Service
    probe, out = Probe(), os.environ["QUIVER_PROBE_OUT"]
    install(Service, probe)
    try:
        sys.argv = ["quiver_broker", *argv]
        runpy.run_module("quiver_broker", run_name="__main__")
    finally:
        with open(out, "w") as f:
            json.dump(probe.doc(), f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
