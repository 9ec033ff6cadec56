"""The consumer of bench.hops, in its own process: when each message reached the app.

    python -m bench.hops_listener NAMESRV TOPIC QUEUES COUNT SECONDS MODE [WORK_US]

MODE: push (PushConsumer, listener on the consume threads), push-inline (consume_inline:
the listener on the IO thread), pull (PullConsumer.poll, as `python -m bench` e2e),
pull-direct (direct_poll); WORK_US: a push listener sleeps this long a message after noting
it. Messages whose property "i" is -1 are warm-up: "ready" is printed once one has come
from each of the topic's QUEUES queues (every queue owned and pulled). Then prints one JSON object: {"seen": [[i, t, born_ms, store_ms, queue id], ...],
"threads": {thread name: messages}, "gc": [[start, seconds, generation], ...], "stalls": [[start,
seconds], ...] (a ticker thread's gaps of 30 ms or more), "rusage",
"pulls": [[queue id, sent, answered], ...] (the IO thread's pulls; not direct_poll's held ones)},
t = time.time() when the listener (or poll) got it; "gc" the collector's pauses of 1 ms or
more and "rusage" the context switches of this process (involuntary: it was preempted) and its CPU
seconds ("cpu_s"), from the first timed message to the last.
"""

import gc
import json
import resource
import sys
import threading
import time


class GcPauses:
    """The cyclic collector's pauses of at least `min_s` in this process (gc.callbacks)."""

    def __init__(self, min_s: float = 0.001):
        self.min_s, self.pauses, self._t0 = min_s, [], 0.0
        gc.callbacks.append(self._on)

    def _on(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t0 = time.time()
        elif time.time() - self._t0 >= self.min_s:
            self.pauses.append([self._t0, time.time() - self._t0, info.get("generation")])

    def close(self) -> list:
        gc.callbacks.remove(self._on)
        return self.pauses


class Stalls:
    """Gaps of at least `min_s` between the ticks of a thread that sleeps `tick_s`: the times this
    process (or the GIL) let none of its threads run."""

    def __init__(self, tick_s: float = 0.005, min_s: float = 0.03):
        self.gaps: list[list[float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(tick_s, min_s), name="stall-ticker", daemon=True)
        self._thread.start()

    def _run(self, tick_s: float, min_s: float) -> None:
        last = time.time()
        while not self._stop.wait(tick_s):
            now = time.time()
            if now - last - tick_s >= min_s:
                self.gaps.append([last, now - last])
            last = now

    def close(self) -> list:
        self._stop.set()
        self._thread.join(1)
        return self.gaps


def watch_pulls(client, pulls: list) -> None:
    """Note [queue id, sent, answered] (time.time()) of every pull the client's IO thread sends:
    the instance's transport.send wrapped, nothing in Quiver changed."""
    transport = broker_access(client).transport
    send = transport.send

    def timed(addr, code, ext, bodies, callback, timeout=3.0):
        if getattr(code, "CODE", code) != RequestCode.PULL_MESSAGE:
            return send(addr, code, ext, bodies, callback, timeout)
        qid = (ext or {}).get("q") if isinstance(code, int) else code.queue_id
        sent = time.time()

        def answered(env):
            pulls.append([qid, sent, time.time()])
            callback(env)
        return send(addr, code, ext, bodies, answered, timeout)
    transport.send = timed


def switches() -> dict:
    """This process's context switches and CPU seconds (user + system, all threads) so far."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return {"voluntary": r.ru_nvcsw, "involuntary": r.ru_nivcsw, "cpu_s": r.ru_utime + r.ru_stime}

from quiver import ConsumeResult, PullConsumer, PushConsumer
from quiver.client.access import broker_access
from quiver.wire.codes import RequestCode


def main(namesrv: str, topic: str, queues: int, count: int, seconds: float, mode: str, work_s: float = 0.0) -> None:
    seen: list[list] = []
    start: list[dict] = []     # switches() at the first timed message and at the last
    threads: dict[str, int] = {}
    warm: set[int] = set()
    done = threading.Event()
    lock = threading.Lock()

    def got(msgs) -> None:
        now = time.time()
        name = threading.current_thread().name.rstrip("0123456789_")
        with lock:
            for m in msgs:
                i = int(m.properties.get("i", "-1"))
                if i < 0:
                    if len(warm) < queues:
                        warm.add(m.queue_id)
                        if len(warm) == queues:
                            print("ready", flush=True)
                    continue
                if not start:
                    start.append(switches())
                seen.append([i, now, m.born_timestamp, m.store_timestamp, m.queue_id])
                threads[name] = threads.get(name, 0) + 1
            if len(seen) >= count and not done.is_set():
                start.append(switches())   # the last timed message: shutdown is not counted
                done.set()

    deadline = time.monotonic() + seconds
    pauses, stalls, pulls = GcPauses(), Stalls(), []
    if mode.startswith("push"):
        c = PushConsumer("hops", namesrv=namesrv, consume_from="last", consume_inline=mode == "push-inline")
        c.subscribe(topic)

        def listener(msgs):
            got(msgs)
            if work_s:
                time.sleep(work_s * len(msgs))   # a listener's I/O (a database write): the GIL is free meanwhile
            return ConsumeResult.SUCCESS
        c.register(listener)
        c.start()
        watch_pulls(c, pulls)
        try:
            done.wait(max(0.0, deadline - time.monotonic()))
        finally:
            c.shutdown()
    else:
        with PullConsumer("hops", namesrv=namesrv, consume_from="last", direct_poll=mode == "pull-direct") as pc:
            pc.subscribe(topic)
            if mode == "pull":   # direct_poll holds its pulls on the polling thread's sockets: not seen here
                watch_pulls(pc, pulls)
            while not done.is_set() and time.monotonic() < deadline:
                msgs = pc.poll(0.05)
                if msgs:
                    got(msgs)
    print(json.dumps({"seen": seen, "threads": threads, "gc": pauses.close(), "stalls": stalls.close(),
                      "rusage": {k: (start[1] if len(start) > 1 else switches())[k] - v for k, v in start[0].items()}
                      if start else switches(),
                      "pulls": pulls}), flush=True)


if __name__ == "__main__":
    a = sys.argv[1:]
    main(a[0], a[1], int(a[2]), int(a[3]), float(a[4]), a[5], float(a[6]) / 1e6 if len(a) > 6 else 0.0)
